/*
 * The interpreter's allocator (mrb_alloc.h).
 *
 * mruby gives an allocator no size when it frees or reallocates a block:
 * malloc_usable_size() tells which blocks are large enough to keep.  The
 * kept blocks live in front of the mrb_state, in the block that holds it:
 * mrb_open_core() asks for the state first (with no mrb_state yet) and
 * mrb_close() frees it last, so they are made and freed with the
 * interpreter, without a call of their own.
 *
 * The run in progress (mrb_interp_run) may have a memory budget: each
 * block it takes is counted at its usable size and each block freed while
 * it runs is taken off (never below zero: what other runs left and the
 * collector frees now is no credit), and a block that would take the
 * count past the budget is refused before malloc is asked.  mruby then
 * collects all garbage, asks once more and raises NoMemoryError.
 */

#include <malloc.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mrb_alloc.h"
#include "mrb_interp_core.h"
#include "mrb_mruby_version.h"

/* Out of line: the allocator's hot path then tail-calls them without a
 * frame. */
#define MRB_ALLOC_NOINLINE  __attribute__((noinline))


/* The run whose budget counts mrb's blocks now, or NULL. */
static mrb_run_rec *
budget_run(mrb_state *mrb)
{
    mrb_run_rec  *run = mrb_interp_run(mrb);

    return run != NULL && run->memory_limit != 0 ? run : NULL;
}


/* The run's error buffer holds where it was refused until the run ends
 * (mrb_interp_exec makes the log line of it). */
static MRB_ALLOC_NOINLINE void
budget_refuse(mrb_state *mrb, mrb_run_rec *run)
{
    run->memory_exceeded = 1;
    mrb_error_where(mrb, run->error, sizeof(run->error));
}


/*
 * Whether run may keep more bytes than it does; marks it when not.  While
 * an exception or a break is on its way (mrb->exc set) nothing is refused:
 * mruby then copies the envs of the frames it pops, and a second raise in
 * the middle of a pop is not one its VM survives (it goes on unwinding
 * frames that belong to an outer entry into the VM).  The copies are a few
 * registers a frame.
 */
static int
budget_allows(mrb_state *mrb, mrb_run_rec *run, size_t more)
{
    if (more <= run->memory_limit
        && run->memory_used <= run->memory_limit - more)
    {
        return 1;
    }

    if (mrb->exc != NULL) {
        return 1;
    }

    budget_refuse(mrb, run);
    return 0;
}


static void
budget_give_back(mrb_run_rec *run, size_t size)
{
    run->memory_used -= size < run->memory_used ? size : run->memory_used;
}


#ifdef MRB_STATE_ALLOCF

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#define block_poison(p, n)    ASAN_POISON_MEMORY_REGION(p, n)
#define block_unpoison(p, n)  ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define block_poison(p, n)
#define block_unpoison(p, n)
#endif

/* Freed large blocks, kept for reuse; sizes are malloc_usable_size(). */
typedef struct {
    void      *block[MRB_ALLOC_KEEP_BLOCKS];
    size_t     size[MRB_ALLOC_KEEP_BLOCKS];
    unsigned   count;
    size_t     bytes;
} mrb_alloc_keep;

typedef struct {
    mrb_alloc_keep                       keep;
    alignas(max_align_t) unsigned char   state[];   /* the mrb_state */
} mrb_alloc_head;


static mrb_alloc_head *
head_of(mrb_state *mrb)
{
    return (mrb_alloc_head *) ((unsigned char *) mrb
                               - offsetof(mrb_alloc_head, state));
}


static mrb_alloc_keep *
keep_of(mrb_state *mrb)
{
    return &head_of(mrb)->keep;
}


static int
keep_has_room(const mrb_alloc_keep *keep, size_t size)
{
    return size >= MRB_ALLOC_KEEP_MIN && size <= MRB_ALLOC_KEEP_MAX
           && keep->count < MRB_ALLOC_KEEP_BLOCKS
           && keep->bytes + size <= MRB_ALLOC_KEEP_BYTES;
}


