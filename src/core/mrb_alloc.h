/*
 * The interpreter's allocator: malloc, realloc and free, except that a few
 * freed large blocks are kept for the next requests of their size.
 *
 * Compiling a script (every run under `mrubyCodeCache never`) takes and
 * frees the same large blocks each time: the parser's and the code
 * generator's 16 kB pool pages and their 0.5-2 kB arrays.  From glibc, each
 * large malloc() consolidates the fast bins and searches the large bins,
 * each free() merges chunks again, and the arena fragments around them:
 * malloc was 8,900 of the 22,200 instructions of a one-line compile
 * (callgrind, apache2 -X prefork, hello world compiled every request,
 * 2026-11-22).  Kept
 * here, they are taken back in a few instructions.
 *
 * What is kept is bounded (at most MRB_ALLOC_KEEP_BLOCKS blocks and
 * MRB_ALLOC_KEEP_BYTES bytes) and freed with the interpreter.  An
 * interpreter is used by one thread at a time, so nothing is locked.  Under
 * AddressSanitizer a kept block is poisoned: a use after mruby freed it is
 * still reported until the block is handed out again.
 *
 * mruby 4.0 has no allocator of a state's own: every state allocates
 * through mrb_basic_alloc_func(), which mrb_alloc.c defines.  There the
 * run whose budget counts a block is the one in progress on the thread
 * (mrb_alloc_set_running), and no block is kept.
 */

#ifndef MRB_ALLOC_H
#define MRB_ALLOC_H

#include <stddef.h>
#include <mruby.h>
#include "mrb_mruby_version.h"

/* What is kept: blocks of 512 bytes to 32 kB, at most 8 and 64 kB. */
#define MRB_ALLOC_KEEP_MIN     512
#define MRB_ALLOC_KEEP_MAX     (32 * 1024)
#define MRB_ALLOC_KEEP_BLOCKS  8
#define MRB_ALLOC_KEEP_BYTES   (64 * 1024)

/*
 * A run's memory budget (mrb_run.memory_limit) unless configured: what a
 * run may allocate and keep through this allocator, counted at the blocks'
 * usable sizes.  A hello-world run keeps none; the default is eight times
 * the largest body the servers hand a script whole unless configured (the
 * output filter's 16 MB), so that a script may copy and convert it, and
 * still a small part of a machine that runs a few dozen workers.
 */
#define MRB_RUN_MEMORY_DEFAULT  ((size_t) 128 * 1024 * 1024)

/*
 * A startup script's budget (mruby_init*, mrubyPostConfig*,
 * mrubyChildInit*, nginx's server-context code), its own: such a script
 * runs once, under the administrator's eyes, and may build the tables
 * every later request shares; the budget only stops one that loops.
 */
#define MRB_RUN_STARTUP_MEMORY  ((size_t) 1024 * 1024 * 1024)

/* mrb_open() with this allocator; NULL when out of memory. */
mrb_state *mrb_alloc_open(void);

/* How many blocks mrb's allocator keeps now, and their bytes. */
unsigned mrb_alloc_kept(mrb_state *mrb, size_t *bytes);

/*
 * mrb is the state whose run is in progress on this thread, or NULL when
 * none is (mrb_interp_set_run tells it): mruby 4.0's allocator, given no
 * state, counts a block against that run's budget.  Nothing on 3.x, whose
 * allocator is given the state.
 */
#ifdef MRB_STATE_ALLOCF
static inline void
mrb_alloc_set_running(mrb_state *mrb)
{
}
#else
void mrb_alloc_set_running(mrb_state *mrb);
#endif

#endif /* MRB_ALLOC_H */
