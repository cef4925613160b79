/*
 * The machine stack a C path may still use.  Every C path whose recursion
 * or stack use grows with its input asks mrb_stack_left() (mrb_coro.h)
 * before it goes a level deeper, on a coroutine's stack (256 KB unless
 * configured) and on a thread's own stack alike, and fails with an
 * exception while MRB_STACK_RESERVE is still free: enough for the
 * exception itself and for the frames of one level, so that the guard
 * page below a coroutine's stack (or the system's below a thread's) is not
 * reached.
 *
 * Who asks: each re-entry into the Ruby VM from C (mrb_stack_check.c), the
 * JSON parser and generator (a nesting level each), Regexp's compile (the
 * parse depth it allows Oniguruma, from what is left), Redis replies (a
 * nested array each).
 */

#ifndef MRB_STACK_H
#define MRB_STACK_H

#include <mruby.h>

#include "mrb_coro.h"

#define MRB_STACK_RESERVE  (32 * 1024)

/* Raises SystemStackError: "stack level too deep ...". */
void mrb_stack_raise(mrb_state *mrb) __attribute__((noinline, noreturn));

/* Raises SystemStackError when less than MRB_STACK_RESERVE is left. */
static inline void
mrb_stack_check(mrb_state *mrb)
{
    if (mrb_stack_left() < MRB_STACK_RESERVE) {
        mrb_stack_raise(mrb);
    }
}

#endif /* MRB_STACK_H */
