/*
 * Scripts: compile once per process, load once per interpreter, run many
 * times; under `stat`, recompile when the file changes; under `never`,
 * compile on every run.
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mruby.h>
#include <mruby/compile.h>
#include <mruby/dump.h>
#include <mruby/error.h>
#include <mruby/irep.h>
#include <mruby/proc.h>

#include "mrb_file_sym.h"
#include "mrb_file_watch.h"
#include "mrb_interp_core.h"
#include "mrb_metrics.h"
#include "mrb_script.h"
#include "mrb_script_compile.h"
#include "mrb_wait_core.h"


/* What identifies the version of a file a compile was made from. */
typedef struct {
    dev_t            dev;
    ino_t            ino;
    off_t            size;
    struct timespec  mtime;
} mrb_file_id;

/*
 * A version of a file that compiled: what a run under `stat` compares the
 * file with before it takes the lock.  Published once, never changed;
 * freed with the script.
 */
typedef struct mrb_script_version_s  mrb_script_version;

struct mrb_script_version_s {
    mrb_file_id          file_id;
    uint32_t             generation;
    mrb_script_version  *older;

    /* The file watch epoch at which stat() last found this version. */
    _Atomic uint64_t     fresh_at;
};

/* (Fields of 4 bytes go in pairs: one per script and process, at hosting
 * scale 10,000 of them.) */
struct mrb_script_s {
    unsigned          id;          /* index of its proc in each interpreter */
    mrb_cache_policy  policy;
    char             *name;        /* the path, or "origin:line" */
    int               line;        /* first line of inline code */
    unsigned          is_file:1;

    pthread_mutex_t   lock;        /* guards what follows */
    uint32_t          generation;  /* 0: no bytecode; bumps on each compile */
    unsigned          failure_unread:1; /* failure: it could not be read */
    uint8_t          *bin;         /* bytecode, malloc'd */
    size_t            bin_len;
    mrb_file_id       file_id;     /* the file version compiled or failed */
    uint64_t          source_hash; /* and a hash of its content */
    char             *failure;     /* why the file on disk does not run */
    time_t            failure_since;
    mrb_file_id       candidate;   /* not watched: a change seen once */
    uint64_t          candidate_ms;

    /* The newest version that compiled, read without the lock. */
    mrb_script_version *_Atomic  compiled;
    _Atomic int       broken;      /* failure != NULL */

    /* Under `stat`: that the file cannot be watched, or the file watch's
     * path in this process (mrb_file_watch.h). */
    _Atomic int       unwatchable;
    mrb_file_watch_path *_Atomic  watch;

    /* Its row in the metrics table and the phase it is for
     * (mrb_metrics_run_begin). */
    _Atomic uint64_t  metrics_row;

    mrb_script       *prev, *next; /* the `stat` files of the process */
    mrb_script       *named_next;  /* in the table of mrb_script_for_file */
    uint32_t          named_hash;
};

/* Ids, and the `stat` file scripts in the order of their ids (for
 * mrb_script_stale_next and mrb_script_watch_needs). */
static unsigned         script_next_id;
static mrb_script      *script_stat_first, *script_stat_last;
static pthread_mutex_t  script_id_lock = PTHREAD_MUTEX_INITIALIZER;

static void script_publish_locked(mrb_script *script);
static uint64_t source_hash(const char *src, size_t len);


int
mrb_cache_policy_parse(const char *s, mrb_cache_policy *policy)
{
    if (strcmp(s, "stat") == 0) {
        *policy = MRB_CACHE_STAT;
    } else if (strcmp(s, "forever") == 0) {
        *policy = MRB_CACHE_FOREVER;
    } else if (strcmp(s, "never") == 0) {
        *policy = MRB_CACHE_NEVER;
    } else {
        return -1;
    }

    return 0;
}


const char *
mrb_cache_policy_name(mrb_cache_policy policy)
{
    switch (policy) {
    case MRB_CACHE_FOREVER:
        return "forever";
    case MRB_CACHE_NEVER:
        return "never";
    default:
        return "stat";
    }
}


/*
 * Reads a whole file into a malloc'd buffer; returns NULL with err.  Plain
 * read(2), not stdio: under `never` this runs on every request, and a FILE
 * costs two allocations and a copy more.
 */
static char *
file_read(const char *path, size_t *len, mrb_file_id *id, char *err,
    size_t errlen)
{
    struct stat   st;
    char         *buf;
    size_t        n = 0;
    ssize_t       got;
    int           fd;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }

    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }

    buf = malloc((size_t) st.st_size + 1);
    if (buf == NULL) {
        snprintf(err, errlen, "%s: out of memory reading the script", path);
        close(fd);
        return NULL;
    }

    while (n < (size_t) st.st_size) {
        got = read(fd, buf + n, (size_t) st.st_size - n);
        if (got == 0) {
            break;
        }
        if (got == -1) {
            if (errno == EINTR) {
                continue;
            }
            snprintf(err, errlen, "%s: read error: %s", path,
                     strerror(errno));
            free(buf);
            close(fd);
            return NULL;
        }
        n += (size_t) got;
    }

    close(fd);
    buf[n] = '\0';
    *len = n;

    if (id != NULL) {
        id->dev = st.st_dev;
        id->ino = st.st_ino;
        id->size = st.st_size;
        id->mtime = st.st_mtim;
    }

    return buf;
}


