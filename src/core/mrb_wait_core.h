/*
 * What the core's own files call of mrb_wait.c (adapters use mrb_wait.h):
 * the script run's choice of a coroutine (mrb_script.c), and the Ruby
 * methods that wait (mrb_wait_class.c).  mrb_wait.c calls the interpreter
 * (mrb_interp_exec on the coroutine); the interpreter never calls it.
 */

#ifndef MRB_WAIT_CORE_H
#define MRB_WAIT_CORE_H

#include <mruby.h>
#include <mruby/proc.h>

#include "mrb_interp_core.h"
#include "mrb_irep_flags.h"

/*
 * Whether a run of proc should go on a coroutine: it is not nested in
 * another run, and its code names something that waits (kept in its
 * irep's flags: MRB_WAIT_IREP_*), or a startup script's did
 * (mrb_wait_note_startup: then every run that may wait should,
 * mrb_interp_wait_always).  mrb_wait_quiet is the inline test of a proc
 * already scanned that names none.  Both say 1 when out of memory for the
 * interpreter's wait state: the run's start (mrb_wait_exec) then fails
 * and says so.
 */
static inline int
mrb_wait_quiet(const struct RProc *proc)
{
    return MRB_PROC_CFUNC_P(proc)
           || (proc->body.irep->flags
               & (MRB_WAIT_IREP_SCANNED | MRB_WAIT_IREP_NAMES))
              == MRB_WAIT_IREP_SCANNED;
}

int mrb_wait_wanted(mrb_interp *interp, struct RProc *proc);
void mrb_wait_note_startup(mrb_interp *interp, struct RProc *proc);

/* Before a run starts while the tables hold a suspended run's top-level
 * state (mrb_interp_held): takes that aside. */
void mrb_wait_set_aside(mrb_interp *interp);

/* Runs proc as run (may_wait) on a coroutine: 0, -1 or MRB_RUN_WAITING. */
int mrb_wait_exec(mrb_interp *interp, struct RProc *proc, mrb_run_rec *run);

/* Kernel#sleep, Server.sleep, Server::Async (sleep, Cancelled):
 * mrb_wait_class.c. */
void mrb_wait_define(mrb_state *mrb, struct RClass *server_class);

#endif /* MRB_WAIT_CORE_H */
