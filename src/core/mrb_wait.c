/*
 * Runs that wait: a script run on a coroutine of its own, with the mruby
 * state it needs switched in and out around it (mruby 3.1.0):
 *
 *   - its own mrb_context (VM stack and call frames), held by a Fiber
 *     object that stays GC-reachable for the run's life, with one base
 *     frame below the script's so that an exception unwinds to the
 *     mrb_protect_error at the base of the coroutine (the VM would
 *     otherwise end the context and raise into its NULL prev);
 *   - mrb->c and mrb->jmp, saved and restored on every switch;
 *   - its slice of the GC arena, arena[base..idx): while the run is
 *     suspended the objects in it stay alive in a GC-reachable array, and
 *     a resume puts them back at the same base, so that the arena indexes
 *     saved in the suspended C frames still mean what they meant.
 *
 * A run on a coroutine costs about 770 instructions more than one on the
 * thread's stack (bench/callgrind.py nginx, 2026-11-24): 8% of a hello
 * world.  So only a run that may wait gets one: its script names a method
 * or class that waits (sleep, Async, sub_request, Redis) or calls methods
 * by computed names (send, eval, ...), or a startup script does (it may
 * define a method that waits).  The names are found in a scan of the
 * bytecode's symbols, a bit test each.
 */

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/data.h>
#include <mruby/error.h>
#include <mruby/irep.h>
#include <mruby/object.h>
#include <mruby/proc.h>
#include <mruby/throw.h>
#include <mruby/variable.h>

#include "mrb_coro.h"
#include "mrb_interp_core.h"
#include "mrb_metrics.h"
#include "mrb_mruby_version.h"
#include "mrb_run_budget.h"
#include "mrb_wait.h"
#include "mrb_wait_core.h"

/* mruby 3.1.0's initial VM stack and frame array (src/vm.c stack_init) */
#define WAIT_STACK_INIT  128
#define WAIT_CI_INIT     32


/* Finished runs' contexts kept for the next runs. */
#define WAIT_KEEP_IDLE   64

typedef struct mrb_wait_slot_s  mrb_wait_slot;

/*
 * A run on a coroutine.  keep (GC-reachable through the state's array) is
 * [fiber, stash, the slot itself, top-level state, parts' state, lost,
 * arena values while suspended...]: while the run is suspended and others
 * run, what it set at top level (mrb_toplevel_take) and what the parts
 * keep of it, such as its last match (mrb_interp_parts_take), or nil; the
 * exception that lost them, or nil.
 */
#define WAIT_KEEP_FIBER     0
#define WAIT_KEEP_STASH     1
#define WAIT_KEEP_SLOT      2
#define WAIT_KEEP_TOPLEVEL  3
#define WAIT_KEEP_PARTS     4
#define WAIT_KEEP_LOST      5
#define WAIT_KEEP_ARENA     6

struct mrb_wait_slot_s {
    mrb_run_rec          run;        /* the run itself, owned here */
    mrb_interp          *interp;
    struct RProc        *proc;
    mrb_coro            *coro;
    struct RFiber       *fiber;      /* holds ctx for the GC */
    struct mrb_context  *ctx;
    mrb_value            keep;
    mrb_int              keep_index; /* in the state's keeps array */
    int                  rc;         /* mrb_interp_exec's, when finished */

    /* the run's own state while it is suspended */
    struct mrb_context  *c;
    struct mrb_jmpbuf   *jmp;
    mrb_run_rec         *head_run;
    int                  arena_base;
    uint64_t             budget_left;   /* its time budget's ticks left
                                           (mrb_run_budget.h) */

    /* its resumer's, while it runs */
    struct mrb_context  *resumer_c;
    struct mrb_jmpbuf   *resumer_jmp;
    mrb_run_rec         *resumer_run;
    mrb_wait_slot       *resumer_slot;
    int                  resumer_idx;
    uint64_t             resumer_budget_left;

    int64_t              suspended_ns; /* when it last waited, counted
                                        (run.metrics_row) */

    unsigned             cancelled:1;
    unsigned             counted:1;  /* in the worker's coroutines */
    unsigned             aside:1;    /* top-level, parts' state in keep */
    unsigned             lost:1;     /* ... could not be kept: exception */
    unsigned             saved:1;    /* arena values in keep */
    unsigned             stashed:1;  /* the resumer's arena in stash */
    mrb_wait_slot       *next_idle;
};

/*
 * The names that make a script run on a coroutine (see mrb_wait_wanted):
 * what waits, and what calls methods by a name the code does not show.
 */
static const char *const  wait_names[] = {
    "sleep", "usleep", "Async", "sub_request", "Redis",
    "lock", "synchronize", "try_lock_loop",       /* a global Mutex's wait */
    "send", "__send__", "public_send", "method", "eval", "instance_eval",
    "instance_exec", "class_eval", "class_exec", "module_eval", "module_exec",
    NULL
};

#define WAIT_NAMES_MAX  24
_Static_assert(sizeof(wait_names) / sizeof(wait_names[0]) - 1
               <= WAIT_NAMES_MAX, "wait_names outgrew WAIT_NAMES_MAX");
#define WAIT_SYM_BITS   8192   /* a bit per symbol below it */

/*
 * The answer is kept in the irep's flags (mrb_irep_flags.h): a loaded
 * script's bytecode is scanned once, not on every run (the scan was 180
 * instructions of nginx's hello world).
 */
