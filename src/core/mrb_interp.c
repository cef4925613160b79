/*
 * The interpreter: creation, the process's idle interpreters, the procs it
 * has loaded, and the top-level state a request script must not leave
 * behind.
 */

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/error.h>
#include <mruby/irep.h>
#include <mruby/debug.h>
#include <mruby/object.h>
#include <mruby/proc.h>
#include <mruby/throw.h>
#include <mruby/variable.h>

#include "mrb_alloc.h"
#include "mrb_errbuf.h"
#include "mrb_file_sym.h"
#include "mrb_interp.h"
#include "mrb_interp_core.h"
#include "mrb_irep_dstr.h"
#include "mrb_metrics.h"
#include "mrb_mruby_version.h"
#include "mrb_part.h"
#include "mrb_run_budget.h"
#include "mrb_shdict.h"
#include "mrb_toplevel.h"

extern const uint8_t mrb_mrblib_irep[];

/* The proc loaded for a script: the generation of its bytecode, and its
 * place in the interpreter's mruby Array of procs. */
typedef struct {
    struct RProc       *proc;
    uint32_t            generation;
    uint32_t            slot;
} mrb_interp_loaded;

struct mrb_interp_s {
    mrb_interp_head     head;       /* first: mrb_interp.h reads it */

    /*
     * The loaded procs by script id.  The C array is what a run reads (a
     * load and a compare); the mruby Array holds the same procs for the GC,
     * without gaps: indexed by id it took 16 bytes for every script of the
     * process in every interpreter, even for the scripts never run there
     * (10,000 scripts, 4 interpreters: ~0.1 kB a script).
     */
    mrb_interp_loaded  *loaded;
    size_t              nloaded;
    mrb_value           procs;

    mrb_interp         *next_idle;  /* mrb_interp_take's idle list */
    unsigned            wanted;     /* threads in mrb_interp_take_this for
                                       it (under idle_lock) */
    mrb_file_watch_poller  watch;   /* how its runs ask the file watch */
    mrb_wait_state     *wait;       /* its runs on coroutines, or NULL */
    mrb_file_syms      *file_syms;  /* its symbols of file names, or NULL */

    struct RClass      *server_class;
    mrb_toplevel       *toplevel;   /* what runs leave as they found */
    unsigned            parts_dirty;    /* a bit per part in
                                           server->parts: mrb_part_dirty */
    unsigned            startup_leaves:1;   /* mrb_toplevel_startup_leaves */
    unsigned            counted:1;  /* in its worker's metrics */
};


void
mrb_interp_seal(mrb_interp *interp)
{
    mrb_state  *mrb = interp->head.mrb;

    mrb_toplevel_free(mrb, interp->toplevel);
    interp->toplevel = mrb_toplevel_record(mrb, interp->server_class,
                                           interp->startup_leaves);

    /* sealed again in a worker that took over its parent's copy */
    if (!interp->counted) {
        interp->counted = mrb_metrics_worker_interps(1);
    }

    if (interp->toplevel == NULL) {
        mrb_interp_log(interp, MRB_LOG_ERR,
                       "mruby: out of memory recording the top-level state");
    }
}


/*
 * After an outermost request run: puts back the top-level state the run
 * changed (mrb_toplevel.h).  A failure to (out of memory) is logged; the
 * run itself has ended by then.
 */
static void
interp_restore_toplevel(mrb_interp *interp)
{
    char  err[MRB_ERR_MSG_LEN];

    if (mrb_toplevel_restore(interp->head.mrb, interp->toplevel, err,
                             sizeof(err)) != 0)
    {
        mrb_interp_log(interp, MRB_LOG_ERR,
                       "mruby: restoring the top-level state after a run "
                       "failed: %s", err);
    }
}


/* Defines the server's parts in a new interpreter, in list order. */
static int
interp_parts_define(mrb_interp *interp, char *err, size_t errlen)
{
    const mrb_part *const  *parts = interp->head.server->parts;
    size_t                  i;

    for (i = 0; parts != NULL && parts[i] != NULL; i++) {
        if (i == MRB_PARTS_MAX) {
            snprintf(err, errlen, "mruby: more than %d parts (mrb_part.h)",
                     MRB_PARTS_MAX);
            return -1;
        }
        if (parts[i]->define != NULL) {
            parts[i]->define(interp->head.mrb);
        }
        if (interp->head.mrb->exc != NULL) {
            mrb_error_format(interp->head.mrb,
                             mrb_obj_value(interp->head.mrb->exc), err,
                             errlen);
            return -1;
        }
    }

    return 0;
}