/* Compiles src and keeps the bytecode in script; lock held. */
static int
script_compile_locked(mrb_script *script, const char *src, size_t len,
    char *err, size_t errlen)
{
    uint8_t  *bin;
    size_t    bin_len;

    if (mrb_script_compile(src, len, script->name, script->line, &bin,
                           &bin_len, err, errlen)
        != 0)
    {
        return -1;
    }

    free(script->bin);
    script->bin = bin;
    script->bin_len = bin_len;
    script->generation++;
    return 0;
}


static int
script_compile_at_config(mrb_script *script, const char *src, size_t len,
    char *err, size_t errlen)
{
    int  rc;

    pthread_mutex_lock(&script->lock);
    rc = script_compile_locked(script, src, len, err, errlen);
    pthread_mutex_unlock(&script->lock);

    return rc;
}


static mrb_script *
script_new(const char *name, mrb_cache_policy policy, int is_file, int line,
    char *err, size_t errlen)
{
    mrb_script  *script;

    script = calloc(1, sizeof(mrb_script));
    if (script == NULL || (script->name = strdup(name)) == NULL) {
        snprintf(err, errlen, "%s: out of memory", name);
        free(script);
        return NULL;
    }

    pthread_mutex_init(&script->lock, NULL);
    script->policy = policy;
    script->is_file = is_file;
    script->line = line;

    pthread_mutex_lock(&script_id_lock);
    script->id = script_next_id++;
    if (is_file && policy == MRB_CACHE_STAT) {
        script->prev = script_stat_last;
        if (script_stat_last != NULL) {
            script_stat_last->next = script;
        } else {
            script_stat_first = script;
        }
        script_stat_last = script;
    }
    pthread_mutex_unlock(&script_id_lock);

    return script;
}


/*
 * Under `stat`, a file named in the configuration is compiled now if it
 * can be, so that every process forked from this one starts with a
 * version to go on with (a process that never compiled the script has
 * nothing to serve while a writer is half way or after a bad change).  A
 * missing file or a syntax error stays a request-time error, as before.
 */
static void
script_compile_stat_at_config(mrb_script *script)
{
    mrb_file_id  id;
    char        *src, err[MRB_ERR_MSG_LEN];
    size_t       len;

    src = file_read(script->name, &len, &id, err, sizeof(err));
    if (src == NULL) {
        return;
    }

    if (script_compile_at_config(script, src, len, err, sizeof(err)) == 0) {
        pthread_mutex_lock(&script->lock);
        script->file_id = id;
        script->source_hash = source_hash(src, len);
        script_publish_locked(script);
        pthread_mutex_unlock(&script->lock);
    }

    free(src);
}


static mrb_script *
script_from_file(const char *path, mrb_cache_policy policy, int at_config,
    char *err, size_t errlen)
{
    mrb_script  *script;
    char        *src;
    size_t       len;
    int          rc;

    script = script_new(path, policy, 1, 1, err, errlen);
    if (script == NULL || policy == MRB_CACHE_NEVER) {
        return script;
    }

    if (policy == MRB_CACHE_STAT) {
        if (at_config) {
            script_compile_stat_at_config(script);
        }
        return script;
    }

    src = file_read(path, &len, &script->file_id, err, errlen);
    if (src == NULL) {
        mrb_script_free(script);
        return NULL;
    }

    rc = script_compile_at_config(script, src, len, err, errlen);
    free(src);

    if (rc != 0) {
        mrb_script_free(script);
        return NULL;
    }

    return script;
}


mrb_script *
mrb_script_from_file(const char *path, mrb_cache_policy policy, char *err,
    size_t errlen)
{
    return script_from_file(path, policy, 1, err, errlen);
}


mrb_script *
mrb_script_from_code(const char *code, size_t len, const char *origin,
    int line, char *err, size_t errlen)
{
    mrb_script  *script;

    script = script_new(origin, MRB_CACHE_FOREVER, 0, line, err, errlen);
    if (script == NULL) {
        return NULL;
    }

    if (script_compile_at_config(script, code, len, err, errlen) != 0) {
        mrb_script_free(script);
        return NULL;
    }

    return script;
}


/*
 * The scripts of mrb_script_for_file, chained by path hash in a table that
 * doubles as it fills: a hosting server may name 100,000 of them.
 */
static mrb_script      **script_named;
static size_t            script_named_size, script_named_count;
static pthread_mutex_t   script_named_lock = PTHREAD_MUTEX_INITIALIZER;