static void
keep_put(mrb_alloc_keep *keep, void *p, size_t size)
{
    block_poison(p, size);
    keep->block[keep->count] = p;
    keep->size[keep->count] = size;
    keep->count++;
    keep->bytes += size;
}


/*
 * The smallest kept block that holds size bytes, taken out; NULL if none.
 * A block serves only requests of at least half its size, so that a small
 * request does not take the block a large one needs next.
 */
static void *
keep_take(mrb_alloc_keep *keep, size_t size)
{
    unsigned  i, best = keep->count;
    void     *p;

    for (i = 0; i < keep->count; i++) {
        if (keep->size[i] >= size && keep->size[i] / 2 <= size
            && (best == keep->count || keep->size[i] < keep->size[best]))
        {
            best = i;
        }
    }

    if (best == keep->count) {
        return NULL;
    }

    p = keep->block[best];
    block_unpoison(p, keep->size[best]);
    keep->bytes -= keep->size[best];
    keep->count--;
    keep->block[best] = keep->block[keep->count];
    keep->size[best] = keep->size[keep->count];
    return p;
}


static MRB_ALLOC_NOINLINE void *
block_alloc(mrb_state *mrb, size_t size)
{
    mrb_alloc_keep  *keep = keep_of(mrb);
    mrb_run_rec     *run = budget_run(mrb);
    void            *p = NULL;

    if (run != NULL && !budget_allows(mrb, run, size)) {
        return NULL;
    }

    if (size >= MRB_ALLOC_KEEP_MIN && keep->count > 0) {
        p = keep_take(keep, size);
    }

    if (p == NULL) {
        p = malloc(size);
    }

    if (run != NULL && p != NULL) {
        run->memory_used += malloc_usable_size(p);
    }

    return p;
}


/* Returns NULL, for interp_allocf's tail call. */
static MRB_ALLOC_NOINLINE void *
block_free(mrb_state *mrb, void *p)
{
    mrb_alloc_keep  *keep = keep_of(mrb);
    mrb_run_rec     *run;
    size_t           size;

    if (p == NULL) {
        return NULL;
    }

    size = malloc_usable_size(p);

    run = budget_run(mrb);
    if (run != NULL) {
        budget_give_back(run, size);
    }

    if (keep_has_room(keep, size)) {
        keep_put(keep, p, size);
    } else {
        free(p);
    }

    return NULL;
}


/*
 * The code generator shrinks its 1 kB arrays to their final size: copied
 * to a small block instead, the large one is kept for the next compile
 * rather than split.
 */
static void *
block_shrink(mrb_alloc_keep *keep, void *p, size_t old, size_t size)
{
    void  *q;

    if (size < MRB_ALLOC_KEEP_MIN && keep_has_room(keep, old)) {
        q = malloc(size);
        if (q == NULL) {
            return NULL;
        }
        memcpy(q, p, size);
        keep_put(keep, p, old);
        return q;
    }

    return realloc(p, size);
}


/*
 * A block that fails to grow stays as it was, in the budget too.  The GC
 * arena grows past the budget: mruby raises the arena's capacity before
 * it asks, and a refusal would leave the next objects written past the
 * arena's end (docs/security.md).
 */
static MRB_ALLOC_NOINLINE void *
block_realloc(mrb_state *mrb, void *p, size_t size)
{
    mrb_run_rec  *run = budget_run(mrb);
    size_t        old = 0;
    void         *q;

    if (run != NULL || size < MRB_ALLOC_KEEP_MIN) {
        old = malloc_usable_size(p);
    }

    if (run != NULL && size > old && p != (void *) mrb->gc.arena
        && !budget_allows(mrb, run, size - old))
    {
        return NULL;
    }

    q = block_shrink(keep_of(mrb), p, old, size);

    if (run != NULL && q != NULL) {
        budget_give_back(run, old);
        run->memory_used += malloc_usable_size(q);
    }

    return q;
}