static mrb_value
interp_srand(mrb_state *mrb, void *seed)
{
    return mrb_funcall(mrb, mrb_obj_value(mrb_class_get(mrb, "Random")),
                       "srand", 1, mrb_int_value(mrb, *(mrb_int *) seed));
}


void
mrb_interp_seed_random(mrb_interp *interp)
{
    mrb_state  *mrb = interp->head.mrb;
    uint32_t    bits;
    mrb_int     seed;
    mrb_bool    failed;
    int         ai;

    if (!mrb_class_defined(mrb, "Random")) {
        return;
    }

    if (getrandom(&bits, sizeof(bits), GRND_NONBLOCK) != sizeof(bits)) {
        /* no entropy yet (early boot): differs by process and time */
        bits = (uint32_t) getpid() ^ (uint32_t) time(NULL)
               ^ (uint32_t) (uintptr_t) &bits;
    }
    seed = (mrb_int) bits;

    ai = mrb_gc_arena_save(mrb);
    mrb_protect_error(mrb, interp_srand, &seed, &failed);
    if (failed) {
        mrb_interp_log(interp, MRB_LOG_ERR, "mruby: seeding Random failed: "
                       "rand draws the same numbers as in other processes");
        mrb->exc = NULL;
    }
    mrb_gc_arena_restore(mrb, ai);
}


mrb_interp *
mrb_interp_open(const mrb_server *server, void *log_target, char *err,
    size_t errlen)
{
    mrb_interp  *interp;
    mrb_state   *mrb;

    interp = calloc(1, sizeof(mrb_interp));
    if (interp == NULL) {
        snprintf(err, errlen, "mruby: out of memory creating an interpreter");
        return NULL;
    }

    mrb = mrb_alloc_open();
    if (mrb == NULL) {
        snprintf(err, errlen, "mruby: mrb_open() failed");
        free(interp);
        return NULL;
    }

    interp->head.mrb = mrb;
    interp->head.server = server;
    interp->head.log_target = log_target;
    interp->watch.fd = -1;
    mrb->ud = interp;

    interp->procs = mrb_ary_new(mrb);
    mrb_gc_register(mrb, interp->procs);

    interp->server_class = mrb_server_class_define(mrb, server);
    mrb_run_budget_define(mrb, interp->server_class);
    mrb_irep_dstr_define(mrb);
    if (interp_parts_define(interp, err, errlen) != 0) {
        mrb_interp_close(interp);
        return NULL;
    }
    mrb_load_irep(mrb, mrb_mrblib_irep);

    if (mrb->exc != NULL) {
        mrb_error_format(mrb, mrb_obj_value(mrb->exc), err, errlen);
        mrb_interp_close(interp);
        return NULL;
    }

    mrb_interp_seed_random(interp);
    mrb_run_budget_watch(interp);
    return interp;
}


void
mrb_interp_close(mrb_interp *interp)
{
    if (interp == NULL) {
        return;
    }

    if (interp->counted) {
        mrb_metrics_worker_interps(-1);
    }

    mrb_run_budget_unwatch(interp);
    mrb_toplevel_free(interp->head.mrb, interp->toplevel);
    mrb_close(interp->head.mrb);   /* the wait state is an object of it */
    mrb_file_syms_free(interp->file_syms);
    mrb_file_watch_poller_close(&interp->watch);
    free(interp->loaded);
    free(interp);
}


mrb_interp *
mrb_interp_new(const mrb_server *server, void *log_target,
    mrb_interp_init_pt init, void *arg, char *err, size_t errlen)
{
    mrb_interp  *interp;

    interp = mrb_interp_open(server, log_target, err, errlen);
    if (interp == NULL) {
        return NULL;
    }

    if (init != NULL) {
        init(interp, arg);
    }

    mrb_interp_seal(interp);
    return interp;
}


/*
 * The process's idle interpreters.  The one given back last waits in
 * idle_hot, so a take and a give-back are one atomic exchange each when
 * runs do not overlap; the others wait in a stack, the one given back
 * last on top.  The lock covers a push or a pop, never a run.
 *
 * A thread resuming a run that waits in an interpreter wants that one
 * (mrb_interp_take_this): idle_wanted counts such threads, and while it is
 * not zero a give-back goes to the stack and wakes them; takers of any
 * interpreter leave a wanted one there.
 */