static uint32_t
path_hash(const char *s)
{
    uint32_t  h = 5381;

    while (*s) {
        h = h * 33 + (unsigned char) *s++;
    }

    return h;
}


/* Room for one more; lock held.  Returns 0, or -1 out of memory. */
static int
script_named_reserve_locked(void)
{
    mrb_script  **grown, *s, *next;
    size_t        size, i;

    if (script_named_count < script_named_size) {
        return 0;
    }

    size = script_named_size ? script_named_size * 2 : 256;
    grown = calloc(size, sizeof(mrb_script *));
    if (grown == NULL) {
        return -1;
    }

    for (i = 0; i < script_named_size; i++) {
        for (s = script_named[i]; s != NULL; s = next) {
            next = s->named_next;
            s->named_next = grown[s->named_hash & (size - 1)];
            grown[s->named_hash & (size - 1)] = s;
        }
    }

    free(script_named);
    script_named = grown;
    script_named_size = size;
    return 0;
}


mrb_script *
mrb_script_for_file(const char *path, mrb_cache_policy policy, char *err,
    size_t errlen)
{
    mrb_script  *s = NULL;
    uint32_t     h = path_hash(path);

    pthread_mutex_lock(&script_named_lock);

    if (script_named_size != 0) {
        for (s = script_named[h & (script_named_size - 1)]; s != NULL;
             s = s->named_next)
        {
            if (s->named_hash == h && s->policy == policy
                && strcmp(s->name, path) == 0)
            {
                goto done;
            }
        }
    }

    if (script_named_reserve_locked() != 0) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto done;
    }

    s = script_from_file(path, policy, 0, err, errlen);
    if (s != NULL) {
        s->named_hash = h;
        s->named_next = script_named[h & (script_named_size - 1)];
        script_named[h & (script_named_size - 1)] = s;
        script_named_count++;
    }

done:
    pthread_mutex_unlock(&script_named_lock);
    return s;
}


void
mrb_script_free(mrb_script *script)
{
    mrb_script_version  *v, *older;

    if (script == NULL) {
        return;
    }

    pthread_mutex_lock(&script_id_lock);
    if (script->is_file && script->policy == MRB_CACHE_STAT) {
        if (script->prev != NULL) {
            script->prev->next = script->next;
        } else {
            script_stat_first = script->next;
        }
        if (script->next != NULL) {
            script->next->prev = script->prev;
        } else {
            script_stat_last = script->prev;
        }
    }
    pthread_mutex_unlock(&script_id_lock);

    for (v = script->compiled; v != NULL; v = older) {
        older = v->older;
        free(v);
    }

    pthread_mutex_destroy(&script->lock);
    free(script->bin);
    free(script->failure);
    free(script->name);
    free(script);
}


const char *
mrb_script_name(const mrb_script *script)
{
    return script->name;
}


mrb_cache_policy
mrb_script_policy(const mrb_script *script)
{
    return script->policy;
}


static int
file_id_equal(const mrb_file_id *a, const struct stat *st)
{
    return a->ino == st->st_ino && a->dev == st->st_dev
           && a->size == st->st_size
           && a->mtime.tv_sec == st->st_mtim.tv_sec
           && a->mtime.tv_nsec == st->st_mtim.tv_nsec;
}


static int
file_id_same(const mrb_file_id *a, const mrb_file_id *b)
{
    return a->ino == b->ino && a->dev == b->dev && a->size == b->size
           && a->mtime.tv_sec == b->mtime.tv_sec
           && a->mtime.tv_nsec == b->mtime.tv_nsec;
}


/*
 * Publishes the version just compiled for the lock-free check.  Without
 * memory for it, runs simply take the lock.
 */
static void
script_publish_locked(mrb_script *script)
{
    mrb_script_version  *v = malloc(sizeof(mrb_script_version));

    if (v == NULL) {
        return;
    }

    v->file_id = script->file_id;
    v->generation = script->generation;
    atomic_init(&v->fresh_at, 0);
    v->older = atomic_load_explicit(&script->compiled, memory_order_relaxed);
    atomic_store_explicit(&script->compiled, v, memory_order_release);
}


/* FNV-1a: tells two versions of a file with the same size and mtime apart. */
static uint64_t
source_hash(const char *src, size_t len)
{
    uint64_t  h = 14695981039346656037ULL;
    size_t    i;

    for (i = 0; i < len; i++) {
        h = (h ^ (unsigned char) src[i]) * 1099511628211ULL;
    }

    return h;
}


/*
 * Not watched, a changed file counts when two looks at least this far
 * apart find the same size, mtime and inode: a look between a truncation
 * and the write that follows, or between two writes, sees a file that
 * changes again before the next look.
 */
#define SCRIPT_SETTLE_MS  20


static uint64_t
script_now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


