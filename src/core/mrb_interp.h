/*
 * The interpreter: an mrb_state created once and reused by every script and
 * request it runs (one per nginx worker process; under Apache, as many per
 * process as it runs scripts at once, lent to each run).
 *
 * Server neutral: nothing here knows Apache or nginx.  An adapter describes
 * its server with an mrb_server and reaches its request through mrb_run_rec.
 */

#ifndef MRB_INTERP_H
#define MRB_INTERP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <mruby.h>

#include "mrb_errbuf.h"

typedef struct mrb_interp_s  mrb_interp;
typedef struct mrb_server_s  mrb_server;
typedef struct mrb_run_rec_s mrb_run_rec;
typedef struct mrb_part_s    mrb_part;

/* Log levels as syslog numbers them; adapters map them onto their own. */
enum {
    MRB_LOG_EMERG = 0,
    MRB_LOG_ALERT,
    MRB_LOG_CRIT,
    MRB_LOG_ERR,
    MRB_LOG_WARN,
    MRB_LOG_NOTICE,
    MRB_LOG_INFO,
    MRB_LOG_DEBUG
};

/* What an adapter plugs into the core: one static instance per server. */
struct mrb_server_s {
    const char  *name;            /* Kernel#server_name: "Apache", "NGINX" */
    const char  *class_name;      /* the server class: "Apache", "Nginx" */
    const char  *module_name;     /* "mod_mruby", "ngx_mruby" */
    const char  *module_version;
    int          log_level_base;  /* the script-visible number of EMERG:
                                     Apache::APLOG_EMERG 0, Nginx::LOG_EMERG 1 */

    /* Defines the adapter's own classes and constants under server_class. */
    void       (*define)(mrb_state *mrb, struct RClass *server_class);

    /* Appends response body bytes for Server.rputs / Server.echo; returns 0,
     * or -1 when the response can no longer take a body. */
    int        (*write)(mrb_run_rec *run, const char *data, size_t len);

    /* Writes one line to the error log.  run is NULL outside a request;
     * log_target is what the adapter gave mrb_interp_open (its server). */
    void       (*log)(void *log_target, mrb_run_rec *run, int level,
                      const char *msg, size_t len);

    /* Whether log() would write a line at level now (for Server.log_level?,
     * so that a script can skip building a message the level drops). */
    int        (*log_enabled)(void *log_target, mrb_run_rec *run, int level);

    /* Resumes run (mrb_wait_resume) after msec milliseconds, from the
     * server's event loop; returns 0, or -1 if it cannot.  NULL: the
     * server cannot suspend a run, and sleeps block (mrb_wait.h). */
    int        (*wake_after)(mrb_run_rec *run, mrb_int msec);

    /* 1: a sleep where the run cannot wait blocks the thread instead of
     * raising (Apache: only content handlers on the event MPM wait). */
    int          sleep_blocks;

    /* Resumes run (mrb_wait_resume) when descriptor fd is ready for events
     * (MRB_FD_READ or MRB_FD_WRITE) or after msec milliseconds, whichever
     * comes first, from the server's event loop, setting *ready to 1 (the
     * descriptor) or leaving it 0 (the time) before it does.  The watch
     * ends before the run resumes, and when the run is cancelled.  Returns
     * 0, or -1 if it cannot.  NULL: such waits block (mrb_wait_fd). */
    int        (*wake_on_fd)(mrb_run_rec *run, int fd, int events,
                             mrb_int msec, int *ready);

    /* Calls mrb_wait_trim(interp) MRB_WAIT_TRIM_MS from now, from the
     * server's event loop, and again as long as it returns 1; so that the
     * stacks a burst left go back even if no run follows.  NULL: the core
     * trims at the end of a run, at most once per MRB_WAIT_TRIM_MS. */
    void       (*trim_later)(mrb_interp *interp);

    /* Whether this process runs scripts on several threads at once
     * (Server.threaded?): Apache's threaded MPMs.
     * NULL: never. */
    int        (*threaded)(void);

    /* The parts every interpreter gets beyond the core (mrb_part.h), in
     * the order they are defined, NULL-terminated; NULL: none. */
    const mrb_part *const  *parts;

    /* The descriptors of the error log files that log() writes an
     * MRB_LOG_ALERT line of run to (NULL: outside a request), at most max
     * of them, into fds; returns how many.  Called on the time budget's
     * clock thread as its watchdog ends the process (mrb_run_budget.c),
     * while the run is stuck: it may only read memory (no lock, no
     * allocation, no call into the server or libc).  NULL, or none: the
     * line goes to the standard error. */
    int        (*log_fds)(void *log_target, mrb_run_rec *run, int *fds,
                          int max);
};