static _Atomic(mrb_interp *)  idle_hot;
static pthread_mutex_t        idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t         idle_given = PTHREAD_COND_INITIALIZER;
static mrb_interp            *idle_top;
static atomic_uint            idle_wanted;


static MRB_NOINLINE mrb_interp *
interp_take_slow(const mrb_server *server, void *log_target,
    mrb_interp_init_pt init, void *arg, char *err, size_t errlen)
{
    mrb_interp  *interp, **pp;

    pthread_mutex_lock(&idle_lock);

    for (pp = &idle_top; (interp = *pp) != NULL; pp = &interp->next_idle) {
        if (interp->wanted == 0) {
            *pp = interp->next_idle;
            break;
        }
    }

    pthread_mutex_unlock(&idle_lock);

    if (interp != NULL) {
        return interp;
    }

    return mrb_interp_new(server, log_target, init, arg, err, errlen);
}


mrb_interp *
mrb_interp_take(const mrb_server *server, void *log_target,
    mrb_interp_init_pt init, void *arg, char *err, size_t errlen)
{
    mrb_interp  *interp = atomic_exchange(&idle_hot, NULL);

    if (interp != NULL) {
        return interp;
    }

    return interp_take_slow(server, log_target, init, arg, err, errlen);
}


/* Unlinks interp from the stack (idle_lock held): 1 if it was there. */
static int
interp_unlink_idle(mrb_interp *interp)
{
    mrb_interp  **pp;

    for (pp = &idle_top; *pp != NULL; pp = &(*pp)->next_idle) {
        if (*pp == interp) {
            *pp = interp->next_idle;
            return 1;
        }
    }

    return 0;
}


void
mrb_interp_take_this(mrb_interp *interp)
{
    mrb_interp  *hot = interp;

    if (atomic_compare_exchange_strong(&idle_hot, &hot, NULL)) {
        return;
    }

    pthread_mutex_lock(&idle_lock);
    interp->wanted++;
    atomic_fetch_add(&idle_wanted, 1);

    for ( ;; ) {
        hot = interp;
        if (atomic_compare_exchange_strong(&idle_hot, &hot, NULL)
            || interp_unlink_idle(interp))
        {
            break;
        }

        pthread_cond_wait(&idle_given, &idle_lock);
    }

    atomic_fetch_sub(&idle_wanted, 1);
    interp->wanted--;
    pthread_mutex_unlock(&idle_lock);
}


void
mrb_interp_give_back(mrb_interp *interp)
{
    mrb_interp  *none = NULL;

    if (atomic_load(&idle_wanted) == 0) {
        if (atomic_compare_exchange_strong(&idle_hot, &none, interp)) {
            if (atomic_load(&idle_wanted) == 0) {
                return;
            }

            /* a thread began to wait meanwhile, maybe for this one */
            pthread_mutex_lock(&idle_lock);
            pthread_cond_broadcast(&idle_given);
            pthread_mutex_unlock(&idle_lock);
            return;
        }
    }

    pthread_mutex_lock(&idle_lock);
    interp->next_idle = idle_top;
    idle_top = interp;
    if (atomic_load(&idle_wanted) != 0) {
        pthread_cond_broadcast(&idle_given);
    }
    pthread_mutex_unlock(&idle_lock);
}


void
mrb_interp_close_idle(void)
{
    mrb_interp  *interp, *next;

    mrb_interp_close(atomic_exchange(&idle_hot, NULL));

    pthread_mutex_lock(&idle_lock);
    interp = idle_top;
    idle_top = NULL;
    pthread_mutex_unlock(&idle_lock);

    for ( /* void */ ; interp != NULL; interp = next) {
        next = interp->next_idle;
        mrb_interp_close(interp);
    }
}


void *
mrb_interp_request(mrb_state *mrb)
{
    mrb_run_rec  *run = mrb_interp_run(mrb);

    if (run == NULL || run->request == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "no request: called outside a request");
    }

    return run->request;
}


mrb_file_watch_poller *
mrb_interp_file_watch(mrb_interp *interp)
{
    return &interp->watch;
}


mrb_wait_state **
mrb_interp_wait_state(mrb_interp *interp)
{
    return &interp->wait;
}


