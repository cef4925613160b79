/*
 * The metrics table: one block of shared memory with a directory of rows
 * (a script in a phase; an exception class of one) and a slot of counters
 * per worker process.
 *
 * Counting takes no lock: a worker adds to its own slot only, with relaxed
 * atomic adds (Apache's threads share their child's slot), and a reader
 * sums the slots.  So a worker killed at any instant holds nothing another
 * needs.  Its slot keeps its counts, which stay in the sums: a counter
 * that went down when a worker died would read as a reset to Prometheus,
 * and the runs it counted did happen.  A new worker that finds no slot
 * never taken takes over the slot of a process that is gone and adds on
 * from there.
 *
 * Rows are added under a process-shared robust mutex, once per script,
 * phase and process (the script keeps its row in a word of its own) or per
 * exception class seen; they are never removed, so a lookup reads the
 * directory without the lock and stops at the first free row.  A row is
 * published by storing its kind last: a process killed while it wrote one
 * leaves it free, and the next locker (EOWNERDEAD) writes over it.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "mrb_interp_core.h"
#include "mrb_metrics.h"
#include "mrb_shdict.h"
#include "mrb_shdict_zone.h"

#define METRICS_SCRIPT_LEN  MRB_METRICS_NAME_LEN
#define METRICS_PHASE_LEN   32
#define METRICS_CLASS_LEN   96

/* What a row counts; 0 is a free row. */
enum {
    METRICS_ROW_FREE = 0,
    METRICS_ROW_RUN,
    METRICS_ROW_EXCEPTION
};

typedef struct {
    _Atomic uint32_t  kind;       /* stored last: the row is published */
    uint32_t          hash;
    char              script[METRICS_SCRIPT_LEN];
    char              phase[METRICS_PHASE_LEN];
    char              cls[METRICS_CLASS_LEN];
} metrics_row;

/* The upper bounds of the run-time histogram's buckets, in nanoseconds:
 * Prometheus' default buckets with 1 ms and 2.5 ms added below them. */
static const uint64_t  metrics_bounds[] = {
    1000000, 2500000, 5000000, 10000000, 25000000, 50000000, 100000000,
    250000000, 500000000, 1000000000, 2500000000, 5000000000, 10000000000
};

#define METRICS_NBUCKETS  (sizeof(metrics_bounds) / sizeof(metrics_bounds[0]))

_Static_assert(METRICS_NBUCKETS == MRB_METRICS_NBUCKETS,
               "mrb_metrics.h counts the buckets");

const char *const  mrb_metrics_event_names[MRB_METRICS_NEVENTS] = {
    "compiles", "compile_failures", "reloads", "kept_last_good",
    "redis_commands", "redis_errors", "bytes_written"
};

/*
 * One row's counts in one slot.  The runs of a row are count plus the
 * sum of its buckets: a run row counts its runs in the buckets only (one
 * add fewer per run), an exception row in count only.
 */
typedef struct {
    _Atomic uint64_t  run_ns;         /* the runs' time, waits included */

    /* runs by the first bound their time does not exceed (not cumulative);
     * the last: over every bound */
    _Atomic uint64_t  buckets[METRICS_NBUCKETS + 1];

    _Atomic uint64_t  count;
    _Atomic uint64_t  status_5xx;     /* runs that failed or gave 500-599 */
    _Atomic uint64_t  wait_ns;        /* of run_ns, waiting */
    _Atomic uint64_t  events[MRB_METRICS_NEVENTS];
} metrics_counts;

typedef struct {
    _Atomic pid_t     pid;            /* its process; 0: never taken */

    /* gauges of the process (mrb_metrics_worker_*) */
    _Atomic int64_t   interps;
    _Atomic int64_t   coros;
    _Atomic int64_t   coros_peak;

    metrics_counts    rows[MRB_METRICS_ROWS];
} metrics_slot;

typedef struct {
    pthread_mutex_t   lock;           /* adding rows */
    metrics_row       rows[MRB_METRICS_ROWS];
    metrics_slot      slots[MRB_METRICS_SLOTS];
} metrics_table;

static metrics_table  *metrics;       /* mapped, or NULL */
static unsigned        metrics_opens; /* configurations using it */
void                  *mrb_metrics_own;   /* a metrics_slot */


