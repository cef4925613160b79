/*
 * The run's time checks in compiled bytecode (mrb_irep_check.c says where
 * they go and why).
 */

#ifndef MRB_IREP_CHECK_H
#define MRB_IREP_CHECK_H

#include <mruby.h>
#include <mruby/irep.h>

/* The name of the global each check loads the checker from and of the
 * method it calls on it (mrb_run_budget.c defines both): names no script
 * can write as a variable or a call. */
#define MRB_IREP_CHECK_NAME  "(run check)"

/*
 * Writes the checks into irep and the ireps under it, which mrb's code
 * generator has just made (not yet run, dumped or shared).  May raise
 * (out of memory): the caller runs it under protection, and an irep it
 * did not finish is still whole.
 */
void mrb_irep_check_insert(mrb_state *mrb, mrb_irep *irep);

#endif /* MRB_IREP_CHECK_H */
