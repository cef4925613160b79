/*
 * Machine-stack coroutines (the Fiber paper): each coroutine runs on a
 * stack of its own, taken from a pool, and a switch saves and loads a few
 * registers (on x86-64 our own inline switch; elsewhere boost.context's
 * jump_fcontext: mrb_coro_switch.h has their costs) instead of copying
 * stacks or calling swapcontext (a sigprocmask syscall per switch).
 *
 * A stack is one mmap: the usable stack, and below it one PROT_NONE guard
 * page; pages a coroutine never touched cost no memory.  A finished
 * coroutine's stack goes on the pool's free list, last in first out, and
 * starting one is a list pop and three stores.
 *
 * How many stacks stay: every finished one, until the owner calls
 * mrb_coro_pool_trim (about once a second), which unmaps those beyond
 * `keep` that no coroutine took since its previous call.  So a worker
 * whose waiting runs swing between few and many (1,000 sleepers answered
 * and replaced in waves) reuses its stacks without a system call, and
 * after a burst the stacks beyond `keep` go within two trims.  Unmapped,
 * not madvise()d: a trim happens once a second at most, so only the next
 * burst maps them again, and unmapping also gives back the address space
 * and the two kernel mappings each stack costs (vm.max_map_count).
 *
 * Overflow: code that can recurse (the Ruby VM entered again from C, the
 * JSON parser, a pattern's compiler) asks mrb_stack_left() first and
 * fails cleanly while there is room (mrb_stack.h).  The
 * guard page is the last line: a fault on it ends the process with one line
 * on stderr naming the stack size (the server's error log, for Apache and
 * nginx workers), and the server starts another.
 *
 * Server neutral and mruby-free.  Not thread-safe: a pool and its
 * coroutines belong to one thread at a time.
 */

#ifndef MRB_CORO_H
#define MRB_CORO_H

#include <stddef.h>

typedef struct mrb_coro_s       mrb_coro;
typedef struct mrb_coro_pool_s  mrb_coro_pool;

/* What a coroutine runs; when it returns, the coroutine is finished. */
typedef void (*mrb_coro_fn)(mrb_coro *coro, void *arg);

#define MRB_CORO_STACK_DEFAULT  (256 * 1024)
#define MRB_CORO_STACK_MIN      (64 * 1024)
#define MRB_CORO_KEEP_DEFAULT   64


/*
 * A pool of stacks of stack_size usable bytes (rounded up to pages; at
 * least MRB_CORO_STACK_MIN), keeping keep finished ones for reuse through
 * trims, and more between them (0: none, each stack is unmapped when its
 * coroutine finishes).  NULL when out of memory.  The caller frees it with mrb_coro_pool_free
 * once every coroutine taken from it has finished.
 */
mrb_coro_pool *mrb_coro_pool_new(size_t stack_size, unsigned keep);
void mrb_coro_pool_free(mrb_coro_pool *pool);

size_t mrb_coro_pool_stack_size(const mrb_coro_pool *pool);

/* Coroutines started and not finished; finished stacks kept for reuse. */
unsigned mrb_coro_pool_live(const mrb_coro_pool *pool);
unsigned mrb_coro_pool_idle(const mrb_coro_pool *pool);

/*
 * Unmaps the finished stacks beyond keep that no coroutine took since the
 * previous trim (or since the pool was made); returns how many.
 */
unsigned mrb_coro_pool_trim(mrb_coro_pool *pool);

/*
 * A coroutine that will run fn(coro, arg) on a stack of pool, from its
 * first mrb_coro_resume.  NULL when no stack can be mapped.
 */
mrb_coro *mrb_coro_new(mrb_coro_pool *pool, mrb_coro_fn fn, void *arg);

/*
 * Drops a suspended coroutine without running it further: its stack goes
 * back to the pool.  Whatever its frames held is not released: the caller
 * unwinds it first (resume it and let fn return) when that matters.
 */
void mrb_coro_drop(mrb_coro *coro);

/*
 * mrb_coro_resume(coro): runs coro until it suspends (returns 1) or fn
 * returns (returns 0: the coroutine is finished and its stack is back in
 * the pool; coro is gone).
 * mrb_coro_suspend(coro): from inside coro, back to whoever resumed it,
 * until the next resume.
 * mrb_coro_current(): the coroutine running on this thread, or NULL.
 * mrb_stack_left(): bytes of machine stack left to the caller, above the
 * guard page of the running coroutine or above the end of the thread's
 * own stack (mrb_stack.h says who asks).
 * Inline, with the switch itself:
 */
#include "mrb_coro_switch.h"

#endif /* MRB_CORO_H */
