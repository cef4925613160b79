/*
 * The time budget of a run (mrb_run_budget.h): the clock thread, the
 * check the scripts' bytecode calls, the stop, and the watchdog.
 *
 * Why a clock thread and checks in the bytecode, not a timer: a timer
 * armed per run is a system call per request (two with its disarm), and a
 * signal that interrupts the run can land in the middle of mruby or of a
 * lock; the compare is a load, and a check raises only where the bytecode
 * calls it, between two instructions of Ruby, never inside C that holds a
 * lock (the shared dictionary's, the compiler's, a Mutex's C half).  The
 * clock's ticks cost the process a wake-up every MRB_RUN_TICK_MS, not
 * its requests anything.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE     /* clone */
#endif

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/error.h>
#include <mruby/irep.h>
#include <mruby/debug.h>
#include <mruby/proc.h>
#include <mruby/string.h>
#include <mruby/variable.h>

#include "mrb_api.h"
#include "mrb_interp_core.h"
#include "mrb_irep_check.h"
#include "mrb_mruby_version.h"
#include "mrb_run_budget.h"

/* the clock thread's kind and stack: see budget_clock_loop */
#if defined(__SANITIZE_ADDRESS__)
#define BUDGET_CLOCK_PTHREAD  1
#endif

#define BUDGET_CLOCK_STACK    (64 * 1024)

#define BUDGET_TICKS(ms)  (((uint64_t) (ms) + MRB_RUN_TICK_MS - 1) \
                           / MRB_RUN_TICK_MS)

_Atomic uint64_t  mrb_run_ticks;

static int              clock_running;
static _Atomic int      clock_stopping;
#ifdef BUDGET_CLOCK_PTHREAD
static pthread_t        clock_thread;
#else
static void            *clock_stack;
static volatile pid_t   clock_tid;      /* 0 once the thread has exited:
                                           the kernel clears it and wakes
                                           its futex (CLONE_CHILD_CLEARTID) */
#endif

/* The interpreters the watchdog looks at (a list through their heads),
 * under a spin lock of C11 atomics: the clock thread takes it every tick
 * and calls nothing of glibc's (see budget_clock_main). */
static atomic_flag      watch_lock = ATOMIC_FLAG_INIT;
static mrb_interp_head *watch_first;


static void
budget_watch_lock(void)
{
    while (atomic_flag_test_and_set_explicit(&watch_lock,
                                             memory_order_acquire))
    {
        /* interpreters open and close rarely: a few loads */
    }
}


static void
budget_watch_unlock(void)
{
    atomic_flag_clear_explicit(&watch_lock, memory_order_release);
}


/*
 * The watchdog's line, made on the clock thread, which can call nothing
 * that keeps state of its own (see budget_clock_main): not the server's
 * log function (Apache's takes the log file's mutex and a pool, and may
 * call other modules' hooks; both format with stdio or their own state),
 * not snprintf (stdio, the locale).  So the line is put together here,
 * strings and decimals into a buffer on the stack, and written to the
 * error log files the adapter names (mrb_server log_fds, which only reads
 * the server's log structures), else to the standard error.
 */

#define BUDGET_LOG_FDS   4

#define BUDGET_LINE_LEN  1024

typedef struct {
    char  *p;
    char  *end;
} budget_line;


static void
budget_line_str(budget_line *l, const char *s)
{
    while (*s != '\0' && l->p < l->end) {
        *l->p++ = *s++;
    }
}


/* v in decimal, at least width digits (zeros before). */
static void
budget_line_num(budget_line *l, uint64_t v, int width)
{
    char  digits[24];
    int   n = 0;

    do {
        digits[n++] = (char) ('0' + v % 10);
        v /= 10;
    } while (v != 0);

    while (n < width && n < (int) sizeof(digits)) {
        digits[n++] = '0';
    }

    while (n > 0 && l->p < l->end) {
        *l->p++ = digits[--n];
    }
}


/* The date and time of now, UTC, as YYYY-MM-DD HH:MM:SS: the civil date
 * of a day count (Hinnant's days_from_civil, inverted), since gmtime_r
 * keeps state of its own. */