mrb_file_syms *
mrb_interp_file_syms(mrb_interp *interp)
{
    if (interp->file_syms == NULL) {
        interp->file_syms = mrb_file_syms_new(0);
    }

    return interp->file_syms;
}


void
mrb_interp_global_removed(mrb_interp *interp)
{
    mrb_toplevel_global_removed(interp->toplevel);
}


int
mrb_interp_toplevel_take(mrb_interp *interp, mrb_value *aside)
{
    char  err[MRB_ERR_MSG_LEN];
    int   rc;

    rc = mrb_toplevel_take(interp->head.mrb, interp->toplevel, aside, err,
                           sizeof(err));

    if (err[0] != '\0') {
        mrb_interp_log(interp, MRB_LOG_ERR,
                       "mruby: keeping the top-level state of a run that "
                       "waits: %s%s", err,
                       rc != 0 ? " (the run fails when it resumes)" : "");
    }

    return rc;
}


int
mrb_interp_toplevel_put_back(mrb_interp *interp, mrb_value aside,
    mrb_value *exc)
{
    return mrb_toplevel_put_back(interp->head.mrb, interp->toplevel, aside,
                                 exc);
}


void
mrb_part_dirty(mrb_state *mrb, const mrb_part *part)
{
    mrb_interp             *interp = mrb->ud;
    const mrb_part *const  *parts = interp->head.server->parts;
    unsigned                i;

    for (i = 0; parts[i] != NULL; i++) {
        if (parts[i] == part) {
            interp->parts_dirty |= 1u << i;
            return;
        }
    }
}


/*
 * The dirty parts' run_end, at the end of an outermost run; returns the
 * parts that stay dirty.  With take: only the parts that have one, after
 * take (what they keep of the run is the run's, not the next one's).
 */
static unsigned
interp_parts_run_end(mrb_interp *interp, const mrb_run_rec *run, int take)
{
    const mrb_part *const  *parts = interp->head.server->parts;
    unsigned                dirty = interp->parts_dirty, left = 0, i;

    for (i = 0; parts[i] != NULL; i++) {
        if (!(dirty & (1u << i))) {
            continue;
        }
        if ((take && parts[i]->take == NULL)
            || parts[i]->run_end(interp->head.mrb, run))
        {
            left |= 1u << i;
        }
    }

    return left;
}


static MRB_NOINLINE void
interp_parts_run_ended(mrb_interp *interp, const mrb_run_rec *run)
{
    interp->parts_dirty = interp_parts_run_end(interp, run, 0);
}


typedef struct {
    mrb_interp  *interp;
    mrb_value    kept;       /* what the takes took, by the part's index */
} interp_parts_taken;


/*
 * Fills taken->kept with what each dirty part with a take takes; returns
 * it, or nil when none took anything.  kept is made before the first take
 * and filling it allocates nothing: when a take raises, what the takes
 * before it took (a Mutex's locks, which their take leaves the
 * interpreter without) is still there for the run.
 */
static mrb_value
interp_parts_take_body(mrb_state *mrb, void *arg)
{
    interp_parts_taken     *taken = arg;
    const mrb_part *const  *parts = taken->interp->head.server->parts;
    unsigned                dirty = taken->interp->parts_dirty, i, n = 0;
    mrb_value               kept, one;
    mrb_bool                some = FALSE;

    for (i = 0; parts[i] != NULL; i++) {
        if ((dirty & (1u << i)) && parts[i]->take != NULL) {
            n = i + 1;
        }
    }

    if (n == 0) {
        return mrb_nil_value();
    }

    kept = mrb_ary_new_capa(mrb, (mrb_int) n);
    mrb_ary_set(mrb, kept, (mrb_int) n - 1, mrb_nil_value());
    taken->kept = kept;

    for (i = 0; i < n; i++) {
        if (!(dirty & (1u << i)) || parts[i]->take == NULL) {
            continue;
        }
        one = parts[i]->take(mrb);      /* in the arena */
        if (!mrb_nil_p(one)) {
            mrb_ary_set(mrb, kept, (mrb_int) i, one);
            some = TRUE;
        }
    }

    return some ? kept : mrb_nil_value();
}