/*
 * The outcome of the file on disk as last seen; lock held.  A file that
 * does not run still leaves the last version that compiled: with keep,
 * runs go on with it.
 */
static int
script_outcome_locked(mrb_script *script, int keep, char *err, size_t errlen)
{
    if (script->failure == NULL || (keep && script->generation != 0)) {
        return 0;
    }

    snprintf(err, errlen, "%s", script->failure);
    return -1;
}


/*
 * Records why the file on disk does not run (err): unread, it could not be
 * stat()ed or read; else it did not compile.  Each new failure gets one
 * log line when the previous version goes on serving; a run that asked for
 * failures (mrubyStatOnError fail) gets them as errors, as does any run
 * while no version ever compiled.  Lock held.
 */
static int
script_fail_locked(mrb_interp *interp, mrb_script *script, int unread,
    int keep, char *err, size_t errlen)
{
    if (script->failure == NULL || !unread || !script->failure_unread) {
        free(script->failure);
        script->failure = strdup(err);
        script->failure_unread = unread;
        script->failure_since = time(NULL);
        atomic_store_explicit(&script->broken, 1, memory_order_relaxed);

        if (keep && script->generation != 0) {
            mrb_interp_log(interp, MRB_LOG_ERR, "%s; the previous version "
                           "is still served", err);
            mrb_metrics_count(mrb_metrics_row_of(&script->metrics_row),
                              MRB_METRICS_KEPT_LAST_GOOD, 1);
        }
    }

    if (unread) {
        /* whatever comes back, even the same inode, is read again */
        memset(&script->file_id, 0, sizeof(script->file_id));
    }

    return script_outcome_locked(script, keep, err, errlen);
}


/*
 * How long a compile waits, after reading a watched file, before it asks
 * the queue whether a writer was at work (see script_refresh_locked).
 * Paid once per change and process.
 */
#define SCRIPT_SETTLE_US  200


static int
script_settled(mrb_interp *interp, mrb_file_watch_path *path, uint64_t epoch)
{
    struct timespec  pause = { 0, SCRIPT_SETTLE_US * 1000 };

    nanosleep(&pause, NULL);
    return mrb_file_watch_settled(path, mrb_interp_file_watch(interp), epoch);
}


/*
 * Under `stat`: recompiles when the file is not the version compiled (or
 * failed) last.  A file rewritten within one tick of the clock keeps its
 * size and mtime: with verify (the file watch saw a change), the content
 * decides.  epoch: the path's epoch when the run began, or 0 when the
 * file is not watched (then a change counts only once two looks agree).
 * st is NULL when stat() failed with stat_errno.  *unsettled: a writer
 * may have begun since epoch, what was read is not used (and the version
 * that runs is not current).  Lock held.  Returns 0, or -1 with err.
 */
static int
script_refresh_locked(mrb_interp *interp, mrb_script *script,
    const struct stat *st, int stat_errno, int verify, uint64_t epoch,
    int keep, int *unsettled, char *err, size_t errlen)
{
    mrb_file_watch_path  *path;
    int                   settle = epoch == 0;
    mrb_file_id  id;
    uint64_t     hash, now;
    uint32_t     row;
    char        *src;
    size_t       len;
    int          known, reload, rc;

    known = script->generation != 0 || script->failure != NULL;

    if (st == NULL) {
        snprintf(err, errlen, "%s: cannot stat: %s", script->name,
                 strerror(stat_errno));
        return script_fail_locked(interp, script, 1, keep, err, errlen);
    }

    if (known && !verify && file_id_equal(&script->file_id, st)) {
        return script_outcome_locked(script, keep, err, errlen);
    }

    if (settle && script->generation != 0) {
        now = script_now_ms();
        if (!file_id_equal(&script->candidate, st)) {
            script->candidate.dev = st->st_dev;
            script->candidate.ino = st->st_ino;
            script->candidate.size = st->st_size;
            script->candidate.mtime = st->st_mtim;
            script->candidate_ms = now;
            return script_outcome_locked(script, keep, err, errlen);
        }
        if (now - script->candidate_ms < SCRIPT_SETTLE_MS) {
            return script_outcome_locked(script, keep, err, errlen);
        }
    }

    src = file_read(script->name, &len, &id, err, errlen);
    if (src == NULL) {
        return script_fail_locked(interp, script, 1, keep, err, errlen);
    }

    /*
     * A writer at work (a truncation, the first write of a new version)
     * may have been read half way: with a version to go on with, what was
     * read waits for the writer.  The kernel makes a write's bytes visible
     * a moment before it queues the write's event, so the queue is asked
     * after SCRIPT_SETTLE_US; an empty file is the middle of a rewrite.
     */
    path = atomic_load_explicit(&script->watch, memory_order_relaxed);
    if (script->generation != 0 && epoch != 0
        && (len == 0 || !script_settled(interp, path, epoch)))
    {
        free(src);
        *unsettled = 1;
        return script_outcome_locked(script, keep, err, errlen);
    }

    hash = source_hash(src, len);
    if (known && hash == script->source_hash
        && file_id_same(&id, &script->file_id))
    {
        free(src);
        return script_outcome_locked(script, keep, err, errlen);
    }

    script->file_id = id;
    script->source_hash = hash;
    reload = script->generation != 0;
    rc = script_compile_locked(script, src, len, err, errlen);
    free(src);

    row = mrb_metrics_row_of(&script->metrics_row);
    if (rc != 0) {
        mrb_metrics_count(row, MRB_METRICS_COMPILE_FAILURES, 1);

        /* remembered, so that the broken version is not parsed again */
        return script_fail_locked(interp, script, 0, keep, err, errlen);
    }

    mrb_metrics_count(row, MRB_METRICS_COMPILES, 1);
    mrb_metrics_count(row, MRB_METRICS_RELOADS, reload);

    free(script->failure);
    script->failure = NULL;
    atomic_store_explicit(&script->broken, 0, memory_order_relaxed);
    script_publish_locked(script);
    return 0;
}


