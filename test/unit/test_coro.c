/*
 * Machine-stack coroutines: switching, the stack pool, the remaining-stack
 * figure and the guard page.
 */

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mrb_coro.h"
#include "unit.h"


typedef struct {
    mrb_coro  *coro;
    int        steps;
    int        seen;
} coro_counter;


static void
count_up(mrb_coro *coro, void *arg)
{
    coro_counter  *c = arg;
    int            i;

    for (i = 0; i < c->steps; i++) {
        c->seen++;
        mrb_coro_suspend(coro);
    }
}


TEST(coro_resume_and_suspend_take_turns)
{
    mrb_coro_pool  *pool = mrb_coro_pool_new(0, 4);
    coro_counter    c = { NULL, 3, 0 };
    mrb_coro       *coro;
    int             i;

    REQUIRE(pool != NULL);
    coro = mrb_coro_new(pool, count_up, &c);
    REQUIRE(coro != NULL);
    CHECK(mrb_coro_current() == NULL);
    CHECK_EQ(mrb_coro_pool_live(pool), 1);

    for (i = 1; i <= 3; i++) {
        CHECK_EQ(mrb_coro_resume(coro), 1);
        CHECK_EQ(c.seen, i);
        CHECK(mrb_coro_current() == NULL);
    }

    /* the loop ends, fn returns: finished, the stack back in the pool */
    CHECK_EQ(mrb_coro_resume(coro), 0);
    CHECK_EQ(mrb_coro_pool_live(pool), 0);
    CHECK_EQ(mrb_coro_pool_idle(pool), 1);

    mrb_coro_pool_free(pool);
}


static void
note_current(mrb_coro *coro, void *arg)
{
    *(mrb_coro **) arg = mrb_coro_current();
}


/* Starts n coroutines that suspend once, then lets them all finish. */
static void
coro_burst(mrb_coro_pool *pool, int n)
{
    mrb_coro      *coros[8];
    coro_counter   c[8];
    int            i;

    for (i = 0; i < n; i++) {
        c[i].steps = 1;
        c[i].seen = 0;
        coros[i] = mrb_coro_new(pool, count_up, &c[i]);
        REQUIRE(coros[i] != NULL);
        CHECK_EQ(mrb_coro_resume(coros[i]), 1);
    }
    CHECK_EQ(mrb_coro_pool_live(pool), (unsigned) n);

    for (i = 0; i < n; i++) {
        CHECK_EQ(mrb_coro_resume(coros[i]), 0);
    }
    CHECK_EQ(mrb_coro_pool_live(pool), 0);
}


TEST(coro_pool_keeps_a_burst_until_two_trims_then_keep)
{
    mrb_coro_pool  *pool = mrb_coro_pool_new(0, 2);
    mrb_coro       *coro, *seen = NULL;

    REQUIRE(pool != NULL);

    /* between trims every finished stack stays for the next burst */
    coro_burst(pool, 6);
    CHECK_EQ(mrb_coro_pool_idle(pool), 6);
    coro_burst(pool, 6);
    CHECK_EQ(mrb_coro_pool_idle(pool), 6);

    /* the stack given back last is the next one taken */
    coro = mrb_coro_new(pool, note_current, &seen);
    REQUIRE(coro != NULL);
    CHECK_EQ(mrb_coro_pool_idle(pool), 5);
    CHECK_EQ(mrb_coro_resume(coro), 0);
    CHECK(seen == coro);

    /* all six were taken since the pool was made: none goes */
    CHECK_EQ(mrb_coro_pool_trim(pool), 0);
    CHECK_EQ(mrb_coro_pool_idle(pool), 6);

    /* four of them were taken again before the next trim: the two never
     * taken go; then those four, untouched for a whole period, less keep */
    coro_burst(pool, 4);
    CHECK_EQ(mrb_coro_pool_trim(pool), 2);
    CHECK_EQ(mrb_coro_pool_idle(pool), 4);
    CHECK_EQ(mrb_coro_pool_trim(pool), 2);
    CHECK_EQ(mrb_coro_pool_idle(pool), 2);
    CHECK_EQ(mrb_coro_pool_trim(pool), 0);
    CHECK_EQ(mrb_coro_pool_idle(pool), 2);

    /* and what stays is reused */
    coro_burst(pool, 2);
    CHECK_EQ(mrb_coro_pool_idle(pool), 2);

    mrb_coro_pool_free(pool);
}