int
mrb_interp_parts_take(mrb_interp *interp, mrb_value *kept, mrb_value *exc)
{
    mrb_state           *mrb = interp->head.mrb;
    interp_parts_taken   taken = { interp, mrb_nil_value() };
    mrb_value            result;
    mrb_bool             failed = FALSE;

    *kept = mrb_nil_value();

    if (interp->parts_dirty == 0) {
        return 0;
    }

    result = mrb_protect_error(mrb, interp_parts_take_body, &taken,
                               &failed);
    if (failed) {
        /* out of the restored arena: kept into the caller's before the
         * run_ends below can allocate */
        *exc = result;
        *kept = taken.kept;
        mrb_gc_protect(mrb, taken.kept);

    } else {
        *kept = result;
    }

    interp->parts_dirty = interp_parts_run_end(interp, interp->head.run, 1);
    return failed ? -1 : 0;
}


void
mrb_interp_parts_put_back(mrb_interp *interp, mrb_value kept)
{
    const mrb_part *const  *parts = interp->head.server->parts;
    mrb_value               one;
    mrb_int                 i;

    if (mrb_nil_p(kept)) {
        return;
    }

    for (i = 0; i < RARRAY_LEN(kept); i++) {
        one = RARRAY_PTR(kept)[i];
        if (!mrb_nil_p(one)) {
            parts[i]->put_back(interp->head.mrb, one);
            interp->parts_dirty |= 1u << i;
        }
    }
}


unsigned long
mrb_interp_toplevel_restores(mrb_interp *interp)
{
    return mrb_toplevel_restores(interp->toplevel);
}


unsigned long
mrb_interp_toplevel_compares(mrb_interp *interp)
{
    return mrb_toplevel_compares(interp->toplevel);
}


static mrb_value
interp_top_run(mrb_state *mrb, void *proc)
{
    return mrb_top_run(mrb, proc, mrb_obj_value(mrb->top_self), 0);
}


/*
 * A run inside another (a filter script reading the body for a script) or
 * inside a fiber: mrb_top_run gives it a frame of its own, and after a
 * longjmp mrb_protect_error unwinds the frames above the outer ones.
 * Leaves the exception in mrb->exc, as the VM does.
 */
static mrb_value
interp_exec_nested(mrb_state *mrb, struct RProc *proc)
{
    mrb_value  ret;
    mrb_bool   failed;

    ret = mrb_protect_error(mrb, interp_top_run, proc, &failed);
    if (failed) {
        mrb->exc = mrb_obj_ptr(ret);
    }

    return ret;
}


/*
 * Blocks made at the top level of a script share its frame, which lives on
 * the VM stack.  mruby keeps that frame's env on the stack after a top-level
 * run (mirb reuses it) and just forgets it at the next run: a block kept
 * past the run (a proc in a global, a constant, a startup object) would
 * read the next script's registers, or freed memory once the stack has
 * grown.  Give the env its own copy of the values now.  (A nested run's
 * frame is popped, and mruby copies it then.)
 */
static void
interp_close_toplevel_env(mrb_state *mrb)
{
    mrb_callinfo  *ci = mrb->c->cibase;
    struct REnv   *env;

    env = mrb_vm_ci_env(ci);
    if (env == NULL) {
        return;
    }

    mrb_vm_ci_env_set(ci, NULL);
    MRB_ENV_UNSHARE(mrb, env);
}


/*
 * "NoMemoryError: past the run's memory budget of N bytes (file:line)",
 * where the allocator refused the last block (mrb_alloc.c left it in
 * run->error), or the script's file.  mruby keeps no backtrace for
 * NoMemoryError.
 */
static MRB_NOINLINE void
interp_budget_error(mrb_state *mrb, struct RProc *proc, mrb_run_rec *run,
    size_t limit)
{
    char         where[MRB_ERR_MSG_LEN];   /* a path and a line */
    const char  *file = NULL;
    size_t       n = strnlen(run->error, sizeof(where) - 1);

    memcpy(where, run->error, n);
    where[n] = '\0';

    if (where[0] == '\0') {
        if (!MRB_PROC_CFUNC_P(proc)) {
            file = mrb_debug_get_filename(mrb, proc->body.irep, 0);
        }
        snprintf(where, sizeof(where), "%s",
                 file != NULL ? file : "no file name");
    }

    snprintf(run->error, sizeof(run->error),
             "NoMemoryError: past the run's memory budget of %zu bytes (%s)",
             limit, where);
}


/*
 * The registers of the top-level run that just ended, cleared: the GC
 * marks those of the context's base frame, which on the thread's context
 * has the script's proc (all its locals) and on a coroutine's overlaps the
 * script's self and first local, and they would keep their objects alive
 * until a later run reuses them.
 */
