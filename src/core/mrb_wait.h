/*
 * Runs that wait: a request's script on a machine-stack coroutine
 * (mrb_coro.h), so that it can be suspended anywhere, even inside a block
 * or method that C called (a Hash.new default block, a to_s called by
 * interpolation, a <=> called by sort), and resumed later by the server's
 * event loop while other requests run.
 *
 * The adapter sets run->may_wait where a script may wait (its server can
 * wake it: mrb_server.wake_after).  mrb_script_run then returns 0 or -1 as
 * usual when the script ran to its end, or MRB_RUN_WAITING: the script is
 * suspended and run->waiting is the waiting run, which the core owns from
 * then on.  The adapter resumes it with mrb_wait_resume when what it waits
 * for happened, or cancels it with mrb_wait_cancel (the client left).
 *
 * A waiting run's run->data must outlive the adapter's frame: keep it with
 * the request.
 */

#ifndef MRB_WAIT_H
#define MRB_WAIT_H

#include "mrb_interp.h"
#include "mrb_script.h"     /* MRB_RUN_WAITING */

/*
 * Resumes a waiting run until it waits again (MRB_RUN_WAITING) or ends
 * (0, or -1 with the one-line error in out->error).  When it ends, its
 * result, returned flag and error are copied to out (an mrb_run_rec the caller
 * owns) and waiting is gone.
 */
int mrb_wait_resume(mrb_interp *interp, mrb_run_rec *waiting,
    mrb_run_rec *out);

/*
 * Ends a waiting run now: the call it waits in raises
 * Server::Async::Cancelled (not a StandardError: a plain rescue does not
 * catch it; ensure clauses run), and its coroutine and stack are freed
 * before this returns.  waiting is gone.
 */
void mrb_wait_cancel(mrb_interp *interp, mrb_run_rec *waiting);

/*
 * For C called from Ruby: the run that would wait if the script waited
 * now, or raises RuntimeError "what: cannot wait here (...)" where it
 * cannot (not on a coroutine: the log phase, filters, startup scripts; or
 * inside a run nested in it).
 */
mrb_run_rec *mrb_wait_check(mrb_state *mrb, const char *what);

/*
 * Suspends the current run (mrb_wait_check first) until the adapter
 * resumes it.  Raises Server::Async::Cancelled if it was cancelled.
 */
void mrb_wait(mrb_state *mrb);

/* The longest sleep: a day (longer waits are mistakes, and would overflow
 * nginx's timer). */
#define MRB_WAIT_SLEEP_MAX_MS  (86400 * 1000)

/*
 * Waits msec milliseconds (0 to MRB_WAIT_SLEEP_MAX_MS, else ArgumentError):
 * on a server that can wake a run
 * (mrb_server.wake_after), suspends the run, or where it cannot wait
 * raises (nginx) or blocks the thread (mrb_server.sleep_blocks, Apache);
 * on the others, blocks the thread.
 */
void mrb_wait_sleep(mrb_state *mrb, mrb_int msec, const char *what);

/* mrb_wait_fd: the run was cancelled while it waited, or cannot go on. */
#define MRB_WAIT_CANCELLED  (-2)

/*
 * Waits until descriptor fd is ready for events (MRB_FD_READ or
 * MRB_FD_WRITE) or msec milliseconds pass.  Suspends the run where it can
 * (a server with mrb_server.wake_on_fd, a run on a coroutine, not nested
 * in another run; what it set at top level is its own across the wait,
 * as across a sleep); blocks the thread in poll() everywhere else
 * (Apache, startup scripts, the log phase): never raises, so that C code
 * can give up what it started before it raises.  Returns 1 (ready), 0
 * (the time passed), -1 (poll failed: errno), or MRB_WAIT_CANCELLED: the
 * request is going away, or the run's top-level state was lost while it
 * waited (out of memory); the caller undoes what it started (a command in
 * flight on fd) and raises with mrb_wait_raise_cancelled.
 */
int mrb_wait_fd(mrb_state *mrb, int fd, int events, mrb_int msec);

/* Raises Server::Async::Cancelled (or the NoMemoryError that lost the
 * run's top-level state), after mrb_wait_fd said so. */
void mrb_wait_raise_cancelled(mrb_state *mrb);

/*
 * The machine stack of each run that may wait, for interpreters created
 * from now on (MRB_CORO_STACK_DEFAULT, 256 KB, unless set).
 */
void mrb_wait_set_stack_size(size_t size);

/* Finished stacks each interpreter created from now on keeps for reuse
 * through trims (MRB_CORO_KEEP_DEFAULT, 64, unless set; 0: mmap and munmap
 * each). */
void mrb_wait_set_pool_keep(unsigned keep);

/*
 * Stacks beyond the pool's keep that no run took for a whole period go
 * back (mrb_coro_pool_trim; mrb_server.trim_later says who calls this).
 * Returns 1 while interp keeps more than keep, 0 then.
 */
#define MRB_WAIT_TRIM_MS  1000
int mrb_wait_trim(mrb_interp *interp);

/* Coroutines of interp alive now and finished stacks kept for reuse. */
void mrb_wait_counts(mrb_interp *interp, unsigned *live, unsigned *idle);

#endif /* MRB_WAIT_H */