/*
 * A new proc takes its target class (where its top-level constants and
 * methods go) and its outer proc from the call in progress.  A script
 * loaded inside another run (an input filter script under r.body) would
 * define its constants into the class of that method, where no cleanup
 * finds them, and keep doing so from the cache: a script is always top
 * level.
 */
static void
script_proc_toplevel(mrb_state *mrb, struct RProc *proc)
{
    proc->upper = NULL;
    MRB_PROC_SET_TARGET_CLASS(proc, mrb->object_class);
}


/*
 * Gives a proc loaded from the script's bytecode the interpreter's symbol
 * for the script's name (mrb_script_compile.h): the one of the version it
 * replaces, or else interned, which may raise (out of memory) where no run
 * has a handler: protected.  Returns 0, or -1.
 */
static int
script_proc_name_file(mrb_interp *interp, mrb_script *script,
    struct RProc *proc)
{
    mrb_state        *mrb = mrb_interp_state(interp);
    struct RProc     *last = mrb_interp_proc_any(interp, script->id);
    mrb_sym           file = last != NULL ? mrb_script_file_get(last) : 0;

    /* through the interpreter's index: mruby's own lookup of a new name
     * scans the whole table (mrb_file_sym.c) */
    if (file == 0
        && mrb_file_sym_protected(mrb, mrb_interp_file_syms(interp),
                                  script->name, &file)
           != 0)
    {
        return -1;
    }

    mrb_script_file_set(proc, file);
    return 0;
}


/*
 * Under `stat`: the file watch epoch of the script's path that a run may
 * compare a version's fresh_at with, or 0 when the file is not watched in
 * this process.  The path is read first: a stat() made at this epoch then
 * saw a file already watched, so no change after it can go unnoticed.
 */
static uint64_t
script_watch_epoch(mrb_interp *interp, mrb_script *script)
{
    mrb_file_watch_path  *path = atomic_load_explicit(&script->watch,
                                                      memory_order_acquire);

    if (path == NULL) {
        return 0;
    }

    mrb_file_watch_poll(mrb_interp_file_watch(interp));
    return mrb_file_watch_path_epoch(path);
}


/*
 * Under `stat`, a file not watched (yet, or any more) in this process:
 * watches it.  The runs that follow stat() once more at an epoch that
 * covers the file, and the first to find it unchanged marks the version
 * fresh.
 */
static void
script_watch_start(mrb_interp *interp, mrb_script *script)
{
    mrb_file_watch_path  *path;
    char                  why[MRB_ERR_REASON_LEN];

    if (atomic_load_explicit(&script->unwatchable, memory_order_relaxed)) {
        return;
    }

    path = mrb_file_watch_add(script->name, why, sizeof(why));
    if (path == NULL) {
        if (!atomic_exchange_explicit(&script->unwatchable, 1,
                                      memory_order_relaxed))
        {
            mrb_interp_log(interp, MRB_LOG_INFO,
                           "%s: not watched for changes (%s): stat() on "
                           "every run", script->name, why);
        }
        return;
    }

    atomic_store_explicit(&script->watch, path, memory_order_release);
}


/*
 * Under `stat`: the loaded proc of the version of the file that compiled
 * last, if the file is still that version, without taking the lock:
 * threads would otherwise queue on one script's lock on every request.
 * While the file watch has seen no change since the version was last found
 * current, not even stat() is needed; after a change, the content is read
 * again (verify) even if size and mtime match.  Sets *proc (NULL: go
 * through the lock), st (or *stat_errno), epoch and verify.
 */
static void
script_proc_current(mrb_interp *interp, mrb_script *script, int watch,
    int keep, struct stat *st, int *stat_errno, uint64_t *epoch, int *verify,
    struct RProc **proc)
{
    mrb_script_version  *version;
    int                  fresh;