int
mrb_metrics_open(char *err, size_t errlen)
{
    pthread_mutexattr_t   attr;
    metrics_table        *t;
    int                   rc;

    if (metrics != NULL) {
        metrics_opens++;
        return 0;
    }

    t = mmap(NULL, sizeof(metrics_table), PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED) {
        snprintf(err, errlen, "metrics: mmap(%zu bytes) failed: %s",
                 sizeof(metrics_table), strerror(errno));
        return -1;
    }

    rc = pthread_mutexattr_init(&attr);
    if (rc == 0) {
        rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
        if (rc == 0) {
            rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
        }
        if (rc == 0) {
            rc = pthread_mutex_init(&t->lock, &attr);
        }
        pthread_mutexattr_destroy(&attr);
    }

    if (rc != 0) {
        snprintf(err, errlen, "metrics: cannot create a process-shared "
                 "mutex: %s", strerror(rc));
        munmap(t, sizeof(metrics_table));
        return -1;
    }

    metrics = t;
    metrics_opens = 1;
    return 0;
}


/*
 * The table does not pin the module: a reload after a package upgrade
 * must load the new one, and then starts a new table (Prometheus reads the
 * counters' drop to 0 as a reset).
 */
void
mrb_metrics_close(void)
{
    if (metrics == NULL || --metrics_opens > 0) {
        return;
    }

    munmap(metrics, sizeof(metrics_table));
    metrics = NULL;
}


/* Whether the process of a slot is gone (not merely another user's). */
static int
metrics_pid_gone(pid_t pid)
{
    return kill(pid, 0) != 0 && errno == ESRCH;
}


int
mrb_metrics_attach(char *err, size_t errlen)
{
    pid_t    self = getpid(), old;
    size_t   i;

    mrb_metrics_own = NULL;

    if (metrics == NULL) {
        snprintf(err, errlen, "metrics: the table is not mapped");
        return -1;
    }

    for (i = 0; i < MRB_METRICS_SLOTS; i++) {
        old = 0;
        if (atomic_compare_exchange_strong(&metrics->slots[i].pid, &old,
                                           self))
        {
            mrb_metrics_own = &metrics->slots[i];
            return 0;
        }
    }

    for (i = 0; i < MRB_METRICS_SLOTS; i++) {
        old = atomic_load(&metrics->slots[i].pid);
        if (metrics_pid_gone(old)
            && atomic_compare_exchange_strong(&metrics->slots[i].pid, &old,
                                              self))
        {
            /* the counts go on; what the gone process had is gone */
            metrics->slots[i].interps = 0;
            metrics->slots[i].coros = 0;
            metrics->slots[i].coros_peak = 0;
            mrb_metrics_own = &metrics->slots[i];
            return 0;
        }
    }

    snprintf(err, errlen, "metrics: all %d worker slots are taken by live "
             "processes: this one counts nothing", MRB_METRICS_SLOTS);
    return -1;
}


static uint32_t
metrics_hash(const char *s, uint32_t h)
{
    while (*s != '\0') {
        h = (h ^ (unsigned char) *s++) * 16777619u;
    }
    return (h ^ 0xff) * 16777619u;
}


static int
metrics_row_is(const metrics_row *r, uint32_t kind, uint32_t hash,
    const metrics_row *key)
{
    return r->hash == hash && kind == atomic_load_explicit(
                                   (_Atomic uint32_t *) &r->kind,
                                   memory_order_acquire)
           && strcmp(r->script, key->script) == 0
           && strcmp(r->phase, key->phase) == 0
           && strcmp(r->cls, key->cls) == 0;
}


/*
 * From the row of hash on: the index + 1 of key's row, or of the first
 * free row with *free set; 0 when the directory is full.
 */
static uint32_t
metrics_row_probe(uint32_t kind, uint32_t hash, const metrics_row *key,
    int *free)
{
    uint32_t      i, n;
    metrics_row  *r;

    for (n = 0; n < MRB_METRICS_ROWS; n++) {
        i = (hash + n) % MRB_METRICS_ROWS;
        r = &metrics->rows[i];

        if (atomic_load_explicit(&r->kind, memory_order_acquire)
            == METRICS_ROW_FREE)
        {
            *free = 1;
            return i + 1;
        }

        if (metrics_row_is(r, kind, hash, key)) {
            *free = 0;
            return i + 1;
        }
    }

    return 0;
}


static uint32_t
metrics_row_add_locked(uint32_t kind, uint32_t hash, const metrics_row *key)
{
    uint32_t      row;
    int           free;
    metrics_row  *r;

    row = metrics_row_probe(kind, hash, key, &free);
    if (row == 0 || !free) {
        return row;
    }

    r = &metrics->rows[row - 1];
    r->hash = hash;
    memcpy(r->script, key->script, sizeof(r->script));
    memcpy(r->phase, key->phase, sizeof(r->phase));
    memcpy(r->cls, key->cls, sizeof(r->cls));
    atomic_store_explicit(&r->kind, kind, memory_order_release);

    return row;
}


