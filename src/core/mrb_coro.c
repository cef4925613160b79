/*
 * Machine-stack coroutines: the stack pool, the switch, and the guard page
 * handler.  See mrb_coro.h for why it works this way.
 */

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mrb_coro.h"

/*
 * AddressSanitizer must be told of each switch, or it takes the other
 * stack for an overflow of this one (a longjmp on a coroutine, the
 * exceptions of mruby, is where it looks).
 */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define coro_asan_start(save, bottom, size)                                   \
    __sanitizer_start_switch_fiber(save, bottom, size)
#define coro_asan_finish(save, bottom, size)                                  \
    __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define coro_asan_start(save, bottom, size)
#define coro_asan_finish(save, bottom, size)
#endif

/*
 * boost.context's switch (Debian libboost-context-dev, linked with
 * -lboost_context), declared here with its fcontext ABI (boost 1.74
 * <boost/context/detail/fcontext.hpp>, whose header is C++ only):
 * jump_fcontext saves the callee-saved registers on the current stack,
 * switches to `to` and returns there the context it came from and a
 * pointer; make_fcontext prepares a context on a stack whose top is sp.
 */
typedef void  *coro_fcontext;

typedef struct {
    coro_fcontext   fctx;
    void           *data;
} coro_transfer;

extern coro_transfer jump_fcontext(coro_fcontext const to, void *vp);
extern coro_fcontext make_fcontext(void *sp, size_t size,
    void (*fn)(coro_transfer));


struct mrb_coro_s {
    coro_fcontext    ctx;        /* where the coroutine goes on */
    coro_fcontext    caller;     /* where it returns to */
    mrb_coro_pool   *pool;
    mrb_coro_fn      fn;
    void            *arg;
    char            *map;        /* the mapping: guard page, then stack */
    char            *limit;      /* lowest usable address (guard's end) */
    mrb_coro        *outer;      /* the coroutine that resumed this one */
    mrb_coro        *next_idle;
    unsigned         finished:1;
#if defined(__SANITIZE_ADDRESS__)
    const void      *caller_bottom;  /* the resumer's stack, for ASan */
    size_t           caller_size;
#endif
};

struct mrb_coro_pool_s {
    size_t           stack_size; /* usable, page multiple */
    size_t           map_size;   /* with the guard page */
    size_t           page;
    unsigned         keep;
    unsigned         live;
    unsigned         idle;
    mrb_coro        *free;
};

/*
 * The coroutine in the struct at the top of its own mapping: one mmap per
 * stack, nothing else to allocate.
 */
#define CORO_HEADER  ((sizeof(mrb_coro) + 63) & ~(size_t) 63)

#define CORO_ALTSTACK_SIZE  (64 * 1024)

static __thread mrb_coro  *coro_running;
static __thread int        coro_altstack_ready;

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
    mrb_coro  *coro = coro_running;
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
static void
coro_altstack_setup(void)
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
    coro_altstack_ready = 1;
}


/* The first switch into a coroutine lands here, on its own stack. */
static void
coro_main(coro_transfer t)
{
    mrb_coro  *coro = t.data;

    coro_asan_finish(NULL, &coro->caller_bottom, &coro->caller_size);

    coro->caller = t.fctx;
    coro->fn(coro, coro->arg);
    coro->finished = 1;

    coro_asan_start(NULL, coro->caller_bottom, coro->caller_size);
    jump_fcontext(coro->caller, NULL);
    abort();  /* a finished coroutine is never resumed */
}


mrb_coro *
mrb_coro_new(mrb_coro_pool *pool, mrb_coro_fn fn, void *arg)
{
    mrb_coro  *coro = pool->free;
    char      *map;

    if (coro != NULL) {
        pool->free = coro->next_idle;
        pool->idle--;

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
    coro->ctx = make_fcontext((char *) coro,
                              (size_t) ((char *) coro - coro->limit),
                              coro_main);
    pool->live++;
    return coro;
}


static void
coro_release(mrb_coro *coro)
{
    mrb_coro_pool  *pool = coro->pool;

    pool->live--;

    if (pool->idle >= pool->keep) {
        coro_unmap(pool, coro);
        return;
    }

    coro->next_idle = pool->free;
    pool->free = coro;
    pool->idle++;
}


int
mrb_coro_resume(mrb_coro *coro)
{
    coro_transfer  t;
#if defined(__SANITIZE_ADDRESS__)
    void          *fake;
#endif

    if (!coro_altstack_ready) {
        coro_altstack_setup();
    }

    coro->outer = coro_running;
    coro_running = coro;

    coro_asan_start(&fake, coro->limit,
                    (size_t) ((char *) coro - coro->limit));
    t = jump_fcontext(coro->ctx, coro);
    coro_asan_finish(fake, NULL, NULL);

    coro_running = coro->outer;

    if (coro->finished) {
        coro_release(coro);
        return 0;
    }

    coro->ctx = t.fctx;
    return 1;
}


void
mrb_coro_suspend(mrb_coro *coro)
{
    coro_transfer  t;
#if defined(__SANITIZE_ADDRESS__)
    void          *fake;
#endif

    coro_asan_start(&fake, coro->caller_bottom, coro->caller_size);
    t = jump_fcontext(coro->caller, coro);
    coro_asan_finish(fake, &coro->caller_bottom, &coro->caller_size);
    coro->caller = t.fctx;
}


void
mrb_coro_drop(mrb_coro *coro)
{
    coro_release(coro);
}


mrb_coro *
mrb_coro_current(void)
{
    return coro_running;
}


size_t
mrb_coro_stack_left(void)
{
    mrb_coro  *coro = coro_running;
    char      *sp = __builtin_frame_address(0);

    if (coro == NULL) {
        return (size_t) -1;
    }

    return sp > coro->limit ? (size_t) (sp - coro->limit) : 0;
}