    /* watched before anything is read: a writer at work shows */
    if (watch && atomic_load_explicit(&script->watch, memory_order_relaxed)
                 == NULL)
    {
        script_watch_start(interp, script);
    }

    version = atomic_load_explicit(&script->compiled, memory_order_acquire);
    *epoch = watch ? script_watch_epoch(interp, script) : 0;
    *verify = 0;
    *stat_errno = 0;
    *proc = NULL;

    fresh = version != NULL && *epoch != 0
            && atomic_load_explicit(&version->fresh_at, memory_order_relaxed)
               == *epoch
            && (keep || !atomic_load_explicit(&script->broken,
                                              memory_order_relaxed));
    if (fresh) {
        *proc = mrb_interp_proc(interp, script->id, version->generation);
        if (*proc != NULL) {
            return;
        }
    }

    if (stat(script->name, st) != 0) {
        *stat_errno = errno;
        return;
    }

    if (version == NULL || !file_id_equal(&version->file_id, st)) {
        return;
    }

    if (*epoch == 0) {
        if (watch) {
            script_watch_start(interp, script);
        }
        *proc = mrb_interp_proc(interp, script->id, version->generation);

    } else if (!fresh) {
        *verify = 1;
    }
}


/*
 * Under `stat`, through the lock: brings the script up to the file on
 * disk, unless a writer is still at it (then the version that runs stays,
 * and no run compiles half a file).  Returns 0, or -1 with err.
 */
static int
script_update_locked(mrb_interp *interp, mrb_script *script, int watch,
    int keep, const struct stat *st, int stat_errno, uint64_t epoch,
    int verify, char *err, size_t errlen)
{
    mrb_script_version   *version;
    mrb_file_watch_path  *path;
    long                  ms;
    int                   unsettled = 0;

    path = atomic_load_explicit(&script->watch, memory_order_relaxed);
    if (epoch != 0 && script->generation != 0 && path != NULL
        && mrb_file_watch_writing(path, &ms))
    {
        return script_outcome_locked(script, keep, err, errlen);
    }

    if (script_refresh_locked(interp, script, stat_errno ? NULL : st,
                              stat_errno, verify, epoch, keep, &unsettled,
                              err, errlen)
        != 0)
    {
        return -1;
    }

    if (unsettled) {
        return 0;           /* the next run looks again */
    }

    /* the file was read (or found fresh) since epoch was read */
    version = script->compiled;
    if (epoch != 0 && version != NULL
        && version->generation == script->generation)
    {
        atomic_store_explicit(&version->fresh_at, epoch,
                              memory_order_relaxed);
    } else if (watch && epoch == 0) {
        script_watch_start(interp, script);
    }

    return 0;
}


/*
 * The proc of script in interp, loading its current bytecode if needed.
 * watch: a request's run, in the process that serves it, where the file
 * of a `stat` script may be watched instead of stat()ed on every run.
 * keep: a file that no longer compiles leaves the last version running.
 */
static struct RProc *
script_proc(mrb_interp *interp, mrb_script *script, int watch, int keep,
    char *err, size_t errlen)
{
    mrb_state     *mrb = mrb_interp_state(interp);
    struct RProc  *proc;
    struct stat    st;
    uint64_t       epoch = 0;
    int            verify = 0, stat_errno = 0, rc = 0;
    mrbc_context  *cxt;
    mrb_value      v;

    if (script->policy == MRB_CACHE_STAT) {
        script_proc_current(interp, script, watch, keep, &st, &stat_errno,
                            &epoch, &verify, &proc);
        if (proc != NULL) {
            return proc;
        }

    } else {
        proc = mrb_interp_proc(interp, script->id, script->generation);
        if (proc != NULL) {
            return proc;
        }
    }

    pthread_mutex_lock(&script->lock);

    if (script->policy == MRB_CACHE_STAT) {
        rc = script_update_locked(interp, script, watch, keep, &st,
                                  stat_errno, epoch, verify, err, errlen);
    }

    if (rc == 0) {
        proc = mrb_interp_proc(interp, script->id, script->generation);
    }
    if (rc != 0 || proc != NULL) {
        goto done;
    }

    cxt = mrbc_context_new(mrb);
    if (cxt == NULL) {
        snprintf(err, errlen, "%s: out of memory loading", script->name);
        goto done;
    }

    cxt->no_exec = TRUE;
    v = mrb_load_irep_buf_cxt(mrb, script->bin, script->bin_len, cxt);
    mrbc_context_free(mrb, cxt);

    if (mrb->exc != NULL || !mrb_proc_p(v)) {
        mrb->exc = NULL;
        snprintf(err, errlen, "%s: cannot load the bytecode", script->name);
        goto done;
    }

    proc = mrb_proc_ptr(v);
    script_proc_toplevel(mrb, proc);

    if (script_proc_name_file(interp, script, proc) != 0) {
        snprintf(err, errlen, "%s: out of memory loading", script->name);
        proc = NULL;
        goto done;
    }

    if (mrb_interp_proc_keep(interp, script->id, script->generation, proc)
        != 0)
    {
        snprintf(err, errlen, "%s: out of memory keeping the proc",
                 script->name);
        proc = NULL;
    }

done:
    pthread_mutex_unlock(&script->lock);
    return proc;
}