/* The row (index + 1) of kind for script, phase and cls, added if it is
 * new; 0 when it cannot be. */
static uint32_t
metrics_row_find(uint32_t kind, const char *script, const char *phase,
    const char *cls)
{
    metrics_row  key;
    uint32_t     hash, row;
    int          free, rc;

    snprintf(key.script, sizeof(key.script), "%s", script);
    snprintf(key.phase, sizeof(key.phase), "%s", phase);
    snprintf(key.cls, sizeof(key.cls), "%s", cls);
    hash = metrics_hash(key.cls, metrics_hash(key.phase,
                        metrics_hash(key.script, 2166136261u ^ kind)));

    row = metrics_row_probe(kind, hash, &key, &free);
    if (row != 0 && !free) {
        return row;
    }

    rc = pthread_mutex_lock(&metrics->lock);
    if (rc == EOWNERDEAD) {
        /* the dead holder's half-written row is still free */
        pthread_mutex_consistent(&metrics->lock);
    } else if (rc != 0) {
        return 0;
    }

    row = metrics_row_add_locked(kind, hash, &key);
    pthread_mutex_unlock(&metrics->lock);

    return row;
}


uint32_t
mrb_metrics_run_row(mrb_run_rec *run, const char *script,
    _Atomic uint64_t *row_cache, uint64_t tag)
{
    uint32_t  row;

    /* a row is cached only where there is a slot: a process without one
     * comes here on every run, and counts nothing */
    if (mrb_metrics_own == NULL || run->phase == NULL) {
        return 0;
    }

    /* Rows are never freed while the table lives: a script the table
     * had no room for has none still, and is not searched for again
     * (a search of a full table reads all of its rows). */
    if (atomic_load_explicit(row_cache, memory_order_relaxed) == tag) {
        return 0;
    }

    row = metrics_row_find(METRICS_ROW_RUN, script, run->phase, "");
    atomic_store_explicit(row_cache, tag | row, memory_order_relaxed);

    return row;
}


/*
 * The class of a failed run's exception: what run->error starts with
 * ("Class: message ..."), or "-" when the run failed before Ruby (its
 * script did not compile, could not be read, had no stack).
 */
static void
metrics_error_class(const char *error, char *cls, size_t len)
{
    size_t  n = 0;

    if (error[0] >= 'A' && error[0] <= 'Z') {
        while ((error[n] >= 'A' && error[n] <= 'Z')
               || (error[n] >= 'a' && error[n] <= 'z')
               || (error[n] >= '0' && error[n] <= '9')
               || error[n] == '_' || error[n] == ':')
        {
            if (error[n] == ':' && error[n + 1] == ' ') {
                break;
            }
            n++;
        }
    }

    if (n == 0 || error[n] != ':' || n >= len) {
        snprintf(cls, len, "-");
        return;
    }

    memcpy(cls, error, n);
    cls[n] = '\0';
}


static metrics_counts *
metrics_counts_of(uint32_t row)
{
    return &((metrics_slot *) mrb_metrics_own)->rows[row - 1];
}


/* Nanoseconds as milliseconds with one decimal, for the log: "12.3". */
#define METRICS_MS(ns)  (long) ((ns) / 1000000), \
                        (int) ((ns) / 100000 % 10)


/* What few runs have: a wait, a 5xx answer, an exception, a slow run. */
static MRB_NOINLINE void
metrics_count_rest(mrb_interp *interp, mrb_run_rec *run, int rc,
    metrics_counts *c, uint64_t t)
{
    metrics_row  *r = &metrics->rows[run->metrics_row - 1];
    char          cls[METRICS_CLASS_LEN];
    uint32_t      row;

    if (run->waited_ns != 0) {
        atomic_fetch_add_explicit(&c->wait_ns, (uint64_t) run->waited_ns,
                                  memory_order_relaxed);
    }

    if (run->slow_ns != 0 && t > (uint64_t) run->slow_ns) {
        mrb_interp_log(interp, MRB_LOG_WARN, "mruby: slow run of %s in %s: "
                       "%ld.%d ms (%ld.%d ms in Ruby, %ld.%d ms waiting), "
                       "over the slow-run log's %ld ms", r->script, r->phase,
                       METRICS_MS(t), METRICS_MS(t - run->waited_ns),
                       METRICS_MS(run->waited_ns),
                       (long) (run->slow_ns / 1000000));
    }

    if (rc == 0 && (uint64_t) (run->result - 500) >= 100) {
        return;
    }

    atomic_fetch_add_explicit(&c->status_5xx, 1, memory_order_relaxed);

    if (rc == 0) {
        return;
    }

    metrics_error_class(run->error, cls, sizeof(cls));

    row = metrics_row_find(METRICS_ROW_EXCEPTION, r->script, r->phase, cls);
    if (row != 0) {
        atomic_fetch_add_explicit(&metrics_counts_of(row)->count, 1,
                                  memory_order_relaxed);
    }
}