/* A run's time budget unless configured (mrb_run_budget.h). */
#define MRB_RUN_TIMEOUT_DEFAULT_MS  1000

/* What mrb_server.wake_on_fd waits for. */
#define MRB_FD_READ   1
#define MRB_FD_WRITE  2

/*
 * One script run.  The adapter keeps it on its C stack, fills request and
 * result, and reads result back after mrb_script_run.
 */
struct mrb_run_rec_s {
    void        *request;     /* request_rec *, ngx_http_request_t *, ... */
    void        *data;        /* adapter's per-run extra (filter, phase) */
    mrb_int      result;      /* Server.return(code); preset to the default */
    unsigned     returned:1;  /* Server.return was called */
    unsigned     startup:1;   /* a startup script: its top-level state stays */
    unsigned     want_value:1; /* keep the script's last value in value */
    unsigned     stat_on_error_fail:1; /* a `stat` file that no longer
                                 compiles fails the run instead of running
                                 its last version (mrubyStatOnError fail) */
    unsigned     may_wait:1;  /* run on a coroutine: the script may wait
                                 (mrb_wait.h) */
    unsigned     memory_exceeded:1; /* an allocation was refused for
                                 memory_limit (mrb_alloc.h) */
    size_t       written;     /* body bytes Server.rputs/echo added */
    size_t       memory_limit; /* the bytes the run may allocate and keep
                                  (mrb_alloc.h); 0: no limit */
    size_t       memory_used;  /* what it keeps now, counted while
                                  memory_limit is set */
    const char  *phase;       /* the adapter's name of the phase, a static
                                 string; NULL: the run is not counted
                                 (mrb_metrics.h) */
    uint32_t     metrics_row; /* set by mrb_script_run, for the */
    int64_t      began_ns;    /* run's end: its row, when it began */
    int64_t      waited_ns;   /* and how long it has been suspended */
    int64_t      slow_ns;     /* a run longer logs one line (the slow-run
                                 log, mrb_metrics.h); 0: none */
    unsigned     stopped:1;   /* its time budget ran out (mrb_run_budget.h):
                                 it fails, whatever the script rescued */
    uint32_t     timeout_ms;  /* its time budget: preset to
                                 MRB_RUN_TIMEOUT_DEFAULT_MS; 0: none.  Only
                                 an outermost request run's counts */
    mrb_value    value;       /* with want_value, after a run that succeeded:
                                 the last value, protected in the caller's
                                 GC arena (the caller saves and restores it) */
    mrb_run_rec *prev;        /* the run this one is nested in */
    mrb_run_rec *waiting;     /* after MRB_RUN_WAITING: the waiting run */
    char         error[MRB_ERR_RUN_LEN]; /* "Class: message (file:line) ..."
                                            on failure */
};

/* Prepares run for a request: clears it (the error buffer to an empty
 * string only) and presets the result. */
static inline void
mrb_run_init(mrb_run_rec *run, void *request, mrb_int default_result)
{
    run->request = request;
    run->data = NULL;
    run->result = default_result;
    run->returned = 0;
    run->startup = 0;
    run->want_value = 0;
    run->written = 0;
    run->stat_on_error_fail = 0;
    run->may_wait = 0;
    run->memory_exceeded = 0;
    run->memory_limit = 0;
    run->memory_used = 0;
    run->phase = NULL;
    run->waited_ns = 0;
    run->slow_ns = 0;
    run->stopped = 0;
    run->timeout_ms = MRB_RUN_TIMEOUT_DEFAULT_MS;
    run->waiting = NULL;
    run->value = mrb_nil_value();
    run->prev = NULL;
    run->error[0] = '\0';
}

/*
 * After a run with want_value: its value as a String in *out ("" for nil),
 * converted with to_s under protection, because the run's own is over: a
 * to_s that raises gives -1 and its one-line error in run->error, and
 * leaves mrb->exc clear.  *out is protected in the caller's GC arena.
 */
int mrb_run_value_string(mrb_state *mrb, mrb_run_rec *run, mrb_value *out);

/* Called once in a new interpreter before it is sealed (startup scripts). */
typedef void (*mrb_interp_init_pt)(mrb_interp *interp, void *arg);

/*
 * Creates an interpreter with the core classes, the adapter's classes and
 * mrblib loaded.  Returns NULL and a message in err on failure.
 */
