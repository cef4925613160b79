/*
 * Per-script metrics: counters for each script and phase (runs, exceptions
 * by class, 5xx answers, time in the script as a histogram, time waiting),
 * kept in shared memory that every worker process of a server adds to, and
 * read as Prometheus' text exposition format or as JSON
 * (docs/observability.md).
 *
 * The table is mapped once in the parent (Apache) or master (nginx) before
 * the workers fork, and kept across configuration reloads, so the counts
 * go on from where they were.  Each worker process takes a slot of its own
 * (mrb_metrics_attach) and adds only to it; a reader sums the slots.  No
 * lock is held while counting, so a worker killed at any instant leaves
 * nothing held: its slot keeps what it had counted (counters never go
 * down), and the next worker that finds no free slot takes it over and
 * adds on.
 */

#ifndef MRB_METRICS_H
#define MRB_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "mrb_interp.h"

/* Rows (a script in a phase, or one exception class of it) and worker
 * slots the table has room for: a run whose row does not fit, or of a
 * process that found no slot, is not counted. */
#define MRB_METRICS_ROWS    1024
#define MRB_METRICS_SLOTS   256

/*
 * Maps the table, in the parent or master process while it reads its
 * configuration; a second call while the table is mapped (a reload of a
 * module that stayed loaded) keeps the one it has.  Each open is matched
 * by an mrb_metrics_close when that configuration goes; the last unmaps
 * the table (the workers that inherited it keep their mapping).  Returns
 * 0, or -1 with a message in err.
 */
int mrb_metrics_open(char *err, size_t errlen);
void mrb_metrics_close(void);

/*
 * A worker process (or an Apache child) takes a slot to count in: one
 * nobody had, else one of a process that is gone.  Returns 0; -1 with a
 * message in err when the table is not mapped or every slot is in use
 * (the process then counts nothing).
 */
int mrb_metrics_attach(char *err, size_t errlen);

/*
 * A monotonic clock in nanoseconds, for the times of runs and waits: the
 * vDSO's, with no system call where the kernel's clock source allows it
 * (tsc, kvm-clock).  The server's cached time would cost nothing, but it
 * does not move while a script computes: a run that took 200 ms of CPU
 * would read 0.
 */
static inline int64_t
mrb_metrics_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* This process's slot (mrb_metrics_attach), or NULL: nothing is counted. */
extern void  *mrb_metrics_own;

/* The row of run (script in run->phase), added if it is new and kept in
 * *row_cache with tag; 0 when the run is not counted (no phase, no slot,
 * the table is full). */
uint32_t mrb_metrics_run_row(mrb_run_rec *run, const char *script,
    _Atomic uint64_t *row_cache, uint64_t tag);

/*
 * The run of script (its name, as mrb_script_name) in run->phase is
 * asked for: sets run->metrics_row, 0 when it is not counted.
 * row_cache is the script's own word that keeps its row between runs,
 * tagged with the phase: the phase names are static strings of the
 * adapter, and the low half of the address tells them apart.  The tag
 * with row 0 says the table was full.  Inline: every run calls it.
 */
static inline void
mrb_metrics_run_begin(mrb_run_rec *run, const char *script,
    _Atomic uint64_t *row_cache)
{
    uint64_t  tag, c;

    tag = (uint64_t) (uint32_t) (uintptr_t) run->phase << 32;
    c = atomic_load_explicit(row_cache, memory_order_relaxed);

    run->metrics_row = (c & 0xffffffff00000000) == tag && (uint32_t) c != 0
                       ? (uint32_t) c
                       : mrb_metrics_run_row(run, script, row_cache, tag);
}

/*
 * For a run with a row (metrics_row != 0): its script begins (sets
 * run->began_ns), and ends with rc (0, or -1 with run->error), which
 * counts it, with run->waited_ns of its time spent suspended.  Both in
 * mrb_interp_exec, on the stack the script runs on: a run that waits ends
 * there too, when it is resumed for the last time, while it is still the
 * interpreter's current run.  A run over run->slow_ns logs one line
 * through interp, at warn: "mruby: slow run of SCRIPT in PHASE: T ms
 * (R ms in Ruby, W ms waiting), over the slow-run log's N ms".
 */
static inline void
mrb_metrics_run_start(mrb_run_rec *run)
{
    run->began_ns = mrb_metrics_now();
}

void mrb_metrics_run_end(mrb_interp *interp, mrb_run_rec *run, int rc);

/* A run with a row that failed before its script began: counted, with no
 * time (its script did not compile, could not be read, had no stack). */
void mrb_metrics_run_failed(mrb_interp *interp, mrb_run_rec *run);