/* Under `never`: reads and compiles the file for this run only. */
static struct RProc *
script_proc_uncached(mrb_interp *interp, mrb_script *script, char *err,
    size_t errlen)
{
    struct RProc  *proc;
    char          *src;
    size_t         len;

    src = file_read(script->name, &len, NULL, err, errlen);
    if (src == NULL) {
        return NULL;
    }

    proc = mrb_script_parse(mrb_interp_state(interp), src, len, script->name,
                            1, err, errlen);
    free(src);

    mrb_metrics_count(mrb_metrics_row_of(&script->metrics_row),
                      proc != NULL ? MRB_METRICS_COMPILES
                                   : MRB_METRICS_COMPILE_FAILURES, 1);

    if (proc != NULL) {
        script_proc_toplevel(mrb_interp_state(interp), proc);
    }

    return proc;
}


/*
 * Under `never` every run leaves its proc and bytecode as garbage.  A minor
 * GC that finds a run in progress promotes its proc to the old generation,
 * where it stays until a major GC, some 300,000 runs later; meanwhile each
 * minor GC's threshold rises with them, and with it the garbage that piles
 * up between two minor GCs, bytecode in malloc'd memory: the malloc arena
 * grows in steps and keeps what it took.  A full GC every
 * SCRIPT_NEVER_GC_RUNS runs of the process keeps the old generation as it
 * was; the minor GCs, with less to go through, then pay for it.  With
 * several interpreters each gets its share in proportion to its runs, as
 * its garbage does.
 */
#define SCRIPT_NEVER_GC_RUNS  1000

static _Atomic unsigned  script_never_runs;


static void
script_never_collect(mrb_state *mrb)
{
    if (atomic_fetch_add_explicit(&script_never_runs, 1,
                                  memory_order_relaxed)
        % SCRIPT_NEVER_GC_RUNS == SCRIPT_NEVER_GC_RUNS - 1)
    {
        mrb_full_gc(mrb);
    }
}


/*
 * Runs proc as run: the run's choice of a stack.  On a coroutine of its
 * own when it may wait and its code names something that waits
 * (mrb_wait_core.h), else on this one.  A suspended run's top-level state
 * still in the tables is taken aside first, so that this run starts from
 * the sealed state.
 */
static inline int
script_exec(mrb_interp *interp, struct RProc *proc, mrb_run_rec *run)
{
    if (mrb_interp_held(interp) != NULL
        && mrb_interp_current(interp) == NULL)
    {
        mrb_wait_set_aside(interp);
    }

    if (run->may_wait
        && (mrb_interp_wait_always(interp) || !mrb_wait_quiet(proc))
        && mrb_wait_wanted(interp, proc))
    {
        return mrb_wait_exec(interp, proc, run);
    }

    if (run->startup) {
        mrb_wait_note_startup(interp, proc);
    }

    return mrb_interp_exec(interp, proc, run);
}


/*
 * A run that may have to compile or load its script first, which leaves
 * objects in the GC arena too.
 */
static MRB_NOINLINE int
script_run_loading(mrb_interp *interp, mrb_script *script, mrb_run_rec *run)
{
    mrb_state     *mrb = mrb_interp_state(interp);
    struct RProc  *proc;
    int            ai, rc;
    int            uncached = script->policy == MRB_CACHE_NEVER
                              && script->is_file;

    ai = mrb_gc_arena_save(mrb);

    if (uncached) {
        proc = script_proc_uncached(interp, script, run->error,
                                    sizeof(run->error));
    } else {
        proc = script_proc(interp, script, !run->startup,
                           !run->stat_on_error_fail, run->error,
                           sizeof(run->error));
    }

    if (proc != NULL) {
        rc = script_exec(interp, proc, run);
    } else {
        mrb_metrics_run_failed(interp, run);
        rc = -1;
    }

    mrb_gc_arena_restore(mrb, ai);

    if (rc == 0 && run->want_value) {
        mrb_gc_protect(mrb, run->value);
    }

    if (uncached) {
        script_never_collect(mrb);
    }

    return rc;
}


/*
 * A script compiled once and for all (`forever`, inline code) that this
 * interpreter has loaded is run at once: the run of most requests.  The
 * run is timed and counted where it runs (mrb_interp_exec), or here when
 * it fails before.
 */
