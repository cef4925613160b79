/*
 * The standard library scripts get (Regexp, JSON, Digest, ...): what the
 * originals built in as mruby gems, server-neutral, one class a file.
 * mrb_lib_define runs once per interpreter, when it is created, before
 * mrblib (whose Ruby parts of the library build on these).
 */

#ifndef MRB_LIB_H
#define MRB_LIB_H

#include <mruby.h>

#include "mrb_interp.h"

/* The library's state in an interpreter, at mrb_interp_head.lib. */
typedef struct {
    void           *regexp;         /* mrb_regexp.c's */
    unsigned        run_state:1;    /* a class keeps something of the run */

    /* looked up once: a name costs a symbol-table search each time */
    struct RClass  *regexp_class;
    struct RClass  *matchdata_class;
    mrb_sym         sym_string;     /* MatchData's hidden ivars */
    mrb_sym         sym_regexp;
} mrb_lib;

void mrb_lib_define(mrb_state *mrb);

/* The library's state of mrb's interpreter. */
static inline mrb_lib *
mrb_lib_get(mrb_state *mrb)
{
    return ((mrb_interp_head *) mrb->ud)->lib;
}

void mrb_lib_run_end_slow(mrb_state *mrb);

/*
 * Whether [s, s + len) is UTF-8: no overlong forms, surrogates or values
 * past U+10FFFF (Oniguruma's own check lets stray bytes such as 0xff pass;
 * CRuby's JSON generator refuses them too).
 */
int mrb_lib_utf8_valid(const char *s, size_t len);

/* The length of the UTF-8 character at s (s < end), by the same rules, or
 * 0 if it is not one. */
int mrb_lib_utf8_len(const char *s, const char *end);

/*
 * Called when an outermost run ends: drops what the run left in the
 * library (the last match) so that the next request cannot see it.
 */
static inline void
mrb_lib_run_end(mrb_state *mrb)
{
    mrb_lib  *lib = ((mrb_interp_head *) mrb->ud)->lib;

    if (lib != NULL && lib->run_state) {
        mrb_lib_run_end_slow(mrb);
    }
}

/*
 * For a run that waits while others run (mrb_wait.c): what the library
 * keeps of it (the last match) taken out and forgotten, so that the runs
 * meanwhile neither see nor replace it: 0 and *kept (nil: nothing), or -1
 * when that raised (out of memory: *kept is the exception, and the match
 * is forgotten all the same).  mrb_lib_put_back sets it again before the
 * run resumes; it allocates nothing.
 */
int mrb_lib_take(mrb_state *mrb, mrb_value *kept);
void mrb_lib_put_back(mrb_state *mrb, mrb_value kept);

#endif /* MRB_LIB_H */