#define WAIT_IREP_SCANNED  MRB_WAIT_IREP_SCANNED
#define WAIT_IREP_NAMES    MRB_WAIT_IREP_NAMES

struct mrb_wait_state_s {
    /* the symbols of wait_names, as a bitmap and (for larger ones) a list */
    uint8_t              name_bits[WAIT_SYM_BITS / 8];
    mrb_sym              names[WAIT_NAMES_MAX];
    int                  nnames;

    mrb_coro_pool       *pool;
    unsigned             keep;       /* the pool's */
    mrb_value            keeps;      /* Array of every slot's keep, GC-registered */
    mrb_wait_slot       *idle;
    unsigned             nidle;
    mrb_wait_slot       *current;    /* the slot running now, or NULL */

    unsigned             trim_pending:1;  /* trim_later called, not run */
    long                 trimmed_ms;      /* when, without trim_later */
};


static size_t    wait_stack_size = MRB_CORO_STACK_DEFAULT;
static unsigned  wait_pool_keep = MRB_CORO_KEEP_DEFAULT;


void
mrb_wait_set_pool_keep(unsigned keep)
{
    wait_pool_keep = keep;
}


void
mrb_wait_set_stack_size(size_t size)
{
    wait_stack_size = size;
}


/* The state is freed with its interpreter (mrb_close), by the GC. */
static void
wait_state_free(mrb_state *mrb, void *p)
{
    mrb_wait_state  *st = p;
    mrb_wait_slot   *slot, *next;

    if (st == NULL) {
        return;
    }

    /* the contexts are the GC's: only the slots' memory is ours */
    for (slot = st->idle; slot != NULL; slot = next) {
        next = slot->next_idle;
        free(slot);
    }

    mrb_coro_pool_free(st->pool);
    free(st);
}

static const struct mrb_data_type  wait_state_type = {
    "mrb_wait_state", wait_state_free
};


/*
 * The Ruby side of a new state: the names' symbols, then an object that
 * owns it and holds the keeps array, registered last and given the state
 * after that, so that a raise anywhere leaves nothing to undo.
 */
static mrb_value
wait_state_new_body(mrb_state *mrb, void *p)
{
    mrb_wait_state    *st = p;
    const mrb_server  *server = mrb_interp_server(mrb_interp_from_state(mrb));
    struct RData      *owner;
    mrb_value          keeps;
    mrb_sym            sym;
    int                i;

    for (i = 0; wait_names[i] != NULL; i++) {
        /* Redis waits on a coroutine only where the server watches its
         * socket (mrb_wait_fd); elsewhere it blocks, and a coroutine
         * would cost its run for nothing */
        if (server->wake_on_fd == NULL && strcmp(wait_names[i], "Redis") == 0)
        {
            continue;
        }

        sym = mrb_intern_cstr(mrb, wait_names[i]);
        st->names[st->nnames++] = sym;
        if (sym < WAIT_SYM_BITS) {
            st->name_bits[sym / 8] |= (uint8_t) (1 << (sym % 8));
        }
    }

    owner = mrb_data_object_alloc(mrb, mrb->object_class, NULL,
                                  &wait_state_type);
    keeps = mrb_ary_new(mrb);
    mrb_iv_set(mrb, mrb_obj_value(owner), mrb_intern_lit(mrb, "keeps"),
               keeps);
    mrb_gc_register(mrb, mrb_obj_value(owner));
    owner->data = st;
    st->keeps = keeps;
    return mrb_nil_value();
}


/*
 * interp's state, made on its first run that may wait; NULL when out of
 * memory.  Its callers are not under a protect frame yet: what raises is
 * caught, and the state freed, with the GC arena as it was.
 */
static mrb_wait_state *
wait_state(mrb_interp *interp)
{
    mrb_wait_state  **sp = mrb_interp_wait_state(interp);
    mrb_wait_state   *st = *sp;
    mrb_state        *mrb;
    mrb_bool          failed;
    int               ai;

    if (st != NULL) {
        return st;
    }

    st = calloc(1, sizeof(mrb_wait_state));
    if (st == NULL) {
        return NULL;
    }

    st->pool = mrb_coro_pool_new(wait_stack_size, wait_pool_keep);
    if (st->pool == NULL) {
        free(st);
        return NULL;
    }
    st->keep = wait_pool_keep;

    mrb = mrb_interp_state(interp);
    ai = mrb_gc_arena_save(mrb);
    mrb_protect_error(mrb, wait_state_new_body, st, &failed);
    mrb_gc_arena_restore(mrb, ai);

    if (failed) {
        mrb_coro_pool_free(st->pool);
        free(st);
        return NULL;
    }

    *sp = st;
    return st;
}


/* Whether irep or a block or method in it names one of wait_names. */
static int
wait_irep_names(mrb_wait_state *st, const mrb_irep *irep)
{
    mrb_sym  sym;
    int      i, j;

    for (i = 0; i < irep->slen; i++) {
        sym = irep->syms[i];

        if (sym < WAIT_SYM_BITS) {
            if (st->name_bits[sym / 8] & (1 << (sym % 8))) {
                return 1;
            }
            continue;
        }

        for (j = 0; j < st->nnames; j++) {
            if (sym == st->names[j]) {
                return 1;
            }
        }
    }

    for (i = 0; i < irep->rlen; i++) {
        if (wait_irep_names(st, irep->reps[i])) {
            return 1;
        }
    }

    return 0;
}


