/*
 * The switch between coroutines (mrb_coro.h), inline: a resume or suspend
 * compiled into its caller costs a few instructions around the register
 * switch and no call and return of its own.  A return after a switch goes
 * back along the other side's calls, which the CPU's return predictor
 * cannot know, and each such miss costs as much as the switch itself
 * (2.2 ns one way inlined, 8.7 ns through out-of-line functions, measured
 * side by side; boost's jump_fcontext 5.4 ns: build/test_core --bench
 * bench_coro_switch, fastest of 30 runs, 2026-11-24).
 *
 * Included by mrb_coro.h; nothing here is for other files to use
 * directly.
 */

#ifndef MRB_CORO_SWITCH_H
#define MRB_CORO_SWITCH_H

#include <stddef.h>

/*
 * AddressSanitizer must be told of each switch, or it takes the other
 * stack for an overflow of this one (a longjmp on a coroutine, the
 * exceptions of mruby, is where it looks).  gcc says it is on with
 * __SANITIZE_ADDRESS__, clang (the fuzz targets') with __has_feature.
 */
#if defined(__SANITIZE_ADDRESS__)
#define MRB_CORO_ASAN  1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MRB_CORO_ASAN  1
#endif
#endif

#if defined(MRB_CORO_ASAN)
#include <sanitizer/common_interface_defs.h>
#define mrb_coro_asan_start(save, bottom, size)                               \
    __sanitizer_start_switch_fiber(save, bottom, size)
#define mrb_coro_asan_finish(save, bottom, size)                              \
    __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define mrb_coro_asan_start(save, bottom, size)
#define mrb_coro_asan_finish(save, bottom, size)
#endif

/*
 * mrb_coro_jump(save, to) stores where the running context goes on in
 * *save and continues the context `to` (a saved stack pointer), as if a
 * call into it returned.
 *
 * x86-64: our own, inlined where it is used.  It steps over the red zone
 * (the 128 bytes below the stack pointer that a function which calls
 * nothing may use, as the compiler sees this one), pushes the frame
 * pointer and the address to come back to, swaps the stack pointer, pops
 * the other side's two and jumps there; every other register is declared
 * clobbered, so the compiler saves in the function's prologue only the
 * callee-saved registers the function uses, as for a call.  No call and
 * no return: each jump always lands in the same place, which the branch
 * predictor learns.  Unlike boost's, it does not save and reload the SSE
 * and x87 control words (MXCSR's rounding mode, ...): nothing in a run
 * changes them (mruby has no binding for fesetround), and reloading them
 * is a third of boost's switch.
 *
 * Elsewhere, or built with -DMRB_CORO_BOOST (how the unit tests check that
 * path on x86-64): boost.context's jump_fcontext (Debian libboost-context-dev,
 * linked with -lboost_context), declared here with its fcontext ABI
 * (boost 1.74 <boost/context/detail/fcontext.hpp>, whose header is C++
 * only): it saves the callee-saved registers on the current stack,
 * switches to `to` and returns there the context it came from and the
 * pointer passed; the side that lands stores the former through the
 * latter.
 */
#if defined(__x86_64__) && !defined(MRB_CORO_BOOST)

#define MRB_CORO_OWN_SWITCH  1

static inline __attribute__((always_inline)) void
mrb_coro_jump(void **save, void *to)
{
    __asm__ __volatile__(
        "leaq -128(%%rsp), %%rsp\n\t"
        "leaq 1f(%%rip), %%rax\n\t"
        "pushq %%rbp\n\t"
        "pushq %%rax\n\t"
        "movq %%rsp, (%0)\n\t"
        "movq %1, %%rsp\n\t"
        "popq %%rax\n\t"
        "popq %%rbp\n\t"
        "jmpq *%%rax\n"
        "1:\n\t"
        "leaq 128(%%rsp), %%rsp"
        : "+D" (save), "+S" (to)
        :
        : "rax", "rbx", "rcx", "rdx", "r8", "r9", "r10", "r11", "r12",
          "r13", "r14", "r15",
          "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
          "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14",
          "xmm15", "st", "st(1)", "st(2)", "st(3)", "st(4)", "st(5)",
          "st(6)", "st(7)", "memory", "cc");
}

#else