static void
budget_line_time(budget_line *l)
{
    struct timespec  ts;
    int64_t          days, era, sec;
    uint64_t         doe, yoe, doy, mp, y, m, d;

    clock_gettime(CLOCK_REALTIME, &ts);
    days = ts.tv_sec / 86400;
    sec = ts.tv_sec % 86400;

    days += 719468;
    era = (days >= 0 ? days : days - 146096) / 146097;
    doe = (uint64_t) (days - era * 146097);
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    d = doy - (153 * mp + 2) / 5 + 1;
    m = mp < 10 ? mp + 3 : mp - 9;
    y = yoe + (uint64_t) era * 400 + (m <= 2);

    budget_line_num(l, y, 4);
    budget_line_str(l, "-");
    budget_line_num(l, m, 2);
    budget_line_str(l, "-");
    budget_line_num(l, d, 2);
    budget_line_str(l, " ");
    budget_line_num(l, (uint64_t) sec / 3600, 2);
    budget_line_str(l, ":");
    budget_line_num(l, (uint64_t) sec / 60 % 60, 2);
    budget_line_str(l, ":");
    budget_line_num(l, (uint64_t) sec % 60, 2);
}


/*
 * The watchdog, on the clock thread: a run still going so long past its
 * deadline is inside C (a check would have stopped it), which nothing
 * else will end.  Its frames are read from here while it runs: they do
 * not change under C that does not return, and the process ends next.
 * mruby's debug lookups only read the irep (a file name is a symbol's
 * name, kept in the symbol table).
 */
static void
budget_watchdog(mrb_interp_head *h, uint64_t now)
{
    mrb_state           *mrb = h->mrb;
    mrb_callinfo        *ci;
    const mrb_irep      *irep;
    const char          *file = NULL;
    int32_t              line = -1;
    uint32_t             idx;
    char                 buf[BUDGET_LINE_LEN];
    budget_line          l = { buf, buf + sizeof(buf) - 1 };
    size_t               off, len;
    long                 n;
    int                  fds[BUDGET_LOG_FDS], nfds = 0, i;

    for (ci = mrb->c->ci; ci >= mrb->c->cibase; ci--) {
        if (ci->proc == NULL || MRB_PROC_CFUNC_P(ci->proc)
            || ci->pc == NULL)
        {
            continue;
        }
        /* the innermost frame with lines: mruby's own Ruby has none */
        irep = ci->proc->body.irep;
        idx = (uint32_t) (ci->pc - irep->iseq);
        idx = idx > 0 ? idx - 1 : 0;
        file = mrb_debug_get_filename(mrb, irep, idx);
        line = mrb_debug_get_line(mrb, irep, idx);
        if (file != NULL) {
            break;
        }
    }

    budget_line_str(&l, "[");
    budget_line_time(&l);
    budget_line_str(&l, " UTC] [mruby:alert] [pid ");
    budget_line_num(&l, (uint64_t) syscall(SYS_getpid), 0);
    budget_line_str(&l, "] mruby: a run is still inside C ");
    budget_line_num(&l, (now - h->deadline) * MRB_RUN_TICK_MS, 0);
    budget_line_str(&l, " ms after its time budget ended, at ");
    budget_line_str(&l, file != NULL ? file : "(unknown)");
    budget_line_str(&l, ":");
    if (line >= 0) {
        budget_line_num(&l, (uint64_t) line, 0);
    } else {
        budget_line_str(&l, "-1");
    }
    budget_line_str(&l, ": ending this process for the server to "
                    "replace it");
    *l.p++ = '\n';

    if (h->server->log_fds != NULL) {
        nfds = h->server->log_fds(h->log_target, h->run, fds, BUDGET_LOG_FDS);
    }
    if (nfds <= 0) {
        fds[0] = STDERR_FILENO;
        nfds = 1;
    }

    /* raw write(2): glibc's wrapper is a cancellation point (see
     * budget_clock_main) */
    len = (size_t) (l.p - buf);
    for (i = 0; i < nfds; i++) {
        for (off = 0; off < len; off += (size_t) n) {
            n = syscall(SYS_write, fds[i], buf + off, len - off);
            if (n <= 0) {
                break;
            }
        }
    }

    _exit(1);
}


/*
 * The clock thread.  Not a pthread: once a process has made one, glibc
 * takes its multi-threaded paths for good (each cancellation point, recv,
 * writev, epoll_wait, keeps cancellation state; stdio and malloc lock),
 * which cost nginx's hello-world request about 200 instructions more
 * (callgrind, 2026-11-27: 13,333 against 13,132 with no thread).  A
 * thread made by clone(2) alone leaves glibc single-threaded; it then
 * shares the TLS of the thread that made it (errno, the malloc arena,
 * the cancellation state, the locale), so it calls only what keeps to its
 * arguments and the stack: system calls made with syscall(2), never
 * through glibc's wrappers (nanosleep and write are cancellation points,
 * which under a multi-threaded Apache flip the cancellation type of the
 * thread that made this one); the sleep cannot fail (every signal is
 * blocked: no EINTR), and a write that fails sets an errno no one reads,
 * as the process ends next;
 * clock_gettime, which the vDSO answers; atomics; the spin lock; and,
 * to end the process, the watchdog's line (made without malloc, stdio or
 * the locale) and _exit.  The stack protector's canary is read from that
 * TLS too, which is only read.  AddressSanitizer keeps state per
 * pthread: under it (BUDGET_CLOCK_PTHREAD) the clock is a pthread.
 */