TEST(coro_pool_of_keep_0_keeps_nothing)
{
    mrb_coro_pool  *pool = mrb_coro_pool_new(0, 0);

    REQUIRE(pool != NULL);
    coro_burst(pool, 3);
    CHECK_EQ(mrb_coro_pool_idle(pool), 0);
    mrb_coro_pool_free(pool);
}


typedef struct {
    mrb_coro_pool  *pool;
    int             inner_steps;
    size_t          left_top, left_deep;
} coro_nest;


static void
inner(mrb_coro *coro, void *arg)
{
    coro_nest  *n = arg;

    n->inner_steps++;
    mrb_coro_suspend(coro);
    n->inner_steps++;
}


static void
outer(mrb_coro *coro, void *arg)
{
    coro_nest  *n = arg;
    mrb_coro   *in = mrb_coro_new(n->pool, inner, n);

    if (in == NULL) {
        return;
    }

    mrb_coro_resume(in);
    /* the inner one suspended: this one is current again */
    if (mrb_coro_current() == coro) {
        mrb_coro_suspend(coro);
    }
    mrb_coro_resume(in);
}


TEST(coro_nests)
{
    coro_nest   n = { mrb_coro_pool_new(0, 4), 0, 0, 0 };
    mrb_coro   *coro;

    REQUIRE(n.pool != NULL);
    coro = mrb_coro_new(n.pool, outer, &n);
    REQUIRE(coro != NULL);

    CHECK_EQ(mrb_coro_resume(coro), 1);
    CHECK_EQ(n.inner_steps, 1);
    CHECK_EQ(mrb_coro_resume(coro), 0);
    CHECK_EQ(n.inner_steps, 2);
    CHECK_EQ(mrb_coro_pool_live(n.pool), 0);

    mrb_coro_pool_free(n.pool);
}


static __attribute__((noinline)) size_t
recurse_left(int depth)
{
    volatile char  pad[1024];
    size_t         left;

    pad[0] = (char) depth;
    left = depth == 0 ? mrb_stack_left() : recurse_left(depth - 1);
    return left + (size_t) (pad[0] - depth);
}


static void
measure_left(mrb_coro *coro, void *arg)
{
    coro_nest  *n = arg;

    n->left_top = mrb_stack_left();
    n->left_deep = recurse_left(32);
}


TEST(coro_stack_left_is_the_configured_size_minus_what_is_used)
{
    coro_nest   n = { mrb_coro_pool_new(128 * 1024, 1), 0, 0, 0 };
    mrb_coro   *coro;

    REQUIRE(n.pool != NULL);
    CHECK_EQ(mrb_coro_pool_stack_size(n.pool), 128 * 1024);

    coro = mrb_coro_new(n.pool, measure_left, &n);
    REQUIRE(coro != NULL);
    CHECK_EQ(mrb_coro_resume(coro), 0);

    CHECK(n.left_top < 128 * 1024 && n.left_top > 126 * 1024);
    CHECK(n.left_top - n.left_deep >= 32 * 1024);
    CHECK(n.left_top - n.left_deep < 96 * 1024);  /* ASan's redzones */

    mrb_coro_pool_free(n.pool);
}


static volatile int  forever = 1;


static __attribute__((noinline)) size_t
recurse_forever(int depth)
{
    volatile char  pad[4096];

    pad[0] = (char) depth;
    return (forever ? recurse_forever(depth + 1) : 0) + (size_t) pad[0];
}


static void
overflow(mrb_coro *coro, void *arg)
{
    recurse_forever(0);
}


/*
 * A run past the guard page kills the process with SIGSEGV after one line
 * on stderr that names the stack size.  In a child: it dies.
 */
