/*
 * The helpers of unit_oom.h.
 */

#include <dirent.h>
#include <malloc.h>
#include <stdlib.h>

#include "mrb_mruby_version.h"
#include "unit_oom.h"

#if defined(__SANITIZE_ADDRESS__)
/* AddressSanitizer's (gcc installs no header for it) */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

static long        oom_left;     /* allocations before the failing ones */
static long        oom_count;    /* failing ones from there; -1: all */
static int         oom_failed;
static long        oom_asked;
static int         oom_armed;


/* Whether this allocation (size != 0) is one to fail. */
static int
oom_fails(size_t size)
{
    if (!oom_armed || size == 0) {
        return 0;
    }

    oom_asked++;
    if (oom_left > 0) {
        oom_left--;
        return 0;
    }

    if (oom_count != 0) {
        if (oom_count > 0) {
            oom_count--;
        }
        oom_failed = 1;
        return 1;
    }

    return 0;
}


#ifdef MRB_STATE_ALLOCF

static mrb_allocf  oom_allocf;
static void       *oom_ud;


static void *
oom_failing_allocf(mrb_state *mrb, void *p, size_t size, void *ud)
{
    if (oom_fails(size)) {
        return NULL;
    }
    return oom_allocf(mrb, p, size, oom_ud);
}


static void
oom_arm(mrb_state *mrb)
{
    oom_allocf = mrb->allocf;
    oom_ud = mrb->allocf_ud;
    mrb->allocf = oom_failing_allocf;
}


static void
oom_disarm(mrb_state *mrb)
{
    if (mrb->allocf == oom_failing_allocf) {
        mrb->allocf = oom_allocf;
        mrb->allocf_ud = oom_ud;
    }
}

#else

/*
 * mruby 4.0 allocates through mrb_basic_alloc_func() alone, which
 * mrb_alloc.c defines: the test program's link wraps it (the Makefile's
 * UNIT_WRAP), so that mruby's calls come here first, and fail while
 * armed, for whichever interpreter asks.
 */
void *__real_mrb_basic_alloc_func(void *p, size_t size);

void *
__wrap_mrb_basic_alloc_func(void *p, size_t size)
{
    return oom_fails(size) ? NULL : __real_mrb_basic_alloc_func(p, size);
}


static void
oom_arm(mrb_state *mrb)
{
}


static void
oom_disarm(mrb_state *mrb)
{
}

#endif


void
unit_oom_after(mrb_state *mrb, long n)
{
    oom_left = n;
    oom_count = -1;
    oom_failed = 0;
    oom_asked = 0;
    oom_armed = 1;
    oom_arm(mrb);
}


/* mruby 3.1's mrb_realloc asks again after a full GC before it raises */
void
unit_oom_once(mrb_state *mrb, long n)
{
    unit_oom_after(mrb, n);
    oom_count = 2;
}


void
unit_oom_end(mrb_state *mrb)
{
    oom_armed = 0;
    oom_disarm(mrb);
    mrb->gc.disabled = FALSE;
}


/* mruby 3.1: an object is taken from the first page on free_heaps, and a
 * page leaves that list when its last free slot is taken */
void
unit_oom_heap_full(mrb_state *mrb)
{
    int  ai = mrb_gc_arena_save(mrb);

    mrb->gc.disabled = TRUE;
    while (mrb->gc.free_heaps != NULL) {
        mrb_obj_alloc(mrb, MRB_TT_OBJECT, mrb->object_class);
        mrb_gc_arena_restore(mrb, ai);
    }
}


int
unit_oom_failed(void)
{
    return oom_failed;
}


long
unit_oom_asked(void)
{
    return oom_asked;
}


int
unit_open_fds(void)
{
    DIR  *d = opendir("/proc/self/fd");
    int   n = 0;

    if (d == NULL) {
        return -1;
    }
    while (readdir(d) != NULL) {
        n++;
    }
    closedir(d);

    /* ".", ".." and d's own */
    return n - 3;
}


size_t
unit_heap_bytes(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return __sanitizer_get_current_allocated_bytes();
#else
    return mallinfo2().uordblks;
#endif
}