int
mrb_wait_wanted(mrb_interp *interp, struct RProc *proc)
{
    mrb_state           *mrb = mrb_interp_state(interp);
    struct mrb_context  *c = mrb->c;
    mrb_wait_state      *st;
    mrb_irep            *irep;

    /* a run nested in another (or in a fiber) runs on its stack */
    if (c != mrb->root_c || c->ci != c->cibase) {
        return 0;
    }

    if (mrb_interp_wait_always(interp)) {
        return 1;
    }

    if (MRB_PROC_CFUNC_P(proc)) {
        return 0;
    }

    irep = (mrb_irep *) proc->body.irep;

    if (!(irep->flags & WAIT_IREP_SCANNED)) {
        st = wait_state(interp);
        if (st == NULL) {
            return 1;   /* mrb_wait_exec fails the run: out of memory */
        }
        irep->flags |= WAIT_IREP_SCANNED
                       | (wait_irep_names(st, irep) ? WAIT_IREP_NAMES : 0);
    }

    return (irep->flags & WAIT_IREP_NAMES) != 0;
}


void
mrb_wait_note_startup(mrb_interp *interp, struct RProc *proc)
{
    mrb_wait_state  *st = wait_state(interp);

    /* out of memory: the startup script may have defined a method that
     * waits, so every run that may wait tries a coroutine */
    if (st == NULL
        || (!MRB_PROC_CFUNC_P(proc) && wait_irep_names(st, proc->body.irep)))
    {
        mrb_interp_set_wait_always(interp);
    }
}


