/*
 * The interpreter: creation, the process's idle interpreters, the procs it
 * has loaded, and the top-level state a request script must not leave
 * behind.
 */

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/error.h>
#include <mruby/irep.h>
#include <mruby/object.h>
#include <mruby/proc.h>
#include <mruby/throw.h>
#include <mruby/variable.h>

#include "mrb_alloc.h"
#include "mrb_interp.h"
#include "mrb_interp_core.h"
#include "mrb_redis.h"
#include "mrb_shdict.h"

extern const uint8_t mrb_mrblib_irep[];

/*
 * mruby 3.1.0's instance variable table (src/variable.c), which also holds
 * the global variables and the constants of Object.  Read-only here: its
 * size tells in a few nanoseconds whether a script added top-level state.
 */
struct iv_tbl {
    int         size;
    int         alloc;
    mrb_value  *ptr;
};

#define IV_DELETED  (1UL << 31)
#define IV_KEY_P(k) (((k) & ~((uint32_t) IV_DELETED)) != 0)

/* The names a table held when the interpreter was sealed. */
typedef struct {
    int         size;
    mrb_sym    *syms;      /* sorted */
    int         nsyms;
} mrb_toplevel_set;

/* The proc loaded for a script: the generation of its bytecode. */
typedef struct {
    struct RProc       *proc;
    uint32_t            generation;
} mrb_interp_loaded;

struct mrb_interp_s {
    mrb_interp_head     head;       /* first: mrb_interp.h reads it */

    /*
     * The loaded procs by script id.  The C array is what a run reads (a
     * load and a compare); the mruby Array holds the same procs for the GC.
     */
    mrb_interp_loaded  *loaded;
    size_t              nloaded;
    mrb_value           procs;

    mrb_interp         *next_idle;  /* mrb_interp_take's idle list */
    mrb_file_watch_poller  watch;   /* how its runs ask the file watch */

    unsigned            sealed:1;
    unsigned            removed:1;  /* a run removed a global: sizes lie */
    mrb_toplevel_set    globals;
    mrb_toplevel_set    constants;
    mrb_toplevel_set    ivars;
};


static int
iv_size(struct iv_tbl *t)
{
    return t ? t->size : 0;
}


/* Calls fn for each live name of t. */
static void
iv_each_name(struct iv_tbl *t, void (*fn)(mrb_sym, void *), void *arg)
{
    mrb_sym  *keys;
    int       i;

    if (t == NULL || t->alloc == 0) {
        return;
    }

    keys = (mrb_sym *) &t->ptr[t->alloc];

    for (i = 0; i < t->alloc; i++) {
        if (IV_KEY_P(keys[i])) {
            fn(keys[i], arg);
        }
    }
}


static int
sym_cmp(const void *a, const void *b)
{
    mrb_sym  x = *(const mrb_sym *) a, y = *(const mrb_sym *) b;

    return (x > y) - (x < y);
}


static void
collect_sym(mrb_sym sym, void *arg)
{
    mrb_toplevel_set  *set = arg;

    set->syms[set->nsyms++] = sym;
}


static int
toplevel_set_record(mrb_toplevel_set *set, struct iv_tbl *t)
{
    free(set->syms);
    set->syms = NULL;
    set->nsyms = 0;
    set->size = iv_size(t);

    if (set->size == 0) {
        return 0;
    }

    set->syms = malloc(sizeof(mrb_sym) * (size_t) t->alloc);
    if (set->syms == NULL) {
        return -1;
    }

    iv_each_name(t, collect_sym, set);
    qsort(set->syms, (size_t) set->nsyms, sizeof(mrb_sym), sym_cmp);
    return 0;
}


static int
toplevel_set_has(const mrb_toplevel_set *set, mrb_sym sym)
{
    return set->nsyms > 0
           && bsearch(&sym, set->syms, (size_t) set->nsyms, sizeof(mrb_sym),
                      sym_cmp) != NULL;
}


typedef struct {
    const mrb_toplevel_set  *base;
    mrb_sym                  added[64];
    int                      nadded;
    int                      more;
} mrb_toplevel_diff;


static void
diff_sym(mrb_sym sym, void *arg)
{
    mrb_toplevel_diff  *d = arg;

    if (toplevel_set_has(d->base, sym)) {
        return;
    }

    if (d->nadded == (int) (sizeof(d->added) / sizeof(d->added[0]))) {
        d->more = 1;
        return;
    }

    d->added[d->nadded++] = sym;
}


/*
 * Removes from t the names that are not in base.  Collected first, removed
 * after: the table must not change under the walk.  More than 64 new names
 * take another pass.
 */
static void
toplevel_set_restore(mrb_state *mrb, const mrb_toplevel_set *base,
    struct iv_tbl **tp, mrb_value owner, int is_globals)
{
    mrb_toplevel_diff  d;
    int                i;

    do {
        d.base = base;
        d.nadded = 0;
        d.more = 0;
        iv_each_name(*tp, diff_sym, &d);

        for (i = 0; i < d.nadded; i++) {
            if (is_globals) {
                mrb_gv_remove(mrb, d.added[i]);
            } else {
                mrb_iv_remove(mrb, owner, d.added[i]);
            }
        }
    } while (d.more);
}


void
mrb_interp_seal(mrb_interp *interp)
{
    mrb_state  *mrb = interp->head.mrb;

    if (toplevel_set_record(&interp->globals, mrb->globals) != 0
        || toplevel_set_record(&interp->constants, mrb->object_class->iv) != 0
        || toplevel_set_record(&interp->ivars, mrb->top_self->iv) != 0)
    {
        mrb_interp_log(interp, MRB_LOG_ERR,
                       "mruby: out of memory recording the top-level state");
        return;
    }

    interp->sealed = 1;
}