/* Kept short, with the rest out of line: every run ends here. */
void
mrb_metrics_run_end(mrb_interp *interp, mrb_run_rec *run, int rc)
{
    metrics_counts  *c;
    uint64_t         t;
    size_t           b;

    /* the clock first: less to keep across the call */
    t = (uint64_t) (mrb_metrics_now() - run->began_ns);
    c = metrics_counts_of(run->metrics_row);

    atomic_fetch_add_explicit(&c->run_ns, t, memory_order_relaxed);

    if (run->written != 0) {
        atomic_fetch_add_explicit(&c->events[MRB_METRICS_BYTES_WRITTEN],
                                  run->written, memory_order_relaxed);
    }

    for (b = 0; b < METRICS_NBUCKETS && t > metrics_bounds[b]; b++) {
        /* void */
    }

    atomic_fetch_add_explicit(&c->buckets[b], 1, memory_order_relaxed);

    /* slow_ns - 1: 0 (no slow-run log) wraps to the largest */
    if (rc != 0 || run->waited_ns != 0
        || (uint64_t) (run->result - 500) < 100
        || t > (uint64_t) run->slow_ns - 1)
    {
        metrics_count_rest(interp, run, rc, c, t);
    }
}


int
mrb_metrics_worker_interps(int delta)
{
    metrics_slot  *own = mrb_metrics_own;

    if (own == NULL) {
        return 0;
    }

    atomic_fetch_add_explicit(&own->interps, delta, memory_order_relaxed);
    return 1;
}


int
mrb_metrics_worker_coros(int delta)
{
    metrics_slot  *own = mrb_metrics_own;
    int64_t        now, peak;

    if (own == NULL) {
        return 0;
    }

    now = atomic_fetch_add_explicit(&own->coros, delta, memory_order_relaxed)
          + delta;
    peak = atomic_load_explicit(&own->coros_peak, memory_order_relaxed);

    while (now > peak
           && !atomic_compare_exchange_weak(&own->coros_peak, &peak, now))
    {
        /* peak is reloaded */
    }

    return 1;
}


void
mrb_metrics_count(uint32_t row, mrb_metrics_event event, uint64_t n)
{
    /* a row is cached, and given to runs, only where there is a slot */
    if (row != 0 && n != 0) {
        atomic_fetch_add_explicit(&metrics_counts_of(row)->events[event], n,
                                  memory_order_relaxed);
    }
}


void
mrb_metrics_run_failed(mrb_interp *interp, mrb_run_rec *run)
{
    if (run->metrics_row != 0) {
        mrb_metrics_run_start(run);
        mrb_metrics_run_end(interp, run, -1);
    }
}


/* ---------------------------------------------------------------------
 * Reading: the sums, as text
 */

typedef struct {
    char    *p;
    size_t   len, cap;
    int      failed;
} metrics_buf;


static void
buf_grow(metrics_buf *b, size_t need)
{
    char    *p;
    size_t   cap;

    if (b->failed || b->len + need < b->cap) {
        return;
    }

    cap = b->cap ? b->cap : 16384;
    while (cap <= b->len + need) {
        cap *= 2;
    }

    p = realloc(b->p, cap);
    if (p == NULL) {
        b->failed = 1;
        return;
    }

    b->p = p;
    b->cap = cap;
}


static void __attribute__((format(printf, 2, 3)))
buf_printf(metrics_buf *b, const char *fmt, ...)
{
    va_list  ap;
    int      n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);

    if (n < 0) {
        b->failed = 1;
        return;
    }

    buf_grow(b, (size_t) n + 1);
    if (b->failed) {
        return;
    }

    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t) n;
}


/* s as a Prometheus label value (json 0) or a JSON string (json 1),
 * quotes included. */
