/*
 * String interpolation built in one allocation (mrb_irep_dstr.c says
 * where and why).
 */

#ifndef MRB_IREP_DSTR_H
#define MRB_IREP_DSTR_H

#include <mruby.h>
#include <mruby/irep.h>

#include "mrb_mruby_version.h"

/* mruby 3.1 and 3.3 only: 4.0's bytecode is left as its compiler made it,
 * and no builder is defined there. */
#if MRUBY_RELEASE_NO < 40000
#define MRB_IREP_DSTR_REWRITES  1
#endif

/* The name of the global the rewritten bytecode loads the builder from and
 * of the method it calls on it (mrb_api_define_hidden): names no script
 * can write as a variable or a call. */
#define MRB_IREP_DSTR_NAME  "(interpolation)"

/*
 * Rewrites the interpolations in irep and the ireps under it, which mrb's
 * code generator has just made (not yet run, dumped or shared, and before
 * mrb_irep_check_insert moves the code).  May raise (out of memory): the
 * caller runs it under protection, and an irep it did not finish is still
 * whole.
 */
void mrb_irep_dstr_fuse(mrb_state *mrb, mrb_irep *irep);

/* Defines the builder that the rewritten bytecode calls, in a new
 * interpreter. */
void mrb_irep_dstr_define(mrb_state *mrb);

#endif /* MRB_IREP_DSTR_H */
