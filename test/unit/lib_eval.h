/*
 * What the tests of src/lib share: an interpreter as a server makes one
 * (library, mrblib, sealed), and a check that a Ruby expression, run as a
 * request script, gives what CRuby gives (compared by its inspect).
 */

#ifndef LIB_EVAL_H
#define LIB_EVAL_H

#include "mrb_interp.h"

/* A new sealed interpreter, or NULL; lib_interp_startup runs code as its
 * startup script before it is sealed. */
mrb_interp *lib_interp(void);
mrb_interp *lib_interp_startup(const char *code);

/*
 * Runs code as a request script in interp; returns 0 with the inspect of
 * its last value in out, or -1 with the error in out.
 */
int lib_eval(mrb_interp *interp, const char *code, char *out, size_t len);

/* lib_eval on a coroutine's stack of MRB_CORO_STACK_DEFAULT bytes, as a
 * script that waits runs. */
int lib_eval_on_coroutine(mrb_interp *interp, const char *code, char *out,
    size_t len);

/* Fails the test unless code's value inspects as expected (on a
 * coroutine's stack: coro). */
void lib_expect(mrb_interp *interp, const char *file, int line,
    const char *code, const char *expected, int coro);

#define CHECK_RUBY(interp, code, expected)                                  \
    lib_expect(interp, __FILE__, __LINE__, code, expected, 0)

#define CHECK_RUBY_ON_COROUTINE(interp, code, expected)                     \
    lib_expect(interp, __FILE__, __LINE__, code, expected, 1)

#endif /* LIB_EVAL_H */