static void
buf_quoted(metrics_buf *b, const char *s, int json)
{
    unsigned char  c;

    buf_printf(b, "\"");

    for (; *s != '\0'; s++) {
        c = (unsigned char) *s;

        if (c == '"' || c == '\\') {
            buf_printf(b, "\\%c", c);
        } else if (c == '\n') {
            buf_printf(b, "\\n");
        } else if (json && c < 0x20) {
            buf_printf(b, "\\u%04x", c);
        } else {
            buf_printf(b, "%c", c);
        }
    }

    buf_printf(b, "\"");
}


/* Nanoseconds as seconds, exactly. */
static void
buf_seconds(metrics_buf *b, uint64_t ns)
{
    buf_printf(b, "%" PRIu64 ".%09" PRIu64, ns / 1000000000,
               ns % 1000000000);
}


/* A bucket's bound in seconds as Prometheus' clients write it: "0.0025",
 * "1", "10". */
static void
buf_bound(metrics_buf *b, uint64_t ns)
{
    char    frac[10];
    int     n;

    n = snprintf(frac, sizeof(frac), "%09" PRIu64, ns % 1000000000);
    while (n > 0 && frac[n - 1] == '0') {
        frac[--n] = '\0';
    }

    buf_printf(b, "%" PRIu64 "%s%s", ns / 1000000000, n > 0 ? "." : "", frac);
}


/* A row's counts summed over the slots ever taken; count is then the
 * row's runs. */
static void
metrics_sum(uint32_t i, metrics_counts *sum)
{
    metrics_slot  *s;
    size_t         k, b;

    memset(sum, 0, sizeof(*sum));

    for (k = 0; k < MRB_METRICS_SLOTS; k++) {
        s = &metrics->slots[k];
        if (atomic_load_explicit(&s->pid, memory_order_relaxed) == 0) {
            continue;
        }

#define METRICS_ADD(f)                                                        \
        sum->f += atomic_load_explicit(&s->rows[i].f, memory_order_relaxed)

        METRICS_ADD(count);
        METRICS_ADD(status_5xx);
        METRICS_ADD(run_ns);
        METRICS_ADD(wait_ns);
        for (b = 0; b <= METRICS_NBUCKETS; b++) {
            METRICS_ADD(buckets[b]);
        }
        for (b = 0; b < MRB_METRICS_NEVENTS; b++) {
            METRICS_ADD(events[b]);
        }
#undef METRICS_ADD
    }

    for (b = 0; b <= METRICS_NBUCKETS; b++) {
        sum->count += sum->buckets[b];
    }
}


/* The labels of row r: {server="...",script="...",phase="..."[,class]} less
 * the closing brace, which the caller writes after an le if it has one. */
static void
prom_labels(metrics_buf *b, const char *server, const metrics_row *r)
{
    buf_printf(b, "{server=");
    buf_quoted(b, server, 0);
    buf_printf(b, ",script=");
    buf_quoted(b, r->script, 0);
    buf_printf(b, ",phase=");
    buf_quoted(b, r->phase, 0);

    if (atomic_load_explicit((_Atomic uint32_t *) &r->kind,
                             memory_order_acquire)
        == METRICS_ROW_EXCEPTION)
    {
        buf_printf(b, ",class=");
        buf_quoted(b, r->cls, 0);
    }
}


/* One metric family: its HELP and TYPE, then one sample per row of kind. */
typedef enum {
    PROM_RUNS = 0,
    PROM_EXCEPTIONS,
    PROM_5XX,
    PROM_WAIT,
    PROM_RUN_SECONDS,
    PROM_EVENTS                 /* one family per mrb_metrics_event */
} prom_family;

static const struct {
    const char  *name;
    const char  *type;
    const char  *help;
} prom_families[] = {
    { "mruby_runs_total", "counter",
      "Runs of the script in the phase, ended (waits included)." },
    { "mruby_exceptions_total", "counter",
      "Runs of the script that ended in an exception, by its class." },
    { "mruby_responses_5xx_total", "counter",
      "Runs that failed or set a status from 500 to 599." },
    { "mruby_wait_seconds_total", "counter",
      "Seconds the runs spent suspended, waiting (sleep, Redis, "
      "sub-requests)." },
    { "mruby_run_seconds", "histogram",
      "Seconds from the start to the end of each run, waits included." },

    /* by mrb_metrics_event */
    { "mruby_compiles_total", "counter",
      "Compiles of the script in a worker process." },
    { "mruby_compile_failures_total", "counter",
      "Compiles of the script that failed (syntax error, unreadable file)." },
    { "mruby_reloads_total", "counter",
      "Live edits of the script that a worker process put in use." },
    { "mruby_kept_last_good_total", "counter",
      "Changes of the script that do not run, while a worker serves the "
      "last version that compiled." },
    { "mruby_redis_commands_total", "counter",
      "Redis commands the script sent." },
    { "mruby_redis_errors_total", "counter",
      "Redis commands of the script that got an error reply or were lost "
      "with their connection." },
    { "mruby_written_bytes_total", "counter",
      "Bytes of response body the script wrote (Server.rputs, echo)." }
};


