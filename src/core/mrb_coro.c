/*
 * Machine-stack coroutines: the stack pool, a coroutine's first and last
 * switch, and the guard page handler (the switch itself is inline, in
 * mrb_coro_switch.h).  See mrb_coro.h for why it works this way.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE     /* pthread_getattr_np */
#endif

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mrb_coro.h"

struct mrb_coro_pool_s {
    size_t           stack_size; /* usable, page multiple */
    size_t           map_size;   /* with the guard page */
    size_t           page;
    unsigned         keep;
    unsigned         live;
    unsigned         idle;
    unsigned         idle_low;   /* the fewest idle since the last trim */
    mrb_coro        *free;       /* last finished first */
};

/*
 * The coroutine in the struct at the top of its own mapping: one mmap per
 * stack, nothing else to allocate.
 */
#define CORO_HEADER  ((sizeof(mrb_coro) + 63) & ~(size_t) 63)

#define CORO_ALTSTACK_SIZE  (64 * 1024)

/* the running coroutine and the alternate stack, per thread
 * (mrb_coro_switch.h) */
__thread mrb_coro_thread  mrb_coro_tls;

static pthread_once_t      coro_handler_once = PTHREAD_ONCE_INIT;
static struct sigaction    coro_old_segv;


mrb_coro_pool *
mrb_coro_pool_new(size_t stack_size, unsigned keep)
{
    mrb_coro_pool  *pool;
    size_t          page = (size_t) sysconf(_SC_PAGESIZE);

    pool = calloc(1, sizeof(mrb_coro_pool));
    if (pool == NULL) {
        return NULL;
    }

    if (stack_size < MRB_CORO_STACK_MIN) {
        stack_size = MRB_CORO_STACK_MIN;
    }

    pool->page = page;
    pool->stack_size = (stack_size + page - 1) & ~(page - 1);
    pool->map_size = pool->stack_size + page;
    pool->keep = keep;
    return pool;
}


static void
coro_unmap(mrb_coro_pool *pool, mrb_coro *coro)
{
    munmap(coro->map, pool->map_size);
}


void
mrb_coro_pool_free(mrb_coro_pool *pool)
{
    mrb_coro  *coro, *next;

    if (pool == NULL) {
        return;
    }

    for (coro = pool->free; coro != NULL; coro = next) {
        next = coro->next_idle;
        coro_unmap(pool, coro);
    }

    free(pool);
}


size_t
mrb_coro_pool_stack_size(const mrb_coro_pool *pool)
{
    return pool->stack_size;
}


unsigned
mrb_coro_pool_live(const mrb_coro_pool *pool)
{
    return pool->live;
}


unsigned
mrb_coro_pool_idle(const mrb_coro_pool *pool)
{
    return pool->idle;
}


/* Appends the decimal digits of n to p; async-signal-safe. */
static char *
coro_put_uint(char *p, size_t n)
{
    char   digits[24];
    int    i = 0;

    do {
        digits[i++] = (char) ('0' + n % 10);
        n /= 10;
    } while (n != 0);

    while (i > 0) {
        *p++ = digits[--i];
    }

    return p;
}


static char *
coro_put_str(char *p, const char *s)
{
    size_t  len = strlen(s);

    memcpy(p, s, len);
    return p + len;
}


/*
 * SIGSEGV on the alternate stack.  A fault on the guard page of the
 * running coroutine is a stack overflow that the checks before each
 * re-entry did not prevent: say so once, then let the fault happen again
 * with the default action (the process dies of SIGSEGV and the server
 * replaces it).  Any other fault goes to the handler that was there before.
 */
static void
coro_segv(int sig, siginfo_t *si, void *uc)
{
    mrb_coro  *coro = mrb_coro_tls.running;
    char      *addr = si->si_addr;
    char       line[256], *p;

    if (coro != NULL && addr >= coro->map - coro->pool->page
        && addr < coro->limit)
    {
        p = coro_put_str(line, "mruby: stack overflow in a script's "
                               "coroutine (machine stack of ");
        p = coro_put_uint(p, coro->pool->stack_size / 1024);
        p = coro_put_str(p, " KB, guard page hit): the process ends; "
                            "a larger stack size or less recursion "
                            "avoids it\n");
        (void) !write(STDERR_FILENO, line, (size_t) (p - line));

        signal(SIGSEGV, SIG_DFL);
        return;
    }

    if (coro_old_segv.sa_flags & SA_SIGINFO) {
        if (coro_old_segv.sa_sigaction != NULL) {
            coro_old_segv.sa_sigaction(sig, si, uc);
            return;
        }
    } else if (coro_old_segv.sa_handler != SIG_DFL
               && coro_old_segv.sa_handler != SIG_IGN)
    {
        coro_old_segv.sa_handler(sig);
        return;
    }

    /* a fault happens again, with the default action; a sent signal is
     * sent again */
    signal(SIGSEGV, SIG_DFL);
    if (si->si_code <= 0) {
        raise(sig);
    }
}


static void
coro_handler_install(void)
{
    struct sigaction  sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = coro_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &coro_old_segv);
}


/*
 * A fault on a guard page leaves no stack to run the handler on: each
 * thread that runs coroutines gets an alternate signal stack, once.
 */