int
mrb_script_run(mrb_interp *interp, mrb_script *script, mrb_run_rec *run)
{
    struct RProc  *proc;

    mrb_metrics_run_begin(run, script->name, &script->metrics_row);

    if (script->policy == MRB_CACHE_FOREVER) {
        proc = mrb_interp_proc(interp, script->id, script->generation);
        if (proc != NULL) {
            return script_exec(interp, proc, run);
        }
    }

    return script_run_loading(interp, script, run);
}


int
mrb_script_names_wait(mrb_interp *interp, mrb_script *script)
{
    mrb_state     *mrb = mrb_interp_state(interp);
    struct RProc  *proc;
    char           err[MRB_ERR_MSG_LEN];
    int            ai, names;

    /* compiled anew by each run: only the run can tell */
    if (script->policy == MRB_CACHE_NEVER && script->is_file) {
        return 1;
    }

    ai = mrb_gc_arena_save(mrb);
    proc = script_proc(interp, script, 1, 1, err, sizeof(err));

    /* one that cannot be loaded: its run says why */
    names = proc == NULL || mrb_wait_wanted(interp, proc);

    mrb_gc_arena_restore(mrb, ai);
    return names;
}


int
mrb_script_stale_next(unsigned *cursor, mrb_script_stale *out)
{
    mrb_file_watch_path  *path;
    mrb_script           *s;
    long                  ms;
    int                   found = 0;

    pthread_mutex_lock(&script_id_lock);

    for (s = script_stat_first; s != NULL && !found; s = s->next) {
        if (s->id < *cursor) {
            continue;
        }

        pthread_mutex_lock(&s->lock);
        path = atomic_load_explicit(&s->watch, memory_order_relaxed);

        if (s->failure != NULL) {
            snprintf(out->reason, sizeof(out->reason), "%s", s->failure);
            out->since = s->failure_since;
            out->serving = s->generation != 0;
            found = 1;

        } else if (s->generation != 0 && path != NULL
                   && mrb_file_watch_writing(path, &ms))
        {
            snprintf(out->reason, sizeof(out->reason),
                     "%s: being written for %ld ms (a change counts when "
                     "the writer closes the file, or after %d ms without "
                     "a write)", s->name, ms, MRB_FILE_WATCH_QUIET_MS);
            out->since = time(NULL) - ms / 1000;
            out->serving = 1;
            found = 1;
        }

        if (found) {
            snprintf(out->path, sizeof(out->path), "%s", s->name);
            *cursor = s->id + 1;
        }
        pthread_mutex_unlock(&s->lock);
    }

    pthread_mutex_unlock(&script_id_lock);
    return found;
}


typedef struct {
    const char  *s;
    size_t       len;
} script_prefix;


static int
script_prefix_cmp(const void *a, const void *b)
{
    const script_prefix  *x = a, *y = b;
    int                   c;

    c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    if (c != 0) {
        return c;
    }
    return (x->len > y->len) - (x->len < y->len);
}


/*
 * Under script_id_lock: each `stat` script's directories ("/", "/a",
 * "/a/b") and its path into *all (malloc'd, *n of them; the caller frees
 * it, also on failure), how many scripts in *count.  -1: out of memory.
 */
static int
script_prefixes_locked(script_prefix **all, size_t *n, size_t *count)
{
    script_prefix  *grown;
    size_t          cap = 0;
    mrb_script     *s;
    const char     *c;

    for (s = script_stat_first; s != NULL; s = s->next) {
        (*count)++;
        for (c = s->name; c != NULL; c = strchr(c + 1, '/')) {
            if (*n + 2 > cap) {
                cap = cap ? cap * 2 : 1024;
                grown = realloc(*all, cap * sizeof(script_prefix));
                if (grown == NULL) {
                    return -1;
                }
                *all = grown;
            }
            (*all)[*n].s = s->name;
            (*all)[*n].len = c == s->name ? 1 : (size_t) (c - s->name);
            (*n)++;
        }
        (*all)[*n].s = s->name;
        (*all)[*n].len = strlen(s->name);
        (*n)++;
    }

    return 0;
}


/*
 * Each path's directories ("/", "/a", "/a/b") and the path itself, sorted;
 * the distinct ones are what the watch would add (links not followed).
 */
int
mrb_script_watch_needs(size_t *scripts, size_t *watches)
{
    script_prefix  *all = NULL;
    size_t          n = 0, i, distinct = 0, count = 0;
    int             rc;

    pthread_mutex_lock(&script_id_lock);
    rc = script_prefixes_locked(&all, &n, &count);
    pthread_mutex_unlock(&script_id_lock);

    if (rc != 0) {
        free(all);
        return -1;
    }

    if (n > 0) {
        qsort(all, n, sizeof(script_prefix), script_prefix_cmp);
    }
    for (i = 0; i < n; i++) {
        distinct += i == 0 || script_prefix_cmp(&all[i - 1], &all[i]) != 0;
    }

    free(all);
    *scripts = count;
    *watches = distinct;
    return 0;
}