static void
prom_family_write(metrics_buf *b, const char *server, unsigned f)
{
    metrics_counts  sum;
    metrics_row    *r;
    uint64_t        cumulative;
    uint32_t        i, kind;
    size_t          k;

    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", prom_families[f].name,
               prom_families[f].help, prom_families[f].name,
               prom_families[f].type);

    for (i = 0; i < MRB_METRICS_ROWS; i++) {
        r = &metrics->rows[i];
        kind = atomic_load_explicit(&r->kind, memory_order_acquire);

        if (kind != (f == PROM_EXCEPTIONS ? METRICS_ROW_EXCEPTION
                                          : METRICS_ROW_RUN))
        {
            continue;
        }

        metrics_sum(i, &sum);

        switch (f) {

        case PROM_RUNS:
        case PROM_EXCEPTIONS:
        case PROM_5XX:
            buf_printf(b, "%s", prom_families[f].name);
            prom_labels(b, server, r);
            buf_printf(b, "} %" PRIu64 "\n",
                       f == PROM_5XX ? sum.status_5xx : sum.count);
            break;

        default:
            buf_printf(b, "%s", prom_families[f].name);
            prom_labels(b, server, r);
            buf_printf(b, "} %" PRIu64 "\n", sum.events[f - PROM_EVENTS]);
            break;

        case PROM_WAIT:
            buf_printf(b, "%s", prom_families[f].name);
            prom_labels(b, server, r);
            buf_printf(b, "} ");
            buf_seconds(b, sum.wait_ns);
            buf_printf(b, "\n");
            break;

        case PROM_RUN_SECONDS:
            cumulative = 0;
            for (k = 0; k < METRICS_NBUCKETS; k++) {
                cumulative += sum.buckets[k];
                buf_printf(b, "mruby_run_seconds_bucket");
                prom_labels(b, server, r);
                buf_printf(b, ",le=\"");
                buf_bound(b, metrics_bounds[k]);
                buf_printf(b, "\"} %" PRIu64 "\n", cumulative);
            }
            buf_printf(b, "mruby_run_seconds_bucket");
            prom_labels(b, server, r);
            buf_printf(b, ",le=\"+Inf\"} %" PRIu64 "\n", sum.count);

            buf_printf(b, "mruby_run_seconds_sum");
            prom_labels(b, server, r);
            buf_printf(b, "} ");
            buf_seconds(b, sum.run_ns);
            buf_printf(b, "\nmruby_run_seconds_count");
            prom_labels(b, server, r);
            buf_printf(b, "} %" PRIu64 "\n", sum.count);
            break;
        }
    }
}


/* The worker processes alive now: their slots, up to MRB_METRICS_SLOTS. */
static size_t
metrics_live_slots(metrics_slot **live)
{
    metrics_slot  *s;
    pid_t          pid;
    size_t         k, n = 0;

    for (k = 0; k < MRB_METRICS_SLOTS; k++) {
        s = &metrics->slots[k];
        pid = atomic_load_explicit(&s->pid, memory_order_relaxed);
        if (pid != 0 && !metrics_pid_gone(pid)) {
            live[n++] = s;
        }
    }

    return n;
}


static const struct {
    const char  *name;
    const char  *help;
} prom_worker_families[] = {
    { "mruby_worker_interpreters",
      "Interpreters of the worker process." },
    { "mruby_worker_coroutines",
      "Runs of the worker on a coroutine (each on a stack of its own) now." },
    { "mruby_worker_coroutines_peak",
      "The most runs of the worker on a coroutine at once since it started." }
};


static int64_t
metrics_worker_gauge(metrics_slot *s, size_t f)
{
    return atomic_load_explicit(f == 0 ? &s->interps
                                : f == 1 ? &s->coros : &s->coros_peak,
                                memory_order_relaxed);
}