static void
budget_clock_loop(void)
{
    struct timespec   ts = { 0, MRB_RUN_TICK_MS * 1000000L };
    mrb_interp_head  *h;
    uint64_t          now, deadline;

    while (!atomic_load(&clock_stopping)) {
        syscall(SYS_nanosleep, &ts, NULL);
        now = atomic_fetch_add_explicit(&mrb_run_ticks, 1,
                                        memory_order_relaxed) + 1;

        budget_watch_lock();
        for (h = watch_first; h != NULL; h = h->watch_next) {
            deadline = atomic_load_explicit(&h->deadline,
                                            memory_order_relaxed);
            if (deadline != MRB_RUN_NO_DEADLINE
                && now >= deadline + BUDGET_TICKS(MRB_RUN_WATCHDOG_MS))
            {
                budget_watchdog(h, now);
            }
        }
        budget_watch_unlock();
    }
}


#ifdef BUDGET_CLOCK_PTHREAD

static void *
budget_clock_main(void *arg)
{
    budget_clock_loop();
    return NULL;
}


static int
budget_clock_create(void)
{
    return pthread_create(&clock_thread, NULL, budget_clock_main, NULL);
}


static void
budget_clock_join(void)
{
    pthread_join(clock_thread, NULL);
}

#else

static int
budget_clock_main(void *arg)
{
    budget_clock_loop();
    return 0;
}