static long
wait_now_ms(void)
{
    struct timespec  ts;

    /* the coarse clock: read in user space, never a system call */
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


int
mrb_wait_trim(mrb_interp *interp)
{
    mrb_wait_state  *st = *mrb_interp_wait_state(interp);

    if (st == NULL) {
        return 0;
    }

    mrb_coro_pool_trim(st->pool);
    st->trimmed_ms = wait_now_ms();
    st->trim_pending = mrb_coro_pool_idle(st->pool) > st->keep;
    return st->trim_pending;
}


/*
 * After a run's coroutine finished: a pool holding more than keep stacks
 * is trimmed within MRB_WAIT_TRIM_MS (one comparison per run otherwise).
 */
static void
wait_trim_due(mrb_interp *interp, mrb_wait_state *st)
{
    const mrb_server  *server;

    if (mrb_coro_pool_idle(st->pool) <= st->keep || st->trim_pending) {
        return;
    }

    server = mrb_interp_server(interp);
    if (server->trim_later != NULL) {
        st->trim_pending = 1;
        server->trim_later(interp);

    } else if (wait_now_ms() - st->trimmed_ms >= MRB_WAIT_TRIM_MS) {
        mrb_wait_trim(interp);
        st->trim_pending = 0;
    }
}


/*
 * Frames back to the base one: the script's goes above it.  The base is
 * marked as entered from C, so that an exception which pops it is thrown
 * to the run's protect frame: mruby 3.1 pops a frame before it copies the
 * frame's env, and a NoMemoryError in that copy (a run at its memory
 * budget) unwound past the script's own mark down to the context's first
 * frame, where the VM ends the context and goes on in its previous one,
 * NULL here (SIGSEGV).
 */
static void
wait_slot_reset(mrb_state *mrb, mrb_wait_slot *slot)
{
    struct mrb_context  *c = slot->ctx;
    int                  i;

    for (i = 0; i < 2; i++) {
        memset(&c->cibase[i], 0, sizeof(mrb_callinfo));
        c->cibase[i].stack = c->stbase;
        c->cibase[i].u.target_class = mrb->object_class;
    }

    c->cibase[1].cci = MRB_CINFO_SKIP;

    c->ci = c->cibase + 1;
    c->status = MRB_FIBER_RUNNING;
    c->prev = NULL;
    c->stbase[0] = mrb_nil_value();
    c->stbase[1] = mrb_nil_value();
}


/* A new context with its base frame, held by a Fiber object. */
static int
wait_slot_context(mrb_state *mrb, mrb_wait_slot *slot)
{
    struct mrb_context  *c;
    struct RFiber       *f;

    f = (struct RFiber *) mrb_obj_alloc(mrb, MRB_TT_FIBER,
                                        mrb_class_get(mrb, "Fiber"));
    c = mrb_malloc(mrb, sizeof(struct mrb_context));
    memset(c, 0, sizeof(struct mrb_context));
    f->cxt = c;
    c->fib = f;

    /* until it has its frames: the GC neither marks nor unwinds it, should
     * an allocation below run it or raise */
    c->status = MRB_FIBER_TERMINATED;

    /* as stack_init does; the GC frees them with the fiber */
    c->stbase = mrb_calloc(mrb, WAIT_STACK_INIT, sizeof(mrb_value));
    c->stend = c->stbase + WAIT_STACK_INIT;
    c->cibase = mrb_calloc(mrb, WAIT_CI_INIT, sizeof(mrb_callinfo));
    c->ciend = c->cibase + WAIT_CI_INIT;

    slot->fiber = f;
    slot->ctx = c;

    /* the GC reads c->ci->stack of every live fiber: from now on */
    wait_slot_reset(mrb, slot);
    return 0;
}


typedef struct {
    mrb_wait_state  *st;
    mrb_wait_slot   *slot;
} wait_slot_new_args;


/* The Ruby objects of a new slot; it is in st->keeps when none raised. */
static mrb_value
wait_slot_new_body(mrb_state *mrb, void *p)
{
    wait_slot_new_args  *a = p;
    mrb_wait_slot       *slot = a->slot;

    wait_slot_context(mrb, slot);
    slot->keep = mrb_ary_new_capa(mrb, 8);
    mrb_ary_push(mrb, slot->keep, mrb_obj_value(slot->fiber));
    mrb_ary_push(mrb, slot->keep, mrb_ary_new(mrb));
    mrb_ary_push(mrb, slot->keep, mrb_cptr_value(mrb, slot));
    mrb_ary_push(mrb, slot->keep, mrb_nil_value());
    mrb_ary_push(mrb, slot->keep, mrb_nil_value());
    mrb_ary_push(mrb, slot->keep, mrb_nil_value());
    slot->keep_index = RARRAY_LEN(a->st->keeps);
    mrb_ary_push(mrb, a->st->keeps, slot->keep);
    return mrb_nil_value();
}


/*
 * An idle slot, or a new one; NULL when out of memory.  The caller is
 * not under a protect frame yet: what raises here is caught, and the
 * objects made before it are left to the GC once the caller restores the
 * arena.
 */
static mrb_wait_slot *
wait_slot_take(mrb_state *mrb, mrb_wait_state *st)
{
    mrb_wait_slot       *slot = st->idle;
    wait_slot_new_args   args;
    mrb_bool             failed;

    if (slot != NULL) {
        st->idle = slot->next_idle;
        st->nidle--;
        return slot;
    }

    slot = malloc(sizeof(mrb_wait_slot));
    if (slot == NULL) {
        return NULL;
    }

    memset(slot, 0, offsetof(mrb_wait_slot, run.error));

    args.st = st;
    args.slot = slot;
    mrb_protect_error(mrb, wait_slot_new_body, &args, &failed);
    if (failed) {
        free(slot);
        return NULL;
    }

    return slot;
}


/* Forgets what slot kept of its run's top-level and parts' state. */
static void
wait_keep_clear(mrb_state *mrb, mrb_wait_slot *slot)
{
    int  i;

    /* the entries exist: setting them allocates nothing */
    for (i = WAIT_KEEP_TOPLEVEL; i <= WAIT_KEEP_LOST; i++) {
        mrb_ary_set(mrb, slot->keep, i, mrb_nil_value());
    }

    slot->aside = 0;
    slot->lost = 0;
}


static void
wait_slot_give_back(mrb_state *mrb, mrb_wait_state *st, mrb_wait_slot *slot)
{
    mrb_value       last;
    mrb_int         n;
    mrb_wait_slot  *moved;

    slot->ctx->stbase[0] = mrb_nil_value();
    slot->ctx->stbase[1] = mrb_nil_value();
    slot->proc = NULL;

    if (slot->counted) {
        slot->counted = 0;
        mrb_metrics_worker_coros(-1);
    }

    if (slot->aside || slot->lost) {
        wait_keep_clear(mrb, slot);
    }

    if (st->nidle < WAIT_KEEP_IDLE) {
        slot->next_idle = st->idle;
        st->idle = slot;
        st->nidle++;
        return;
    }

    /* the last keep takes this one's place in the array */
    n = RARRAY_LEN(st->keeps);
    last = mrb_ary_entry(st->keeps, n - 1);
    if (slot->keep_index != n - 1) {
        moved = mrb_cptr(RARRAY_PTR(last)[WAIT_KEEP_SLOT]);
        moved->keep_index = slot->keep_index;
        mrb_ary_set(mrb, st->keeps, slot->keep_index, last);
    }
    mrb_ary_resize(mrb, st->keeps, n - 1);
    free(slot);
}


#if defined(MRB_GC_FIXED_ARENA)
#define WAIT_ARENA_CAPA(mrb)  MRB_GC_ARENA_SIZE
#else
#define WAIT_ARENA_CAPA(mrb)  ((mrb)->gc.arena_capa)
#endif


/* The arena's objects above slot's base, kept in keep while it waits. */
static MRB_NOINLINE void
wait_arena_save(mrb_state *mrb, mrb_wait_slot *slot)
{
    int  i;

    for (i = slot->arena_base; i < mrb->gc.arena_idx; i++) {
        mrb_ary_push(mrb, slot->keep, mrb_obj_value(mrb->gc.arena[i]));
    }

    slot->saved = 1;
}


/* Puts back what wait_arena_save kept, above the base. */
static MRB_NOINLINE void
wait_arena_restore(mrb_state *mrb, mrb_wait_slot *slot)
{
    mrb_int  i, n = RARRAY_LEN(slot->keep);

    for (i = WAIT_KEEP_ARENA; i < n; i++) {
        mrb_gc_protect(mrb, RARRAY_PTR(slot->keep)[i]);
    }

    mrb_ary_resize(mrb, slot->keep, WAIT_KEEP_ARENA);
    slot->saved = 0;
}


/* The resumer's arena above slot's base, kept in stash while slot runs. */
static MRB_NOINLINE void
wait_stash_resumer(mrb_state *mrb, mrb_wait_slot *slot)
{
    mrb_value  stash = RARRAY_PTR(slot->keep)[WAIT_KEEP_STASH];
    int        i;

    for (i = slot->arena_base; i < mrb->gc.arena_idx; i++) {
        mrb_ary_push(mrb, stash, mrb_obj_value(mrb->gc.arena[i]));
    }

    mrb->gc.arena_idx = slot->arena_base;
    slot->stashed = 1;
}


/* Puts the resumer's stashed arena back, from the base up. */
static MRB_NOINLINE void
wait_unstash_resumer(mrb_state *mrb, mrb_wait_slot *slot)
{
    mrb_value  stash = RARRAY_PTR(slot->keep)[WAIT_KEEP_STASH];
    mrb_int    i, n = RARRAY_LEN(stash);

    mrb->gc.arena_idx = slot->arena_base;
    for (i = 0; i < n; i++) {
        mrb_gc_protect(mrb, RARRAY_PTR(stash)[i]);
    }

    mrb_ary_resize(mrb, stash, 0);
    slot->stashed = 0;
}


/*
 * A resumer below slot's base: the arena up to the base is filled with an
 * object that is alive anyway (the GC reads those entries, and nothing
 * else does).  Stored directly, not one mrb_gc_protect call per entry
 * (most of a resume's cost, as most resumes come from an event loop that
 * is below the base the run started at).
 */
static void
wait_arena_fill(mrb_state *mrb, int base)
{
    struct RBasic  *alive = (struct RBasic *) mrb->object_class;
    int             i;

    if (base > WAIT_ARENA_CAPA(mrb)) {
        while (mrb->gc.arena_idx < base) {
            mrb_gc_protect(mrb, mrb_obj_value(mrb->object_class));
        }
        return;
    }

    for (i = mrb->gc.arena_idx; i < base; i++) {
        mrb->gc.arena[i] = alive;
    }

    mrb->gc.arena_idx = base;
}


/*
 * The top-level state of runs that wait (mrb_toplevel.h).  A run that
 * suspends leaves what it set in the tables, held for it
 * (mrb_interp_held).  Before another run starts or resumes (the script
 * run, mrb_script.c; wait_switch_in) this takes it aside into the held
 * run's keep and puts the tables back as sealed, so that the other runs
 * neither see it nor remove it; wait_put_back sets it again before the
 * run resumes.  A run that waits while no other runs (one request's
 * sleep) so costs a store and a compare.  Nothing here raises: a failure
 * marks the run's state lost, and the run raises when it resumes.
 */
void
mrb_wait_set_aside(mrb_interp *interp)
{
    mrb_state        *mrb = mrb_interp_state(interp);
    mrb_wait_slot    *slot = mrb_interp_held(interp);
    mrb_run_rec      *run = mrb_interp_current(interp);
    mrb_value         aside, exc;
    int               ai = mrb_gc_arena_save(mrb);

    mrb_interp_set_held(interp, NULL);

    /* a line it logs is the held run's */
    mrb_interp_set_run(interp, &slot->run);

    /* keep's entries exist: setting them allocates nothing */
    if (mrb_interp_toplevel_take(interp, &aside) != 0) {
        slot->lost = 1;
        mrb_ary_set(mrb, slot->keep, WAIT_KEEP_LOST, aside);

    } else if (!mrb_nil_p(aside)) {
        slot->aside = 1;
        mrb_ary_set(mrb, slot->keep, WAIT_KEEP_TOPLEVEL, aside);
    }

    /* what the parts took before one failed is still the run's: it gets
     * it back when it resumes, and lets its locks go as it raises */
    if (mrb_interp_parts_take(interp, &aside, &exc) != 0) {
        slot->lost = 1;
        mrb_ary_set(mrb, slot->keep, WAIT_KEEP_LOST, exc);
    }

    if (!mrb_nil_p(aside)) {
        slot->aside = 1;
        mrb_ary_set(mrb, slot->keep, WAIT_KEEP_PARTS, aside);
    }

    mrb_interp_set_run(interp, run);
    mrb_gc_arena_restore(mrb, ai);
}


/* Sets slot's top-level state again, before it resumes; a failure marks
 * it lost (the run raises when it resumes). */
static MRB_NOINLINE void
wait_put_back(mrb_state *mrb, mrb_wait_slot *slot)
{
    mrb_value  exc;
    int        ai = mrb_gc_arena_save(mrb);

    slot->aside = 0;
    mrb_interp_parts_put_back(slot->interp,
                              RARRAY_PTR(slot->keep)[WAIT_KEEP_PARTS]);
    mrb_ary_set(mrb, slot->keep, WAIT_KEEP_PARTS, mrb_nil_value());

    /* keep's entries exist: setting them allocates nothing */
    if (mrb_interp_toplevel_put_back(slot->interp,
            RARRAY_PTR(slot->keep)[WAIT_KEEP_TOPLEVEL], &exc) != 0)
    {
        slot->lost = 1;
        mrb_ary_set(mrb, slot->keep, WAIT_KEEP_LOST, exc);
    }

    mrb_ary_set(mrb, slot->keep, WAIT_KEEP_TOPLEVEL, mrb_nil_value());
    mrb_gc_arena_restore(mrb, ai);
}


/*
 * Switches into slot's run: its context, jmp, current run and arena slice
 * (at its base: what the resumer has above that base waits in stash).
 * Returns mrb_coro_resume's result, with the resumer's state back.
 */
static int
wait_switch_in(mrb_state *mrb, mrb_wait_state *st, mrb_wait_slot *slot)
{
    mrb_interp  *interp = slot->interp;
    int          idx;

    /* the tables hold slot's own top-level state, or another run's, or
     * the sealed state and slot's own is aside */
    if (mrb_interp_held(interp) == slot) {
        mrb_interp_set_held(interp, NULL);

    } else {
        if (mrb_interp_held(interp) != NULL) {
            mrb_wait_set_aside(slot->interp);
        }
        if (slot->aside) {
            wait_put_back(mrb, slot);
        }
    }

    idx = mrb->gc.arena_idx;
    slot->resumer_c = mrb->c;
    slot->resumer_jmp = mrb->jmp;
    slot->resumer_run = mrb_interp_current(interp);
    slot->resumer_slot = st->current;
    slot->resumer_idx = idx;

    if (idx > slot->arena_base) {
        wait_stash_resumer(mrb, slot);

    } else if (idx < slot->arena_base) {
        wait_arena_fill(mrb, slot->arena_base);
    }

    if (slot->saved) {
        wait_arena_restore(mrb, slot);
    }

    mrb->c = slot->c;
    mrb->jmp = slot->jmp;
    mrb_interp_set_run(interp, slot->head_run);
    slot->resumer_budget_left = mrb_run_budget_pause(interp);
    mrb_run_budget_resume(interp, slot->budget_left);
    st->current = slot;
    slot->ctx->status = MRB_FIBER_RUNNING;

    return mrb_coro_resume(slot->coro);
}


/*
 * Back to the resumer's state, on the coroutine's side of the switch
 * (suspending: the run's own state is kept for the next switch in).
 */
static void
wait_switch_out(mrb_state *mrb, mrb_wait_state *st, mrb_wait_slot *slot,
    int suspending)
{
    if (suspending) {
        slot->c = mrb->c;
        slot->jmp = mrb->jmp;
        slot->head_run = mrb_interp_current(slot->interp);
        if (mrb->gc.arena_idx > slot->arena_base) {
            wait_arena_save(mrb, slot);
        }
        slot->ctx->status = MRB_FIBER_SUSPENDED;
        slot->budget_left = mrb_run_budget_pause(slot->interp);

        /* contexts changed since the GC last marked them */
        if (mrb->c->fib != NULL) {
            mrb_write_barrier(mrb, (struct RBasic *) mrb->c->fib);
        }
        mrb_write_barrier(mrb, (struct RBasic *) slot->fiber);
    }

    if (slot->stashed) {
        wait_unstash_resumer(mrb, slot);
    }

    mrb->gc.arena_idx = slot->resumer_idx;
    mrb->c = slot->resumer_c;
    mrb->jmp = slot->resumer_jmp;
    mrb_interp_set_run(slot->interp, slot->resumer_run);
    mrb_run_budget_resume(slot->interp, slot->resumer_budget_left);
    st->current = slot->resumer_slot;
}


/* The coroutine: the run, under the protect frame of mrb_interp_exec. */
static void
wait_main(mrb_coro *coro, void *arg)
{
    mrb_wait_slot   *slot = arg;
    mrb_state       *mrb = mrb_interp_state(slot->interp);
    mrb_wait_state  *st = *mrb_interp_wait_state(slot->interp);

    slot->rc = mrb_interp_exec(slot->interp, slot->proc, &slot->run);
    wait_switch_out(mrb, st, slot, 0);
}


/* What the caller's run gets from a run that ended. */
static void
wait_copy_result(mrb_state *mrb, mrb_wait_slot *slot, mrb_run_rec *out)
{
    out->result = slot->run.result;
    out->returned = slot->run.returned;
    out->written = slot->run.written;

    if (slot->rc != 0) {
        memcpy(out->error, slot->run.error, sizeof(out->error));

    } else if (out->want_value) {
        out->value = slot->run.value;
        mrb_gc_protect(mrb, out->value);
    }
}


/* The time a counted run spends suspended is its time waiting. */
static void
wait_suspended(mrb_wait_slot *slot)
{
    if (slot->run.metrics_row != 0) {
        slot->suspended_ns = mrb_metrics_now();
    }
}


static void
wait_resumed(mrb_wait_slot *slot)
{
    if (slot->run.metrics_row != 0) {
        slot->run.waited_ns += mrb_metrics_now() - slot->suspended_ns;
    }
}


int
mrb_wait_exec(mrb_interp *interp, struct RProc *proc, mrb_run_rec *run)
{
    mrb_state       *mrb = mrb_interp_state(interp);
    mrb_wait_state  *st = wait_state(interp);
    mrb_wait_slot   *slot;
    int              ai = mrb_gc_arena_save(mrb);
    int              rc;

    /* A run that fails here leaves the arena as it found it: the
     * NoMemoryError mrb_protect_error protected, and what was made before
     * it, would otherwise stay there for good, one entry more per failed
     * run, until the arena grows (mruby 3.1 raises its capacity before the
     * realloc that may fail: docs/security.md). */
    if (st == NULL || (slot = wait_slot_take(mrb, st)) == NULL) {
        mrb_gc_arena_restore(mrb, ai);
        snprintf(run->error, sizeof(run->error),
                 "out of memory for the run's coroutine");
        mrb_metrics_run_failed(interp, run);
        return -1;
    }

    slot->counted = 0;
    slot->coro = mrb_coro_new(st->pool, wait_main, slot);
    if (slot->coro == NULL) {
        wait_slot_give_back(mrb, st, slot);
        mrb_gc_arena_restore(mrb, ai);
        snprintf(run->error, sizeof(run->error),
                 "cannot map a stack for the run's coroutine: %s",
                 strerror(errno));
        mrb_metrics_run_failed(interp, run);
        return -1;
    }

    /* the header only: the error buffer is written when the run fails */
    memcpy(&slot->run, run, offsetof(mrb_run_rec, error));
    slot->run.error[0] = '\0';
    slot->run.waiting = NULL;
    slot->interp = interp;
    slot->proc = proc;
    slot->cancelled = 0;
    slot->counted = mrb_metrics_worker_coros(1);
    slot->aside = 0;
    slot->lost = 0;
    slot->saved = 0;
    slot->stashed = 0;
    wait_slot_reset(mrb, slot);
    slot->c = slot->ctx;
    slot->jmp = NULL;
    slot->head_run = mrb_interp_current(interp);
    slot->arena_base = mrb->gc.arena_idx;
    slot->budget_left = MRB_RUN_NO_DEADLINE;   /* its start sets it */

    if (wait_switch_in(mrb, st, slot) != 0) {
        wait_suspended(slot);
        run->waiting = &slot->run;
        return MRB_RUN_WAITING;
    }

    rc = slot->rc;
    wait_copy_result(mrb, slot, run);
    wait_slot_give_back(mrb, st, slot);
    wait_trim_due(interp, st);
    return rc;
}


static mrb_wait_slot *
wait_slot_of(mrb_run_rec *waiting)
{
    return (mrb_wait_slot *) ((char *) waiting
                              - offsetof(mrb_wait_slot, run));
}


int
mrb_wait_resume(mrb_interp *interp, mrb_run_rec *waiting, mrb_run_rec *out)
{
    mrb_state       *mrb = mrb_interp_state(interp);
    mrb_wait_state  *st = *mrb_interp_wait_state(interp);
    mrb_wait_slot   *slot = wait_slot_of(waiting);
    int              rc;

    wait_resumed(slot);

    if (wait_switch_in(mrb, st, slot) != 0) {
        wait_suspended(slot);
        return MRB_RUN_WAITING;
    }

    rc = slot->rc;
    if (out != NULL) {
        wait_copy_result(mrb, slot, out);
    }
    wait_slot_give_back(mrb, st, slot);
    wait_trim_due(interp, st);
    return rc;
}


void
mrb_wait_cancel(mrb_interp *interp, mrb_run_rec *waiting)
{
    mrb_state       *mrb = mrb_interp_state(interp);
    mrb_wait_state  *st = *mrb_interp_wait_state(interp);
    mrb_wait_slot   *slot = wait_slot_of(waiting);

    slot->cancelled = 1;
    wait_resumed(slot);

    if (wait_switch_in(mrb, st, slot) != 0) {
        /* mrb_wait raises at once once cancelled: not reached */
        mrb_coro_drop(slot->coro);
    }


    wait_slot_give_back(mrb, st, slot);
    wait_trim_due(interp, st);
}


static struct RClass *wait_cancelled_class(mrb_state *mrb);


/*
 * The slot of the run that would wait now; raises where a run cannot wait,
 * and Cancelled in a run that was cancelled (its ensure clauses may try to
 * wait again: nothing may be started for a request that is going away).
 */
static mrb_wait_slot *
wait_slot_check(mrb_state *mrb, const char *what)
{
    mrb_interp      *interp = mrb_interp_from_state(mrb);
    mrb_wait_state  *st = *mrb_interp_wait_state(interp);
    mrb_run_rec     *run = mrb_interp_run(mrb);

    if (st == NULL || st->current == NULL) {
        mrb_raisef(mrb, E_RUNTIME_ERROR,
                   "%s: cannot wait here (request scripts of the phases up "
                   "to content can wait, when their code names sleep, "
                   "usleep, Async or sub_request, or a startup script "
                   "does; not the log phase, filters, mruby_set or startup "
                   "scripts)", what);
    }

    if (run != &st->current->run) {
        mrb_raisef(mrb, E_RUNTIME_ERROR,
                   "%s: cannot wait in a script run inside another one",
                   what);
    }

    if (st->current->cancelled) {
        mrb_raise(mrb, wait_cancelled_class(mrb),
                  "the request was cancelled while it waited "
                  "(the client went away, or the server is stopping)");
    }

    return st->current;
}


mrb_run_rec *
mrb_wait_check(mrb_state *mrb, const char *what)
{
    return &wait_slot_check(mrb, what)->run;
}


static struct RClass *
wait_cancelled_class(mrb_state *mrb)
{
    const mrb_server  *server = mrb_interp_server(mrb_interp_from_state(mrb));
    struct RClass     *async;

    async = mrb_module_get_under(mrb, mrb_class_get(mrb, server->class_name),
                                 "Async");
    return mrb_class_get_under(mrb, async, "Cancelled");
}


/*
 * Suspends slot's run until it is resumed or cancelled, once what wakes
 * it is set up: nothing here raises.  What the run set at top level stays
 * in the tables, held for it (mrb_wait_set_aside).
 */
static void
wait_suspend_raw(mrb_state *mrb, mrb_wait_state *st, mrb_wait_slot *slot)
{
    mrb_interp_set_held(slot->interp, slot);
    wait_switch_out(mrb, st, slot, 1);
    mrb_coro_suspend(slot->coro);
}


/* After a resumption that must not go on: the run was cancelled, or its
 * top-level state was lost (out of memory; its exception is in keep). */
static MRB_NOINLINE void
wait_raise_stopped(mrb_state *mrb, mrb_wait_slot *slot)
{
    mrb_value  exc = RARRAY_PTR(slot->keep)[WAIT_KEEP_LOST];

    if (slot->cancelled) {
        mrb_raise(mrb, wait_cancelled_class(mrb),
                  "the request was cancelled while it waited "
                  "(the client went away, or the server is stopping)");
    }

    /* from here on mrb->exc holds it */
    slot->lost = 0;
    mrb_ary_set(mrb, slot->keep, WAIT_KEEP_LOST, mrb_nil_value());
    mrb_exc_raise(mrb, exc);
}


/* Suspends slot's run until it is resumed or cancelled. */
static void
wait_suspend(mrb_state *mrb, mrb_wait_slot *slot)
{
    wait_suspend_raw(mrb, *mrb_interp_wait_state(slot->interp), slot);

    if (slot->cancelled || slot->lost) {
        wait_raise_stopped(mrb, slot);
    }
}


void
mrb_wait(mrb_state *mrb)
{
    wait_suspend(mrb, wait_slot_check(mrb, "wait"));
}


/* Whether the current run could wait now (wait_slot_check would pass). */
static int
wait_can(mrb_state *mrb)
{
    mrb_wait_state  *st = *mrb_interp_wait_state(mrb_interp_from_state(mrb));

    return st != NULL && st->current != NULL
           && mrb_interp_run(mrb) == &st->current->run;
}


void
mrb_wait_sleep(mrb_state *mrb, mrb_int msec, const char *what)
{
    const mrb_server  *server = mrb_interp_server(mrb_interp_from_state(mrb));
    mrb_wait_slot     *slot;
    struct timespec    ts;
    uint64_t           left;

    if (msec < 0 || msec > MRB_WAIT_SLEEP_MAX_MS) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR,
                   "%s: milliseconds must be 0 to 86400000", what);
    }

    if (server->wake_after == NULL
        || (server->sleep_blocks && !wait_can(mrb)))
    {
        ts.tv_sec = msec / 1000;
        ts.tv_nsec = (msec % 1000) * 1000000;
        left = mrb_run_budget_pause(mrb_interp_from_state(mrb));
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
            /* the rest of it */
        }
        mrb_run_budget_resume(mrb_interp_from_state(mrb), left);
        return;
    }

    slot = wait_slot_check(mrb, what);

    if (server->wake_after(&slot->run, msec) != 0) {
        mrb_raisef(mrb, E_RUNTIME_ERROR, "%s: cannot set a timer", what);
    }

    wait_suspend(mrb, slot);
}