static void
prom_workers_write(metrics_buf *b, const char *server)
{
    metrics_slot  *live[MRB_METRICS_SLOTS];
    size_t         n, f, k;

    n = metrics_live_slots(live);

    for (f = 0; f < 3; f++) {
        buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n",
                   prom_worker_families[f].name,
                   prom_worker_families[f].help,
                   prom_worker_families[f].name);
        for (k = 0; k < n; k++) {
            buf_printf(b, "%s{server=", prom_worker_families[f].name);
            buf_quoted(b, server, 0);
            buf_printf(b, ",worker=\"%ld\"} %" PRId64 "\n",
                       (long) atomic_load(&live[k]->pid),
                       metrics_worker_gauge(live[k], f));
        }
    }
}


/* The shared dictionaries in use: their keys, free bytes and evictions,
 * each read under its zone's lock. */
static void
prom_shared_dicts_write(metrics_buf *b, const char *server)
{
    static const struct {
        const char  *name;
        const char  *type;
        const char  *help;
    } families[] = {
        { "mruby_shared_dict_keys", "gauge",
          "Live keys of the shared dictionary." },
        { "mruby_shared_dict_free_bytes", "gauge",
          "Bytes of the shared dictionary's free pages." },
        { "mruby_shared_dict_evictions_total", "counter",
          "Entries the shared dictionary evicted to make room." }
    };

    const mrb_shdict_ref  *ref;
    mrb_shdict_zone       *z;
    mrb_shdict_stats       st;
    uint64_t               v;
    size_t                 f;

    for (f = 0; f < 3; f++) {
        buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", families[f].name,
                   families[f].help, families[f].name, families[f].type);

        for (ref = mrb_shdict_ref_next(NULL); ref != NULL;
             ref = mrb_shdict_ref_next(ref))
        {
            z = mrb_shdict_ref_zone(ref);
            if (z == NULL) {
                continue;
            }

            if (f == 0) {
                v = mrb_shdict_zone_count(z);
            } else {
                mrb_shdict_zone_stats(z, &st);
                v = f == 1 ? (uint64_t) st.free_pages * st.page_size
                           : st.evictions;
            }

            buf_printf(b, "%s{server=", families[f].name);
            buf_quoted(b, server, 0);
            buf_printf(b, ",dict=");
            buf_quoted(b, mrb_shdict_ref_name(ref), 0);
            buf_printf(b, "} %" PRIu64 "\n", v);
        }
    }
}


static void
json_workers(metrics_buf *b)
{
    metrics_slot  *live[MRB_METRICS_SLOTS];
    size_t         n, k;

    n = metrics_live_slots(live);

    for (k = 0; k < n; k++) {
        buf_printf(b, "%s\n  {\"pid\": %ld, \"interpreters\": %" PRId64
                   ", \"coroutines\": %" PRId64 ", \"coroutines_peak\": %"
                   PRId64 "}", k ? "," : "", (long) atomic_load(&live[k]->pid),
                   metrics_worker_gauge(live[k], 0),
                   metrics_worker_gauge(live[k], 1),
                   metrics_worker_gauge(live[k], 2));
    }
}


int
mrb_metrics_script_next(uint32_t *cursor, mrb_metrics_script *out)
{
    metrics_counts  sum;
    metrics_row    *r;
    uint64_t        cumulative = 0;
    uint32_t        i;
    size_t          k;

    for (i = *cursor; metrics != NULL && i < MRB_METRICS_ROWS; i++) {
        r = &metrics->rows[i];
        if (atomic_load_explicit(&r->kind, memory_order_acquire)
            != METRICS_ROW_RUN)
        {
            continue;
        }

        metrics_sum(i, &sum);
        memcpy(out->script, r->script, sizeof(out->script));
        memcpy(out->phase, r->phase, sizeof(out->phase));
        out->runs = sum.count;
        out->status_5xx = sum.status_5xx;
        out->run_ns = sum.run_ns;
        out->wait_ns = sum.wait_ns;
        for (k = 0; k < METRICS_NBUCKETS; k++) {
            cumulative += sum.buckets[k];
            out->le_ns[k] = metrics_bounds[k];
            out->buckets[k] = cumulative;
        }
        for (k = 0; k < MRB_METRICS_NEVENTS; k++) {
            out->events[k] = sum.events[k];
        }
        out->row = i;

        *cursor = i + 1;
        return 1;
    }

    return 0;
}