typedef struct {
    void  *fctx;
    void  *data;
} mrb_coro_transfer;

extern mrb_coro_transfer jump_fcontext(void *const to, void *vp);
extern void *make_fcontext(void *sp, size_t size,
    void (*fn)(mrb_coro_transfer));

static inline void
mrb_coro_jump(void **save, void *to)
{
    mrb_coro_transfer  t = jump_fcontext(to, save);

    *(void **) t.data = t.fctx;
}

#endif


struct mrb_coro_s {
    void            *ctx;        /* where the coroutine goes on */
    void            *caller;     /* where it returns to */
    mrb_coro_pool   *pool;
    mrb_coro_fn      fn;
    void            *arg;
    char            *map;        /* the mapping: guard page, then stack */
    char            *limit;      /* lowest usable address (guard's end) */
    mrb_coro        *next_idle;
    unsigned         finished:1;
#if defined(MRB_CORO_ASAN)
    const void      *caller_bottom;  /* the resumer's stack, for ASan */
    size_t           caller_size;
#endif
};

/*
 * Per thread: the coroutine running, whether the thread has its alternate
 * signal stack, and the lowest usable address of the thread's own stack
 * (NULL until first asked for).  initial-exec: read at a fixed offset from
 * the thread pointer, where the default model for a module that is
 * dlopen'd (nginx's, Apache's) calls __tls_get_addr on each access; the
 * 24 bytes come from the static TLS space glibc keeps for such modules.
 */
typedef struct {
    mrb_coro  *running;
    int        altstack_ready;
    char      *thread_limit;
} mrb_coro_thread;

extern __thread mrb_coro_thread  mrb_coro_tls
    __attribute__((tls_model("initial-exec"), visibility("hidden")));

/* mrb_coro.c: the first resume on a thread; a coroutine's end; the
 * thread's stack limit, the first time it is asked for */
void mrb_coro_thread_init(void);
void mrb_coro_release(mrb_coro *coro);
char *mrb_coro_thread_limit(void);


/*
 * Runs coro until it suspends (returns 1) or fn returns (returns 0: the
 * coroutine is finished and its stack is back in the pool; coro is gone).
 */
static inline int
mrb_coro_resume(mrb_coro *coro)
{
    mrb_coro  *outer = mrb_coro_tls.running;
#if defined(MRB_CORO_ASAN)
    void      *fake;
#endif

    if (__builtin_expect(!mrb_coro_tls.altstack_ready, 0)) {
        mrb_coro_thread_init();
    }

    mrb_coro_tls.running = coro;

    mrb_coro_asan_start(&fake, coro->limit,
                        (size_t) ((char *) coro - coro->limit));
    mrb_coro_jump(&coro->caller, coro->ctx);
    mrb_coro_asan_finish(fake, NULL, NULL);

    mrb_coro_tls.running = outer;

    if (__builtin_expect(coro->finished, 0)) {
        mrb_coro_release(coro);
        return 0;
    }

    return 1;
}


/* From inside coro: back to whoever resumed it, until the next resume. */
static inline void
mrb_coro_suspend(mrb_coro *coro)
{
#if defined(MRB_CORO_ASAN)
    void  *fake;
#endif

    mrb_coro_asan_start(&fake, coro->caller_bottom, coro->caller_size);
    mrb_coro_jump(&coro->ctx, coro->caller);
    mrb_coro_asan_finish(fake, &coro->caller_bottom, &coro->caller_size);
}


/* The coroutine running on this thread, or NULL on the thread's stack. */
static inline mrb_coro *
mrb_coro_current(void)
{
    return mrb_coro_tls.running;
}


/*
 * Bytes of machine stack left to the caller: above the guard page of the
 * running coroutine, or above the end of the thread's own stack.
 */
static inline size_t
mrb_stack_left(void)
{
    mrb_coro  *coro = mrb_coro_tls.running;
    char      *sp = __builtin_frame_address(0);
    char      *limit;

    if (coro != NULL) {
        limit = coro->limit;

    } else {
        limit = mrb_coro_tls.thread_limit;
        if (__builtin_expect(limit == NULL, 0)) {
            limit = mrb_coro_thread_limit();
        }
    }

    return sp > limit ? (size_t) (sp - limit) : 0;
}

#endif /* MRB_CORO_SWITCH_H */
