/*
 * What the core's own files share about the interpreter; adapters use
 * mrb_interp.h and mrb_script.h only.
 */

#ifndef MRB_INTERP_CORE_H
#define MRB_INTERP_CORE_H

#include <stdint.h>
#include <mruby.h>
#include <mruby/proc.h>
#include "mrb_alloc.h"
#include "mrb_file_watch.h"
#include "mrb_interp.h"

/*
 * Kept out of line: a hot function that calls it only on some paths then
 * makes no stack frame for it on the others.
 */
#define MRB_NOINLINE  __attribute__((noinline))

/* The server class, Kernel#server_name and #get_server_class; returns the
 * server class. */
struct RClass *mrb_server_class_define(mrb_state *mrb,
    const mrb_server *server);

/* Server::HTTP_OK ... HTTP_NETWORK_AUTHENTICATION_REQUIRED. */
void mrb_http_status_define(mrb_state *mrb, struct RClass *server_class);

/* "Class: message (backtrace: file:line, ...)" on one line. */
void mrb_error_format(mrb_state *mrb, mrb_value exc, char *buf, size_t len);

/*
 * "file:line" of the innermost frame running Ruby code that has lines in
 * mrb, or "" when none does: where a C method was called from.  Allocates nothing and
 * raises nothing (the allocator calls it while refusing a block).
 */
void mrb_error_where(mrb_state *mrb, char *buf, size_t len);

/*
 * The error of run (in progress in interp) into run->error, as
 * mrb_error_format; where the server logs at debug, each frame of the
 * backtrace is logged first on a line of its own, "mruby: backtrace I/N:
 * FRAME" at MRB_LOG_ERR, and the error line ends in "(backtrace above)".
 */
void mrb_error_format_run(mrb_interp *interp, mrb_value exc, mrb_run_rec *run);

/*
 * Runs proc as run: saves and restores the GC arena, catches any exception
 * (then -1 and the one-line error in run->error), clears mrb->exc, and
 * unless run->startup or nested removes the top-level state the script
 * added.  With run->want_value the script's last value goes to run->value,
 * protected in the caller's GC arena.
 */
int mrb_interp_exec(mrb_interp *interp, struct RProc *proc, mrb_run_rec *run);

/* Tells the top-level cleanup that a global was removed. */
void mrb_interp_global_removed(mrb_interp *interp);

/* How many runs of interp left top-level state that had to be put back
 * (mrb_toplevel.h): a test's way to see that a plain run changes none. */
unsigned long mrb_interp_toplevel_restores(mrb_interp *interp);

/* How many runs' ends compared the values of the top-level tables: those
 * whose bytecode could change them (mrb_toplevel_scan.c). */
unsigned long mrb_interp_toplevel_compares(mrb_interp *interp);

/*
 * For a run of interp that is suspended and resumed (mrb_wait.c):
 * mrb_toplevel_take and mrb_toplevel_put_back on the interpreter's
 * top-level state.  What goes wrong taking it is logged, one line for the
 * current run; take returns -1 (the exception in *aside) when what the
 * run set could not be kept.
 */
int mrb_interp_toplevel_take(mrb_interp *interp, mrb_value *aside);
int mrb_interp_toplevel_put_back(mrb_interp *interp, mrb_value aside,
    mrb_value *exc);

/*
 * For a run of interp that waits while others run (mrb_wait.c): what the
 * dirty parts keep of the current run (mrb_part.h take), then their
 * run_end: 0 and *kept (nil: nothing), or -1 when a take raised (out of
 * memory: *exc is the exception, *kept what the takes before it took,
 * still the run's, and the parts are clean all the same).
 * mrb_interp_parts_put_back gives it back to the parts, before the run
 * resumes; it allocates nothing.
 */
int mrb_interp_parts_take(mrb_interp *interp, mrb_value *kept,
    mrb_value *exc);
void mrb_interp_parts_put_back(mrb_interp *interp, mrb_value kept);

/* How interp's runs ask the file watch for its epoch. */
mrb_file_watch_poller *mrb_interp_file_watch(mrb_interp *interp);

/* The proc loaded for script id at generation, or NULL. */
struct RProc *mrb_interp_proc(mrb_interp *interp, unsigned id,
    uint32_t generation);

/* The proc loaded for script id at any generation, or NULL. */
struct RProc *mrb_interp_proc_any(mrb_interp *interp, unsigned id);

/* Keeps proc (reachable for the GC) as script id at generation. */
int mrb_interp_proc_keep(mrb_interp *interp, unsigned id, uint32_t generation,
    struct RProc *proc);

/* mrb_wait.c's state of an interpreter (mrb_wait_core.h) */
typedef struct mrb_wait_state_s  mrb_wait_state;

/* Where interp keeps its mrb_wait_state (NULL until a run may wait). */
mrb_wait_state **mrb_interp_wait_state(mrb_interp *interp);

/* Its index of symbols of file names (mrb_file_sym.h), made at the first
 * call; NULL when out of memory. */
struct mrb_file_syms_s *mrb_interp_file_syms(mrb_interp *interp);

/* The run in progress in interp, or NULL; mrb_interp_set_run makes run
 * the current one (a run's start and end, a switch between coroutines,
 * mrb_wait.c), the allocator's too. */
static inline mrb_run_rec *
mrb_interp_current(mrb_interp *interp)
{
    return ((mrb_interp_head *) interp)->run;
}

static inline void
mrb_interp_set_run(mrb_interp *interp, mrb_run_rec *run)
{
    mrb_interp_head  *head = (mrb_interp_head *) interp;

    head->run = run;
    mrb_alloc_set_running(run != NULL ? head->mrb : NULL);
}

/* A suspended run whose top-level state the tables still hold, or NULL
 * (mrb_wait_set_aside): set by mrb_wait.c only. */
static inline void *
mrb_interp_held(mrb_interp *interp)
{
    return ((mrb_interp_head *) interp)->held;
}

static inline void
mrb_interp_set_held(mrb_interp *interp, void *held)
{
    ((mrb_interp_head *) interp)->held = held;
}

/* Whether every run of interp that may wait goes on a coroutine
 * (mrb_wait_note_startup sets it). */
static inline int
mrb_interp_wait_always(mrb_interp *interp)
{
    return ((mrb_interp_head *) interp)->wait_always;
}

static inline void
mrb_interp_set_wait_always(mrb_interp *interp)
{
    ((mrb_interp_head *) interp)->wait_always = 1;
}

#endif /* MRB_INTERP_CORE_H */