void
mrb_wait_raise_cancelled(mrb_state *mrb)
{
    mrb_wait_state  *st = *mrb_interp_wait_state(mrb_interp_from_state(mrb));

    if (wait_can(mrb) && st->current->lost) {
        wait_raise_stopped(mrb, st->current);
    }

    mrb_raise(mrb, wait_cancelled_class(mrb),
              "the request was cancelled while it waited "
              "(the client went away, or the server is stopping)");
}


/* mrb_wait_fd where the run cannot be suspended: the thread waits, which
 * is not the run's time. */
static int
wait_fd_poll(mrb_state *mrb, int fd, int events, mrb_int msec)
{
    struct pollfd  pfd;
    uint64_t       left;
    int            rc;

    pfd.fd = fd;
    pfd.events = ((events & MRB_FD_READ) ? POLLIN : 0)
                 | ((events & MRB_FD_WRITE) ? POLLOUT : 0);
    pfd.revents = 0;

    /* EINTR counts as ready: the caller finds nothing to do and asks
     * again with the time that is left */
    left = mrb_run_budget_pause(mrb_interp_from_state(mrb));
    rc = poll(&pfd, 1, (int) msec);
    mrb_run_budget_resume(mrb_interp_from_state(mrb), left);
    if (rc < 0 && errno == EINTR) {
        return 1;
    }

    return rc > 0 ? 1 : rc;
}