TEST(coro_guard_page_hit_ends_the_process_with_a_line)
{
    int     fds[2], status;
    pid_t   pid;
    char    buf[512];
    ssize_t n;

    REQUIRE(pipe(fds) == 0);

    pid = fork();
    REQUIRE(pid != -1);

    if (pid == 0) {
        mrb_coro_pool  *pool = mrb_coro_pool_new(64 * 1024, 1);

        dup2(fds[1], STDERR_FILENO);
        mrb_coro_resume(mrb_coro_new(pool, overflow, NULL));
        _exit(0);
    }

    close(fds[1]);
    n = read(fds[0], buf, sizeof(buf) - 1);
    close(fds[0]);
    REQUIRE(waitpid(pid, &status, 0) == pid);

    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    REQUIRE(n > 0);
    buf[n] = '\0';
    CHECK(strstr(buf, "stack overflow") != NULL);
    CHECK(strstr(buf, "64 KB") != NULL);
}


/* A fault elsewhere is not called a stack overflow. */
TEST(coro_other_faults_are_not_stack_overflows)
{
    int     fds[2], status;
    pid_t   pid;
    ssize_t n;
    char    buf[256];

    REQUIRE(pipe(fds) == 0);

    pid = fork();
    REQUIRE(pid != -1);

    if (pid == 0) {
        mrb_coro_pool  *pool = mrb_coro_pool_new(0, 1);
        coro_counter    c = { NULL, 1, 0 };

        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        close(fds[1]);
        mrb_coro_resume(mrb_coro_new(pool, count_up, &c));
        raise(SIGSEGV);
        _exit(0);
    }

    close(fds[1]);
    n = read(fds[0], buf, sizeof(buf));
    close(fds[0]);
    REQUIRE(waitpid(pid, &status, 0) == pid);

#if !defined(__SANITIZE_ADDRESS__)    /* its own handler reports it */
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    CHECK_EQ(n, 0);
#else
    (void) status;
    (void) n;
#endif
}


static void
ping(mrb_coro *coro, void *arg)
{
    for ( ;; ) {
        mrb_coro_suspend(coro);
    }
}


/*
 * The benches report the fastest of CORO_BENCH_REPS repetitions: on a
 * shared machine the others are the same work plus time other programs
 * took, so the fastest is the closest to the work alone.
 */
#define CORO_BENCH_REPS  10


BENCH(bench_coro_switch)
{
    mrb_coro_pool  *pool = mrb_coro_pool_new(0, 1);
    mrb_coro       *coro = mrb_coro_new(pool, ping, NULL);
    uint64_t        t0, t, best = UINT64_MAX;
    int             i, r, n = 1000000;

    mrb_coro_resume(coro);
    for (r = 0; r < CORO_BENCH_REPS; r++) {
        t0 = unit_now_ns();
        for (i = 0; i < n; i++) {
            mrb_coro_resume(coro);
        }
        t = unit_now_ns() - t0;
        best = t < best ? t : best;
    }

    /* a resume is two switches: in and back */
    unit_report("switch, one way (fastest of 10)", (double) best / n / 2,
                "ns");
}


static void
nothing(mrb_coro *coro, void *arg)
{
}


BENCH(bench_coro_create_first_switch_from_pool)
{
    mrb_coro_pool  *pool = mrb_coro_pool_new(0, 16);
    uint64_t        t0, t, best = UINT64_MAX;
    int             i, r, n = 500000;

    mrb_coro_resume(mrb_coro_new(pool, nothing, NULL));

    for (r = 0; r < CORO_BENCH_REPS; r++) {
        t0 = unit_now_ns();
        for (i = 0; i < n; i++) {
            mrb_coro_resume(mrb_coro_new(pool, nothing, NULL));
        }
        t = unit_now_ns() - t0;
        best = t < best ? t : best;
    }

    /* create, switch in, run to the end, switch out, stack back */
    unit_report("create + first switch + finish, from the pool "
                "(fastest of 10)", (double) best / n, "ns");

    pool = mrb_coro_pool_new(0, 0);
    n = 20000;
    t0 = unit_now_ns();
    for (i = 0; i < n; i++) {
        mrb_coro_resume(mrb_coro_new(pool, nothing, NULL));
    }

    unit_report("the same without the pool (mmap, mprotect, munmap)",
                (double) (unit_now_ns() - t0) / n, "ns");
}