void
mrb_coro_thread_init(void)
{
    stack_t  ss;

    pthread_once(&coro_handler_once, coro_handler_install);

    ss.ss_sp = mmap(NULL, CORO_ALTSTACK_SIZE, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ss.ss_sp == MAP_FAILED) {
        return;  /* a guard page hit then dies without the line */
    }

    ss.ss_size = CORO_ALTSTACK_SIZE;
    ss.ss_flags = 0;
    sigaltstack(&ss, NULL);
    mrb_coro_tls.altstack_ready = 1;
}


/*
 * The lowest usable address of the thread's own stack, asked of glibc once
 * per thread (for the main thread it reads /proc/self/maps and the stack
 * rlimit).  Where glibc cannot say, (char *) 1: every check then passes,
 * as before there was one, and the system's guard is the only one.
 */
char *
mrb_coro_thread_limit(void)
{
    pthread_attr_t  attr;
    void           *addr;
    size_t          size;
    char           *limit = (char *) 1;

    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
            limit = addr;
        }
        pthread_attr_destroy(&attr);
    }

    mrb_coro_tls.thread_limit = limit;
    return limit;
}


/*
 * The first switch into a coroutine lands here, on its own stack; the
 * resumer set mrb_coro_tls.running to it.  It never returns: its last switch
 * leaves the stack for good.
 */
static void __attribute__((noreturn))
coro_main(void)
{
    mrb_coro  *coro = mrb_coro_tls.running;

    mrb_coro_asan_finish(NULL, &coro->caller_bottom, &coro->caller_size);

    coro->fn(coro, coro->arg);
    coro->finished = 1;

    mrb_coro_asan_start(NULL, coro->caller_bottom, coro->caller_size);
    mrb_coro_jump(&coro->ctx, coro->caller);
    abort();  /* a finished coroutine is never resumed */
}


#if defined(MRB_CORO_OWN_SWITCH)

/*
 * A context for mrb_coro_jump that enters coro_main: below the top of the
 * stack, what mrb_coro_jump pops (the address to go on at and a frame pointer
 * of 0, the end of the frame chain), above them a return address of 0:
 * coro_main starts with the stack aligned as after a call (8 below a
 * multiple of 16).
 */
static void *
coro_make(char *top)
{
    void  **sp = (void **) ((uintptr_t) top & ~(uintptr_t) 15);

    sp -= 3;
    sp[0] = (void *) coro_main;
    sp[1] = NULL;
    sp[2] = NULL;
    return sp;
}

#else

static void
coro_boost_main(mrb_coro_transfer t)
{
    *(void **) t.data = t.fctx;
    coro_main();
}


static void *
coro_make(char *top)
{
    mrb_coro  *coro = (mrb_coro *) top;

    return make_fcontext(top, (size_t) (top - coro->limit), coro_boost_main);
}

#endif


mrb_coro *
mrb_coro_new(mrb_coro_pool *pool, mrb_coro_fn fn, void *arg)
{
    mrb_coro  *coro = pool->free;
    char      *map;

    if (coro != NULL) {
        pool->free = coro->next_idle;
        pool->idle--;
        if (pool->idle < pool->idle_low) {
            pool->idle_low = pool->idle;
        }

    } else {
        map = mmap(NULL, pool->map_size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                   -1, 0);
        if (map == MAP_FAILED) {
            return NULL;
        }

        if (mprotect(map, pool->page, PROT_NONE) != 0) {
            munmap(map, pool->map_size);
            return NULL;
        }

        coro = (mrb_coro *) (map + pool->map_size - CORO_HEADER);
        coro->map = map;
        coro->limit = map + pool->page;
        coro->pool = pool;
    }

    coro->fn = fn;
    coro->arg = arg;
    coro->finished = 0;
    coro->ctx = coro_make((char *) coro);
    pool->live++;
    return coro;
}


void
mrb_coro_release(mrb_coro *coro)
{
    mrb_coro_pool  *pool = coro->pool;

    pool->live--;

    if (pool->keep == 0) {
        coro_unmap(pool, coro);
        return;
    }

    coro->next_idle = pool->free;
    pool->free = coro;
    pool->idle++;
}


void
mrb_coro_drop(mrb_coro *coro)
{
    mrb_coro_release(coro);
}


/*
 * The free list is last-in first-out, so the idle_low stacks at its far
 * end are those no coroutine took since the last trim: they go, as long
 * as keep stay.
 */
unsigned
mrb_coro_pool_trim(mrb_coro_pool *pool)
{
    mrb_coro  **link, *coro, *next;
    unsigned    spare, stay, i;

    spare = pool->idle > pool->keep ? pool->idle - pool->keep : 0;
    if (spare > pool->idle_low) {
        spare = pool->idle_low;
    }
    stay = pool->idle - spare;

    link = &pool->free;
    for (i = 0; i < stay; i++) {
        link = &(*link)->next_idle;
    }

    for (coro = *link; coro != NULL; coro = next) {
        next = coro->next_idle;
        coro_unmap(pool, coro);
    }

    *link = NULL;
    pool->idle = stay;
    pool->idle_low = stay;
    return spare;
}