int
mrb_wait_fd(mrb_state *mrb, int fd, int events, mrb_int msec)
{
    mrb_interp         *interp = mrb_interp_from_state(mrb);
    const mrb_server   *server = mrb_interp_server(interp);
    mrb_wait_state     *st = *mrb_interp_wait_state(interp);
    mrb_wait_slot      *slot;
    int                 ready;

    if (server->wake_on_fd == NULL || st == NULL || st->current == NULL
        || mrb_interp_run(mrb) != &st->current->run)
    {
        return wait_fd_poll(mrb, fd, events, msec);
    }

    slot = st->current;
    if (slot->cancelled) {
        return MRB_WAIT_CANCELLED;
    }

    ready = 0;
    if (server->wake_on_fd(&slot->run, fd, events, msec, &ready) != 0) {
        return wait_fd_poll(mrb, fd, events, msec);
    }

    wait_suspend_raw(mrb, st, slot);

    return (slot->cancelled || slot->lost) ? MRB_WAIT_CANCELLED : ready;
}


void
mrb_wait_counts(mrb_interp *interp, unsigned *live, unsigned *idle)
{
    mrb_wait_state  *st = *mrb_interp_wait_state(interp);

    *live = st != NULL ? mrb_coro_pool_live(st->pool) : 0;
    *idle = st != NULL ? mrb_coro_pool_idle(st->pool) : 0;
}