/* Removes the top-level state added since mrb_interp_seal. */
static void
interp_clean_toplevel(mrb_interp *interp)
{
    mrb_state  *mrb = interp->head.mrb;

    if (!interp->sealed) {
        return;
    }

    /*
     * The common case, nothing added, costs three loads and compares.  A
     * removed global and an added one leave the size as it was: a run that
     * removed one has all globals checked.
     */
    if (interp->removed || iv_size(mrb->globals) != interp->globals.size) {
        toplevel_set_restore(mrb, &interp->globals, &mrb->globals,
                             mrb_nil_value(), 1);
        interp->removed = 0;
    }

    if (iv_size(mrb->object_class->iv) != interp->constants.size) {
        toplevel_set_restore(mrb, &interp->constants, &mrb->object_class->iv,
                             mrb_obj_value(mrb->object_class), 0);
    }

    if (iv_size(mrb->top_self->iv) != interp->ivars.size) {
        toplevel_set_restore(mrb, &interp->ivars, &mrb->top_self->iv,
                             mrb_obj_value(mrb->top_self), 0);
    }
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

    mrb_server_class_define(mrb, server);
    mrb_redis_define(mrb);
    mrb_load_irep(mrb, mrb_mrblib_irep);

    if (mrb->exc != NULL) {
        mrb_error_format(mrb, mrb_obj_value(mrb->exc), err, errlen);
        mrb_interp_close(interp);
        return NULL;
    }

    return interp;
}


void
mrb_interp_close(mrb_interp *interp)
{
    if (interp == NULL) {
        return;
    }

    mrb_close(interp->head.mrb);
    mrb_file_watch_poller_close(&interp->watch);
    free(interp->loaded);
    free(interp->globals.syms);
    free(interp->constants.syms);
    free(interp->ivars.syms);
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
 */
static _Atomic(mrb_interp *)  idle_hot;
static pthread_mutex_t        idle_lock = PTHREAD_MUTEX_INITIALIZER;
static mrb_interp            *idle_top;


static MRB_NOINLINE mrb_interp *
interp_take_slow(const mrb_server *server, void *log_target,
    mrb_interp_init_pt init, void *arg, char *err, size_t errlen)
{
    mrb_interp  *interp;

    pthread_mutex_lock(&idle_lock);

    interp = idle_top;
    if (interp != NULL) {
        idle_top = interp->next_idle;
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


void
mrb_interp_give_back(mrb_interp *interp)
{
    mrb_interp  *none = NULL;

    if (atomic_compare_exchange_strong(&idle_hot, &none, interp)) {
        return;
    }

    pthread_mutex_lock(&idle_lock);
    interp->next_idle = idle_top;
    idle_top = interp;
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
    mrb_run  *run = mrb_interp_run(mrb);

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


void
mrb_interp_global_removed(mrb_interp *interp)
{
    interp->removed = 1;
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
    mrb_env_unshare(mrb, env);
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
mrb_interp_exec(mrb_interp *interp, struct RProc *proc, mrb_run *run)
{
    mrb_state           *mrb = interp->head.mrb;
    struct mrb_context  *c = mrb->c;
    struct mrb_jmpbuf   *prev_jmp = mrb->jmp;
    struct mrb_jmpbuf    jmp;
    struct REnv         *env;
    mrb_value            ret;
    int                  ai = mrb_gc_arena_save(mrb);
    int                  rc;

    run->prev = interp->head.run;
    interp->head.run = run;

    if (c != mrb->root_c || c->ci != c->cibase) {
        ret = interp_exec_nested(mrb, proc);

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
                mrb_env_unshare(mrb, env);
            }

        } MRB_END_EXC(&jmp);

        mrb->jmp = prev_jmp;
        interp_close_toplevel_env(mrb);
    }

    rc = 0;

    if (mrb->exc != NULL) {
        mrb_error_format(mrb, mrb_obj_value(mrb->exc), run->error,
                         sizeof(run->error));
        mrb->exc = NULL;
        rc = -1;
    }

    interp->head.run = run->prev;

    if (!run->startup && run->prev == NULL) {
        interp_clean_toplevel(interp);
    }

    mrb_gc_arena_restore(mrb, ai);

    if (rc == 0 && run->want_value) {
        run->value = ret;
        mrb_gc_protect(mrb, ret);
    }

    return rc;
}


void
mrb_interp_log(mrb_interp *interp, int level, const char *fmt, ...)
{
    char     msg[2048];
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


int
mrb_interp_proc_keep(mrb_interp *interp, unsigned id, uint32_t generation,
    struct RProc *proc)
{
    mrb_interp_loaded  *loaded;
    size_t              n;

    if (id >= interp->nloaded) {
        n = (id + 16) * 2;
        loaded = realloc(interp->loaded, n * sizeof(mrb_interp_loaded));
        if (loaded == NULL) {
            return -1;
        }

        memset(loaded + interp->nloaded, 0,
               (n - interp->nloaded) * sizeof(mrb_interp_loaded));
        interp->loaded = loaded;
        interp->nloaded = n;
    }

    mrb_ary_set(interp->head.mrb, interp->procs, (mrb_int) id,
                mrb_obj_value(proc));
    interp->loaded[id].proc = proc;
    interp->loaded[id].generation = generation;
    return 0;
}