static void
interp_forget_registers(mrb_state *mrb)
{
    struct mrb_context  *c = mrb->c;
    mrb_value           *reg, *end;

    if (c->stbase == NULL || (c == mrb->root_c && c->ci != c->cibase)) {
        return;
    }

    end = c->stend;
    for (reg = c->stbase + 1; reg < end; reg++) {
        *reg = mrb_nil_value();
    }
}


/*
 * After a run that went past its memory budget: what it made is collected
 * at once, and glibc gives the pages back to the system (its heap keeps a
 * freed top below the trim threshold, which grows with each large block
 * freed).  The failing run pays: a run within its budget makes no system
 * call here.
 */
static MRB_NOINLINE void
interp_collect_memory(mrb_state *mrb, mrb_run_rec *run)
{
    if (run->prev == NULL) {
        interp_forget_registers(mrb);
    }
    mrb_full_gc(mrb);
    malloc_trim(0);
}


/*
 * After a failed run: if the process is out of file descriptors, a full GC.
 * A script may have left them in File objects nothing reaches (opening
 * files until it failed); only a GC closes those, and none would come
 * while every later request fails before it allocates (a `stat` script
 * cannot be opened, nginx cannot accept the next connection).  Whether
 * any descriptor is left costs a dup() of stderr; errno after the run
 * cannot tell, mruby's raise has moved it on.
 */
static MRB_NOINLINE void
interp_collect_descriptors(mrb_state *mrb)
{
    int  fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0);

    if (fd >= 0) {
        close(fd);
        return;
    }

    if (errno != EMFILE && errno != ENFILE) {
        return;
    }

    interp_forget_registers(mrb);
    mrb_full_gc(mrb);
}


/*
 * At the top level, mruby's VM returns an exception raised in the script
 * with mrb->exc set.  What reaches this frame by longjmp is what mruby
 * raises before its VM catches anything (the VM stack cannot grow); it is
 * left in mrb->exc too.  mrb_protect_error would also save and restore the
 * GC arena a second time and protect the result in it: a third of a cached
 * run's own cost.
 */
int
mrb_interp_exec(mrb_interp *interp, struct RProc *proc, mrb_run_rec *run)
{
    mrb_state           *mrb = interp->head.mrb;
    struct mrb_context  *c = mrb->c;
    struct mrb_jmpbuf   *prev_jmp = mrb->jmp;
    struct mrb_jmpbuf    jmp;
    struct REnv         *env;
    mrb_value            ret;
    int                  ai = mrb_gc_arena_save(mrb);
    int                  rc, what;
    size_t               memory_limit = run->memory_limit;

    if (run->startup && mrb_toplevel_startup_leaves(mrb, proc)) {
        interp->startup_leaves = 1;
    }

    what = mrb_toplevel_quiet(proc)
           ? 0 : mrb_toplevel_run_begin(interp->toplevel, proc);

    run->prev = interp->head.run;
    mrb_interp_set_run(interp, run);

    if (run->metrics_row != 0) {
        mrb_metrics_run_start(run);
    }

    if (run->prev == NULL) {
        if (run->startup) {
            run->timeout_ms = 0;
        }
        mrb_run_budget_begin(interp, run);
    }

    if (c != mrb->root_c || c->ci != c->cibase) {
        ret = interp_exec_nested(mrb, proc);
        run->memory_limit = 0;

    } else {
        MRB_TRY(&jmp) {
            mrb->jmp = &jmp;

            /* mrb_top_run at the top level, without its call */
            mrb_vm_ci_env_set(c->cibase, NULL);
            ret = mrb_vm_run(mrb, proc, mrb_obj_value(mrb->top_self), 0);

        } MRB_CATCH(&jmp) {
            ret = mrb_nil_value();

            /* as mrb_protect_error does: no frame may stay above the base */
            while (c->ci > c->cibase) {
                env = mrb_vm_ci_env(c->ci);
                c->ci--;
                MRB_ENV_UNSHARE(mrb, env);
            }

        } MRB_END_EXC(&jmp);

        mrb->jmp = prev_jmp;

        /* the run is over: what its end allocates (the env's copy, the
         * error's text) is not counted, and cannot fail for the budget
         * here, where nothing would catch NoMemoryError */
        run->memory_limit = 0;
        interp_close_toplevel_env(mrb);
    }

    rc = 0;

    /* a stopped run fails with the error of its stop, rescued or not */
    if (run->prev == NULL && mrb_run_budget_end(interp, run)) {
        mrb->exc = NULL;
        rc = -1;
    }

    if (mrb->exc != NULL) {
        if (run->memory_exceeded && mrb->exc == mrb->nomem_err) {
            interp_budget_error(mrb, proc, run, memory_limit);
        } else {
            mrb_error_format_run(interp, mrb_obj_value(mrb->exc), run);
        }
        mrb->exc = NULL;
        rc = -1;

    } else if (run->memory_exceeded) {
        /* the script rescued it: no error, nor where it was refused */
        run->error[0] = '\0';
    }

    if (run->metrics_row != 0) {
        mrb_metrics_run_end(interp, run, rc);
    }

    mrb_interp_set_run(interp, run->prev);
    if (what != 0) {
        mrb_toplevel_run_end(interp->toplevel, what);
    }

    if (run->prev == NULL) {
        if (interp->parts_dirty != 0) {
            interp_parts_run_ended(interp, run);
        }
        if (!run->startup) {
            interp_restore_toplevel(interp);
        }
    }

    mrb_gc_arena_restore(mrb, ai);

    /* before a collection: the value lives in the caller's arena */
    if (rc == 0 && run->want_value) {
        run->value = ret;
        mrb_gc_protect(mrb, ret);
    }

    if (run->memory_exceeded) {
        interp_collect_memory(mrb, run);
    } else if (rc != 0 && run->prev == NULL) {
        interp_collect_descriptors(mrb);
    }

    return rc;
}