static int
budget_clock_create(void)
{
    int  flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND
                 | CLONE_THREAD | CLONE_SYSVSEM | CLONE_PARENT_SETTID
                 | CLONE_CHILD_CLEARTID;

    clock_stack = mmap(NULL, BUDGET_CLOCK_STACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (clock_stack == MAP_FAILED) {
        clock_stack = NULL;
        return errno;
    }

    if (clone(budget_clock_main, (char *) clock_stack + BUDGET_CLOCK_STACK,
              flags, NULL, &clock_tid, NULL, &clock_tid) == -1)
    {
        munmap(clock_stack, BUDGET_CLOCK_STACK);
        clock_stack = NULL;
        return errno;
    }

    return 0;
}


static void
budget_clock_join(void)
{
    pid_t  tid;

    while ((tid = clock_tid) != 0) {
        syscall(SYS_futex, &clock_tid, FUTEX_WAIT, tid, NULL, NULL, 0);
    }

    munmap(clock_stack, BUDGET_CLOCK_STACK);
    clock_stack = NULL;
}

#endif


int
mrb_run_clock_start(char *err, size_t errlen)
{
    sigset_t  all, old;
    int       rc;

    if (clock_running) {
        return 0;
    }

    /* the server's signals go to its own threads, never to the clock */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    atomic_store(&clock_stopping, 0);
    rc = budget_clock_create();
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    if (rc != 0) {
        snprintf(err, errlen, "mruby: cannot start the run clock thread: "
                 "%s; scripts run without a time budget", strerror(rc));
        return -1;
    }

    clock_running = 1;
    return 0;
}


void
mrb_run_clock_stop(void)
{
    if (!clock_running) {
        return;
    }

    atomic_store(&clock_stopping, 1);
    budget_clock_join();
    clock_running = 0;
}


void
mrb_run_budget_watch(mrb_interp *interp)
{
    mrb_interp_head  *h = (mrb_interp_head *) interp;

    atomic_store_explicit(&h->deadline, MRB_RUN_NO_DEADLINE,
                          memory_order_relaxed);

    budget_watch_lock();
    h->watch_next = watch_first;
    watch_first = h;
    budget_watch_unlock();
}


void
mrb_run_budget_unwatch(mrb_interp *interp)
{
    mrb_interp_head  *h = (mrb_interp_head *) interp;
    mrb_interp_head **p;

    budget_watch_lock();
    for (p = &watch_first; *p != NULL; p = &(*p)->watch_next) {
        if (*p == h) {
            *p = h->watch_next;
            break;
        }
    }
    budget_watch_unlock();
}


static void
budget_set(mrb_interp_head *h, uint64_t deadline)
{
    atomic_store_explicit(&h->deadline, deadline, memory_order_relaxed);
}


void
mrb_run_budget_begin(mrb_interp *interp, mrb_run_rec *run)
{
    run->stopped = 0;
    budget_set((mrb_interp_head *) interp, run->timeout_ms == 0
               ? MRB_RUN_NO_DEADLINE
               : mrb_run_now() + BUDGET_TICKS(run->timeout_ms));
}


int
mrb_run_budget_end(mrb_interp *interp, mrb_run_rec *run)
{
    budget_set((mrb_interp_head *) interp, MRB_RUN_NO_DEADLINE);
    return run->stopped;
}


uint64_t
mrb_run_budget_pause(mrb_interp *interp)
{
    mrb_interp_head  *h = (mrb_interp_head *) interp;
    uint64_t          deadline = h->deadline, now = mrb_run_now();

    budget_set(h, MRB_RUN_NO_DEADLINE);

    if (deadline == MRB_RUN_NO_DEADLINE) {
        return MRB_RUN_NO_DEADLINE;
    }

    return deadline > now ? deadline - now : 0;
}


void
mrb_run_budget_resume(mrb_interp *interp, uint64_t left)
{
    budget_set((mrb_interp_head *) interp, left == MRB_RUN_NO_DEADLINE
               ? MRB_RUN_NO_DEADLINE : mrb_run_now() + left);
}


/*
 * Past the deadline: the first time, the stop (its error kept in the
 * outermost run's buffer, the ensure clauses' grace begins); after the
 * grace, the same exception again at every check.
 */
static MRB_NOINLINE void
budget_stop(mrb_state *mrb, mrb_interp_head *h)
{
    mrb_run_rec  *run = h->run, *outer;
    mrb_value     exc, where;
    uint64_t      now = mrb_run_now();
    char          msg[MRB_ERR_MSG_LEN];

    if (run == NULL) {
        budget_set(h, MRB_RUN_NO_DEADLINE);
        return;
    }

    for (outer = run; outer->prev != NULL; outer = outer->prev) {
        /* the budget is the outermost run's */
    }

    if (outer->stopped) {
        exc = mrb_exc_new_str(mrb, h->run_timeout_class,
                              mrb_str_new_cstr(mrb, "the run's time budget "
                                               "is spent (after its grace)"));
        mrb_exc_raise(mrb, exc);
    }

    where = mrb_get_backtrace(mrb);
    snprintf(msg, sizeof(msg), "the run's time budget of %lu ms is spent: "
             "stopped after %llu ms of running at %s",
             (unsigned long) outer->timeout_ms,
             (unsigned long long) (outer->timeout_ms
                                   + (now - h->deadline) * MRB_RUN_TICK_MS),
             RARRAY_LEN(where) > 0 && mrb_string_p(RARRAY_PTR(where)[0])
             ? RSTRING_CSTR(mrb, RARRAY_PTR(where)[0]) : "(unknown)");

    exc = mrb_exc_new_str(mrb, h->run_timeout_class,
                          mrb_str_new_cstr(mrb, msg));
    mrb_error_format(mrb, exc, outer->error, sizeof(outer->error));
    outer->stopped = 1;

    budget_set(h, now + BUDGET_TICKS(MRB_RUN_GRACE_MS));
    mrb_exc_raise(mrb, exc);
}


/* What the bytecode's checks call: a load and a compare. */
static mrb_value
budget_check(mrb_state *mrb, mrb_value self)
{
    mrb_interp_head  *h = mrb->ud;

    if (h != NULL
        && mrb_run_now() >= atomic_load_explicit(&h->deadline,
                                                 memory_order_relaxed))
    {
        budget_stop(mrb, h);
    }

    return self;
}


/*
 * The checker, which the bytecode's checks load from a global and send
 * the check to: mrb_api_define_hidden's object (a script cannot name it
 * nor change its method), so the checks always find budget_check.
 * Re-asserting a method at each run start would be a cost per request
 * and would still lose to a script that removed it during its own run.
 *
 * The stop's class is held in the head, not looked up by name, so a
 * script that removes or replaces the constant Server::RunTimeout (with
 * a StandardError it could rescue) does not change what the stop raises.
 */
void
mrb_run_budget_define(mrb_state *mrb, struct RClass *server_class)
{
    mrb_interp_head  *h = mrb->ud;

    mrb_api_define_hidden(mrb, MRB_IREP_CHECK_NAME, budget_check,
                          MRB_ARGS_NONE());

    h->run_timeout_class = mrb_define_class_under(mrb, server_class,
                                                  "RunTimeout",
                                                  mrb->eException_class);
    mrb_gc_register(mrb, mrb_obj_value(h->run_timeout_class));
}