mrb_interp *mrb_interp_open(const mrb_server *server, void *log_target,
    char *err, size_t errlen);
void mrb_interp_close(mrb_interp *interp);

/*
 * Seeds the interpreter's Random (Kernel#rand, Array#shuffle and #sample)
 * from the kernel: mruby starts every Random::DEFAULT in the same state,
 * so every worker drew the same numbers, restart after restart.
 * mrb_interp_open seeds; a process that takes over a copy of another's
 * interpreter (made by fork) calls it before its own startup scripts, so
 * that its numbers are not its siblings'.  A script's srand after that
 * stays.
 */
void mrb_interp_seed_random(mrb_interp *interp);

/*
 * A new interpreter, opened, given to init (which runs the startup
 * scripts), then sealed.  NULL if creation failed (then err says why).
 */
mrb_interp *mrb_interp_new(const mrb_server *server, void *log_target,
    mrb_interp_init_pt init, void *arg, char *err, size_t errlen);

/*
 * Interpreters lent to runs (Apache, where a process serves from many
 * threads): mrb_interp_take gives the calling thread the idle interpreter
 * given back last, or a new one from mrb_interp_new; the thread gives it
 * back when its run is over.  A process needs as many interpreters as it
 * runs scripts at once, and those few stay warm in the CPU caches however
 * many threads the server spreads its requests over.
 */
mrb_interp *mrb_interp_take(const mrb_server *server, void *log_target,
    mrb_interp_init_pt init, void *arg, char *err, size_t errlen);
void mrb_interp_give_back(mrb_interp *interp);

/*
 * Takes interp itself, for a run waiting in it (mrb_wait_resume): at once
 * when it is idle, else when the thread running a script in it gives it
 * back.  The caller holds no interpreter (so no two threads wait for each
 * other); mrb_interp_take leaves an interpreter that someone waits for to
 * the waiter.
 */
void mrb_interp_take_this(mrb_interp *interp);

/* Closes the idle interpreters, when the process exits. */
void mrb_interp_close_idle(void);

/*
 * Records the top-level state (globals, top-level constants and instance
 * variables) that stays; what a request script adds beyond it is removed
 * after each run.
 */
void mrb_interp_seal(mrb_interp *interp);

/*
 * What every interpreter starts with, for the accessors below: inline,
 * because a request calls them several times (Server.rputs finds its run
 * and its server through them).  The rest is private to mrb_interp.c.
 */
typedef struct mrb_interp_head_s  mrb_interp_head;

struct mrb_interp_head_s {
    mrb_state          *mrb;
    const mrb_server   *server;
    void               *log_target;
    mrb_run_rec        *run;        /* the run in progress, or NULL */
    void               *part_state; /* a pointer for the part that needs
                                       its state at hand in every call
                                       (src/lib's: mrb_lib.h); the core
                                       neither reads nor frees it */
    void               *held;       /* a suspended run whose top-level
                                       state the tables still hold
                                       (mrb_wait_set_aside), or NULL */
    unsigned            wait_always:1;  /* every run that may wait goes
                                       on a coroutine (a startup script
                                       names something that waits) */
    _Atomic uint64_t    deadline;   /* the tick the running script's time
                                       budget ends at (mrb_run_budget.h) */
    mrb_interp_head    *watch_next; /* the clock thread's list */
    struct RClass      *run_timeout_class;  /* what the time budget's
                                       stop raises (mrb_run_budget.c) */
};

static inline mrb_state *
mrb_interp_state(mrb_interp *interp)
{
    return ((mrb_interp_head *) interp)->mrb;
}

/* The interpreter of mrb: mrb->ud, set by mrb_interp_open. */
static inline mrb_interp *
mrb_interp_from_state(mrb_state *mrb)
{
    return mrb->ud;
}

static inline const mrb_server *
mrb_interp_server(mrb_interp *interp)
{
    return ((mrb_interp_head *) interp)->server;
}

static inline void *
mrb_interp_log_target(mrb_interp *interp)
{
    return ((mrb_interp_head *) interp)->log_target;
}

/* The run in progress in this interpreter, or NULL (startup, no request). */
static inline mrb_run_rec *
mrb_interp_run(mrb_state *mrb)
{
    mrb_interp_head  *head = mrb->ud;

    return head != NULL ? head->run : NULL;
}

/* The current run's request, or raises RuntimeError outside a request. */
void *mrb_interp_request(mrb_state *mrb);

/* Logs through the adapter at a core level (MRB_LOG_*). */
void mrb_interp_log(mrb_interp *interp, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* MRB_INTERP_H */
