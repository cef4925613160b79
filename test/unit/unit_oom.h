/*
 * Running out of memory on purpose: an interpreter's allocator that fails
 * from a chosen allocation on, so that mruby raises NoMemoryError at each
 * place in turn, and the counts that show what such a raise left behind.
 */

#ifndef UNIT_OOM_H
#define UNIT_OOM_H

#include <stddef.h>
#include <mruby.h>

/* After n more allocations every one of mrb fails (frees do not) until
 * unit_oom_end; one interpreter at a time. */
void unit_oom_after(mrb_state *mrb, long n);
void unit_oom_end(mrb_state *mrb);

/* Only the allocation after n more fails (and mruby's second try of it),
 * so that code that goes on after it handled the failure can. */
void unit_oom_once(mrb_state *mrb, long n);

/* Stops mrb's GC and takes every free object slot, so that the next object
 * mrb makes needs a new heap page from the allocator (code that would find
 * a free slot allocates nothing, and cannot fail); unit_oom_end starts the
 * GC again. */
void unit_oom_heap_full(mrb_state *mrb);

/* Whether an allocation failed since unit_oom_after. */
int unit_oom_failed(void);

/* The allocations mrb asked for since unit_oom_after, failed or not. */
long unit_oom_asked(void);

/* The process's open file descriptors. */
int unit_open_fds(void);

/* Bytes of the process's heap in use (AddressSanitizer's count under it). */
size_t unit_heap_bytes(void);

#endif /* UNIT_OOM_H */
