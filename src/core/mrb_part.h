/*
 * The parts of an interpreter beyond the core: the library (src/lib),
 * Redis, ...  Each describes itself with an mrb_part; the adapter hands
 * the core their list (mrb_server.parts, which src/lib/mrb_parts.c keeps
 * for both servers, as Lua's linit.c keeps its libraries), and the core
 * defines every part in each interpreter it creates and tells the parts
 * that keep something of a run when the run ends or waits.  The core
 * names no part, and a part's state is its own.
 */

#ifndef MRB_PART_H
#define MRB_PART_H

#include <mruby.h>

#include "mrb_interp.h"

/* Parts in one list: each has a bit of the interpreter's dirty mask. */
#define MRB_PARTS_MAX  32

struct mrb_part_s {
    const char  *name;

    /* Defines the part's classes in a new interpreter, in list order,
     * before mrblib loads.  May raise: the interpreter then fails to open
     * with the exception's message. */
    void       (*define)(mrb_state *mrb);

    /*
     * When an outermost run (a request's, or a startup script's: see
     * run->startup) ends after the part marked itself dirty
     * (mrb_part_dirty): drops what the run left, so that the next run
     * cannot see it.  Returns 1 to stay dirty (to be called again at the
     * end of the next run), 0 when nothing is left.  Raises nothing.
     * NULL: the part keeps nothing of a run.
     */
    int        (*run_end)(mrb_state *mrb, const mrb_run_rec *run);

    /*
     * For a run that waits while others run, when the part is dirty: what
     * the part keeps of the current run, as a value (nil: nothing), which
     * the core keeps for the run; run_end follows, so that the runs
     * meanwhile neither see nor replace it.  take may raise (out of
     * memory): it runs under protection.  put_back makes the value the
     * part's again before the run resumes; it allocates nothing and
     * raises nothing.  NULL (both): what the part keeps is per run
     * already (keyed by the mrb_run_rec), not the interpreter's.
     */
    mrb_value  (*take)(mrb_state *mrb);
    void       (*put_back)(mrb_state *mrb, mrb_value kept);
};

/*
 * Marks part dirty in mrb's interpreter: its run_end runs when the current
 * outermost run ends.  Finds part in the list (a few compares): a part
 * that marks itself often keeps a flag of its own and calls this when the
 * flag is first set in a run.
 */
void mrb_part_dirty(mrb_state *mrb, const mrb_part *part);

#endif /* MRB_PART_H */