/* What else happens to a script, counted in the row it last ran in. */
typedef enum {
    MRB_METRICS_COMPILES = 0,       /* compiled in a worker (`stat` after a
                                       change, `never` on every run) */
    MRB_METRICS_COMPILE_FAILURES,   /* did not compile or could not be read */
    MRB_METRICS_RELOADS,            /* a live edit of a `stat` file took */
    MRB_METRICS_KEPT_LAST_GOOD,     /* a change that does not run, while the
                                       last version that compiled serves */
    MRB_METRICS_REDIS_COMMANDS,     /* sent by the script */
    MRB_METRICS_REDIS_ERRORS,       /* error replies and failed sends */
    MRB_METRICS_BYTES_WRITTEN,      /* body bytes of Server.rputs / echo */
    MRB_METRICS_NEVENTS
} mrb_metrics_event;

/* Their names in the JSON and in Server.metrics ("compiles", ...). */
extern const char *const  mrb_metrics_event_names[MRB_METRICS_NEVENTS];

/* Adds n to event of row (a run's metrics_row, or the one a script's row
 * cache keeps: mrb_metrics_row_of); row 0: nothing. */
void mrb_metrics_count(uint32_t row, mrb_metrics_event event, uint64_t n);

static inline uint32_t
mrb_metrics_row_of(_Atomic uint64_t *row_cache)
{
    return (uint32_t) atomic_load_explicit(row_cache, memory_order_relaxed);
}

/*
 * What a worker process has now (gauges of its slot, reset when a new
 * process takes the slot over): interpreters sealed and not closed, and
 * runs on a coroutine (each on a stack of its own) with their peak.
 * Called by mrb_interp.c and mrb_wait.c with +1 and -1.  Each returns 1
 * when it counted, 0 in a process without a slot.
 */
int mrb_metrics_worker_interps(int delta);
int mrb_metrics_worker_coros(int delta);

/* A script in a phase, its counts summed over the worker slots. */
#define MRB_METRICS_NAME_LEN  256
#define MRB_METRICS_NBUCKETS  13

typedef struct {
    char      script[MRB_METRICS_NAME_LEN];
    char      phase[32];
    uint64_t  runs;
    uint64_t  status_5xx;
    uint64_t  run_ns;              /* waits included */
    uint64_t  wait_ns;
    uint64_t  le_ns[MRB_METRICS_NBUCKETS];     /* the buckets' bounds */
    uint64_t  buckets[MRB_METRICS_NBUCKETS];   /* runs up to each bound
                                                  (cumulative) */
    uint64_t  events[MRB_METRICS_NEVENTS];
    uint32_t  row;                 /* for mrb_metrics_exception_next */
} mrb_metrics_script;

/*
 * The next script and phase from *cursor on (0: the first), copied into
 * *out: 1, with *cursor moved past it; 0 when there is none (or the table
 * is not mapped).  Reads without a lock: a run counted meanwhile may be
 * in one figure and not yet in another.
 */
int mrb_metrics_script_next(uint32_t *cursor, mrb_metrics_script *out);

/* The next exception class of script *of from *cursor on (0: the first):
 * 1 with its name in cls (len bytes) and its runs in *count, or 0. */
int mrb_metrics_exception_next(const mrb_metrics_script *of,
    uint32_t *cursor, char *cls, size_t len, uint64_t *count);

/* Defines Server.metrics (mrb_metrics_class.c). */
void mrb_metrics_define(mrb_state *mrb, struct RClass *server_class);

/* What mrb_metrics_format writes. */
typedef enum {
    MRB_METRICS_PROMETHEUS = 0,   /* text exposition format 0.0.4 */
    MRB_METRICS_JSON
} mrb_metrics_format_e;

/* Their media types, for the Content-Type of an answer. */
#define MRB_METRICS_TYPE_PROMETHEUS  "text/plain; version=0.0.4; charset=utf-8"
#define MRB_METRICS_TYPE_JSON        "application/json"

/* The format a query string asks for: JSON with a format=json argument,
 * else Prometheus' (args need not end in NUL; NULL with len 0: none). */
mrb_metrics_format_e mrb_metrics_format_of_query(const char *args,
    size_t len);

/*
 * The figures summed over the worker slots, labelled server="server", into
 * *out (malloc'd: the caller frees it) of *len bytes.  Returns 0, or -1
 * with a message in err (not mapped, out of memory).
 */
int mrb_metrics_format(mrb_metrics_format_e format, const char *server,
    char **out, size_t *len, char *err, size_t errlen);

#endif /* MRB_METRICS_H */