void
mrb_interp_log(mrb_interp *interp, int level, const char *fmt, ...)
{
    char     msg[MRB_ERR_RUN_LEN];
    va_list  ap;
    int      n;

    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    if (n < 0) {
        return;
    }

    if ((size_t) n >= sizeof(msg)) {
        n = sizeof(msg) - 1;
    }

    interp->head.server->log(interp->head.log_target, interp->head.run, level,
                             msg, (size_t) n);
}


struct RProc *
mrb_interp_proc(mrb_interp *interp, unsigned id, uint32_t generation)
{
    if (id >= interp->nloaded || interp->loaded[id].generation != generation) {
        return NULL;
    }

    return interp->loaded[id].proc;
}


struct RProc *
mrb_interp_proc_any(mrb_interp *interp, unsigned id)
{
    return id < interp->nloaded ? interp->loaded[id].proc : NULL;
}


typedef struct {
    mrb_value   procs;
    mrb_int     index;
    mrb_value   proc;
} interp_proc_slot;


static mrb_value
interp_proc_slot_set(mrb_state *mrb, void *arg)
{
    interp_proc_slot  *slot = arg;

    mrb_ary_set(mrb, slot->procs, slot->index, slot->proc);
    return mrb_nil_value();
}


/*
 * mrb_ary_set raises when out of memory, and the caller may hold a script's
 * lock or run outside any run (no handler: mruby would abort): protected.
 */
int
mrb_interp_proc_keep(mrb_interp *interp, unsigned id, uint32_t generation,
    struct RProc *proc)
{
    mrb_state          *mrb = interp->head.mrb;
    mrb_interp_loaded  *loaded;
    interp_proc_slot    slot;
    mrb_bool            failed;
    size_t              n;

    if (id >= interp->nloaded) {
        n = id + id / 2 + 16;
        loaded = realloc(interp->loaded, n * sizeof(mrb_interp_loaded));
        if (loaded == NULL) {
            return -1;
        }

        memset(loaded + interp->nloaded, 0,
               (n - interp->nloaded) * sizeof(mrb_interp_loaded));
        interp->loaded = loaded;
        interp->nloaded = n;
    }

    slot.procs = interp->procs;
    slot.index = interp->loaded[id].proc != NULL
              ? (mrb_int) interp->loaded[id].slot
              : RARRAY_LEN(interp->procs);
    slot.proc = mrb_obj_value(proc);
    mrb_protect_error(mrb, interp_proc_slot_set, &slot, &failed);

    if (failed) {
        mrb->exc = NULL;
        return -1;
    }

    interp->loaded[id].proc = proc;
    interp->loaded[id].generation = generation;
    interp->loaded[id].slot = (uint32_t) slot.index;
    return 0;
}