int
mrb_metrics_exception_next(const mrb_metrics_script *of, uint32_t *cursor,
    char *cls, size_t len, uint64_t *count)
{
    metrics_counts  sum;
    metrics_row    *r;
    uint32_t        i;

    for (i = *cursor; metrics != NULL && i < MRB_METRICS_ROWS; i++) {
        r = &metrics->rows[i];
        if (atomic_load_explicit(&r->kind, memory_order_acquire)
                != METRICS_ROW_EXCEPTION
            || strcmp(r->script, of->script) != 0
            || strcmp(r->phase, of->phase) != 0)
        {
            continue;
        }

        metrics_sum(i, &sum);
        snprintf(cls, len, "%s", r->cls);
        *count = sum.count;

        *cursor = i + 1;
        return 1;
    }

    return 0;
}


static void
json_script(metrics_buf *b, const mrb_metrics_script *m)
{
    uint32_t  cursor = 0;
    uint64_t  count;
    size_t    k;
    char      cls[METRICS_CLASS_LEN];

    buf_printf(b, "\n  {\"script\": ");
    buf_quoted(b, m->script, 1);
    buf_printf(b, ", \"phase\": ");
    buf_quoted(b, m->phase, 1);
    buf_printf(b, ", \"runs\": %" PRIu64 ", \"responses_5xx\": %" PRIu64
               ", \"run_seconds\": ", m->runs, m->status_5xx);
    buf_seconds(b, m->run_ns);
    buf_printf(b, ", \"wait_seconds\": ");
    buf_seconds(b, m->wait_ns);

    for (k = 0; k < MRB_METRICS_NEVENTS; k++) {
        buf_printf(b, ", \"%s\": %" PRIu64, mrb_metrics_event_names[k],
                   m->events[k]);
    }

    /* [le, runs up to it]: Prometheus' buckets */
    buf_printf(b, ",\n   \"run_seconds_buckets\": [");
    for (k = 0; k < METRICS_NBUCKETS; k++) {
        buf_printf(b, "%s[", k ? ", " : "");
        buf_bound(b, m->le_ns[k]);
        buf_printf(b, ", %" PRIu64 "]", m->buckets[k]);
    }
    buf_printf(b, "],\n   \"exceptions\": {");

    for (k = 0; mrb_metrics_exception_next(m, &cursor, cls, sizeof(cls),
                                           &count); k++)
    {
        buf_printf(b, "%s", k ? ", " : "");
        buf_quoted(b, cls, 1);
        buf_printf(b, ": %" PRIu64, count);
    }

    buf_printf(b, "}}");
}


mrb_metrics_format_e
mrb_metrics_format_of_query(const char *args, size_t len)
{
    static const char   want[] = "format=json";
    const size_t        n = sizeof(want) - 1;
    size_t              i = 0;

    while (i + n <= len) {
        if (memcmp(args + i, want, n) == 0
            && (i + n == len || args[i + n] == '&'))
        {
            return MRB_METRICS_JSON;
        }

        while (i < len && args[i] != '&') {
            i++;
        }
        i++;
    }

    return MRB_METRICS_PROMETHEUS;
}


int
mrb_metrics_format(mrb_metrics_format_e format, const char *server,
    char **out, size_t *len, char *err, size_t errlen)
{
    metrics_buf          b = { NULL, 0, 0, 0 };
    mrb_metrics_script   m;
    uint32_t             cursor = 0;
    unsigned             f;
    int                  first = 1;

    if (metrics == NULL) {
        snprintf(err, errlen, "metrics: the table is not mapped");
        return -1;
    }

    if (format == MRB_METRICS_PROMETHEUS) {
        for (f = 0; f < PROM_EVENTS + MRB_METRICS_NEVENTS; f++) {
            prom_family_write(&b, server, f);
        }
        prom_workers_write(&b, server);
        prom_shared_dicts_write(&b, server);

    } else {
        buf_printf(&b, "{\"server\": ");
        buf_quoted(&b, server, 1);
        buf_printf(&b, ", \"scripts\": [");

        while (mrb_metrics_script_next(&cursor, &m)) {
            buf_printf(&b, "%s", first ? "" : ",");
            first = 0;
            json_script(&b, &m);
        }

        buf_printf(&b, "\n], \"workers\": [");
        json_workers(&b);

        buf_printf(&b, "\n]}\n");
    }

    if (b.failed) {
        free(b.p);
        snprintf(err, errlen, "metrics: out of memory");
        return -1;
    }

    *out = b.p;
    *len = b.len;
    return 0;
}