static MRB_ALLOC_NOINLINE void *
state_alloc(size_t size)
{
    mrb_alloc_head  *head;

    head = malloc(offsetof(mrb_alloc_head, state) + size);
    if (head == NULL) {
        return NULL;
    }

    memset(&head->keep, 0, sizeof(mrb_alloc_keep));
    return head->state;
}


/* mrb_close() is done with mrb: frees it and the blocks kept.  NULL. */
static MRB_ALLOC_NOINLINE void *
state_free(mrb_state *mrb)
{
    mrb_alloc_keep  *keep = keep_of(mrb);
    unsigned         i;

    for (i = 0; i < keep->count; i++) {
        free(keep->block[i]);
    }

    free(head_of(mrb));
    return NULL;
}


/*
 * What mruby calls for every allocation: kept to a dispatch with no frame of
 * its own, each case a tail call.
 */
static void *
interp_allocf(mrb_state *mrb, void *p, size_t size, void *ud)
{
    if (size == 0) {
        return p == mrb ? state_free(mrb) : block_free(mrb, p);
    }

    if (p == NULL) {
        return mrb != NULL ? block_alloc(mrb, size) : state_alloc(size);
    }

    return block_realloc(mrb, p, size);
}


mrb_state *
mrb_alloc_open(void)
{
    return mrb_open_allocf(interp_allocf, NULL);
}


unsigned
mrb_alloc_kept(mrb_state *mrb, size_t *bytes)
{
    mrb_alloc_keep  *keep = keep_of(mrb);

    *bytes = keep->bytes;
    return keep->count;
}

#else

/*
 * mruby 4.0 asks one function for every block of every state,
 * mrb_basic_alloc_func(), which a program may define in place of the
 * library's (an archive member of its own, allocf.o, then not linked; the
 * modules' version scripts keep ours local, so that the modules' copies
 * of mruby never bind to each other's).  It is given no state: the state
 * whose run is in progress on this thread is kept per thread, set where a
 * run starts, ends or switches (mrb_interp_set_run).  No block is kept:
 * with no state to keep them in, kept blocks would outlive interpreters.
 */

/* initial-exec: a load at a fixed offset from the thread pointer, where a
 * dlopen'd module's default model calls __tls_get_addr (mrb_coro_switch.h
 * says the same of mrb_coro_tls) */
static __thread mrb_state  *alloc_running
    __attribute__((tls_model("initial-exec")));


void
mrb_alloc_set_running(mrb_state *mrb)
{
    alloc_running = mrb;
}


/*
 * A block of a run with a budget: counted at its usable size, refused
 * past the budget (a block that fails to grow stays as it was, in the
 * budget too), the GC arena's growth excepted, as in 3.x's block_realloc.
 */
static MRB_ALLOC_NOINLINE void *
budget_realloc(mrb_state *mrb, mrb_run_rec *run, void *p, size_t size)
{
    size_t  old = p != NULL ? malloc_usable_size(p) : 0;
    void   *q;

    if (size == 0) {
        budget_give_back(run, old);
        free(p);
        return NULL;
    }

    if (size > old && p != (void *) mrb->gc.arena
        && !budget_allows(mrb, run, size - old))
    {
        return NULL;
    }

    q = realloc(p, size);
    if (q != NULL) {
        budget_give_back(run, old);
        run->memory_used += malloc_usable_size(q);
    }

    return q;
}


void *
mrb_basic_alloc_func(void *p, size_t size)
{
    mrb_state    *mrb = alloc_running;
    mrb_run_rec  *run = mrb != NULL ? budget_run(mrb) : NULL;

    if (run != NULL) {
        return budget_realloc(mrb, run, p, size);
    }

    if (size == 0) {
        free(p);
        return NULL;
    }

    return realloc(p, size);
}


mrb_state *
mrb_alloc_open(void)
{
    mrb_state  *mrb = mrb_open();

    /* 4.0 may return a state whose initialisation failed */
    if (mrb != NULL && mrb->exc != NULL) {
        mrb_close(mrb);
        return NULL;
    }

    return mrb;
}


unsigned
mrb_alloc_kept(mrb_state *mrb, size_t *bytes)
{
    *bytes = 0;
    return 0;
}

#endif
