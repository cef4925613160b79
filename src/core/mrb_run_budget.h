/*
 * The time budget of a run: how long a request's script may run before it
 * is stopped (mruby_run_timeout, mrubyRunTimeout; docs/security.md).
 *
 * A clock thread per worker process counts ticks of MRB_RUN_TICK_MS; a
 * run records the tick its budget ends at (its deadline) in its
 * interpreter, and the checks the compiler writes into the scripts'
 * bytecode (mrb_irep_check.h) compare the two: a load and a compare, no
 * system call, nothing armed per request.  Time a run spends waiting (a
 * sleep, a sub-request, Redis, a Mutex) is not counted: its deadline is
 * set aside while it waits and moved on when it resumes.
 *
 * Past its deadline a check raises Server::RunTimeout, which is not a
 * StandardError; ensure clauses then get MRB_RUN_GRACE_MS, after which
 * every check raises it again until the run ends, so a `rescue Exception`
 * cannot keep the run going; the run fails (a 500) even if the script
 * rescued it.  A run that is still going MRB_RUN_WATCHDOG_MS past its
 * deadline is inside C that no check reaches: the clock thread logs where
 * and ends the process, which the server replaces.
 */

#ifndef MRB_RUN_BUDGET_H
#define MRB_RUN_BUDGET_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <mruby.h>

#include "mrb_interp.h"

#define MRB_RUN_TICK_MS             5
#define MRB_RUN_TIMEOUT_MAX_MS      (86400 * 1000)
#define MRB_RUN_GRACE_MS            50
#define MRB_RUN_WATCHDOG_MS         2000

/* A deadline no tick reaches: no run, a run without a budget, or one that
 * waits. */
#define MRB_RUN_NO_DEADLINE         UINT64_MAX

/* Ticks since the clock started in this process (0 where it did not). */
extern _Atomic uint64_t  mrb_run_ticks;

static inline uint64_t
mrb_run_now(void)
{
    return atomic_load_explicit(&mrb_run_ticks, memory_order_relaxed);
}

/* Milliseconds left of the budget of the script running in mrb (at least
 * 1 while it runs), or -1: none (no run, no budget, no interpreter). */
static inline long
mrb_run_budget_left_ms(mrb_state *mrb)
{
    mrb_interp_head  *h = mrb->ud;
    uint64_t          deadline, now;

    if (h == NULL) {
        return -1;
    }

    deadline = atomic_load_explicit(&h->deadline, memory_order_relaxed);
    if (deadline == MRB_RUN_NO_DEADLINE) {
        return -1;
    }

    now = mrb_run_now();
    return deadline > now ? (long) ((deadline - now) * MRB_RUN_TICK_MS) : 1;
}

/*
 * Starts the clock thread of this process (a worker: nginx's
 * init_process, Apache's child_init), which also watches for runs stuck
 * in C.  0, or -1 with a message in err: then runs are not timed.
 */
int mrb_run_clock_start(char *err, size_t errlen);

/* Stops and joins the clock thread, if this process started one. */
void mrb_run_clock_stop(void);

/*
 * For the core's run code: the outermost run of interp begins, with a
 * budget of run->timeout_ms (0: none), and ends (no deadline then; a run
 * on a coroutine gets its resumer's back as it switches out, mrb_wait.c).
 * end returns 1 when the run was stopped (its error is then in
 * run->error), else 0.
 */
void mrb_run_budget_begin(mrb_interp *interp, mrb_run_rec *run);
int mrb_run_budget_end(mrb_interp *interp, mrb_run_rec *run);

/*
 * Around a wait of the run in progress in interp: pause gives the ticks
 * it had left and sets its deadline aside, resume gives them back from
 * now on.
 */
uint64_t mrb_run_budget_pause(mrb_interp *interp);
void mrb_run_budget_resume(mrb_interp *interp, uint64_t left);

/* Defines the checker the bytecode's checks call and Server::RunTimeout
 * (mrb_interp_open). */
void mrb_run_budget_define(mrb_state *mrb, struct RClass *server_class);

/* The interpreter's deadline, for the clock thread's watch (mrb_interp_open
 * registers it, mrb_interp_close removes it). */
void mrb_run_budget_watch(mrb_interp *interp);
void mrb_run_budget_unwatch(mrb_interp *interp);

#endif /* MRB_RUN_BUDGET_H */
