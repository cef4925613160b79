/*
 * The machine stack left (mrb_stack.h): on a thread's own stack as on a
 * coroutine's (test_coro.c measures that one, and how it shrinks with
 * depth), and the check that raises before it runs out.
 */

#include <pthread.h>
#include <string.h>

#include <mruby.h>
#include <mruby/error.h>

#include "mrb_stack.h"
#include "unit.h"

#define STACK_THREAD_SIZE  (512 * 1024)


static void *
stack_measure(void *arg)
{
    *(size_t *) arg = mrb_stack_left();
    return NULL;
}


TEST(stack_left_on_a_thread_is_what_its_own_stack_has_left)
{
    pthread_attr_t  attr;
    pthread_t       t;
    size_t          left = 0;

    REQUIRE(pthread_attr_init(&attr) == 0);
    REQUIRE(pthread_attr_setstacksize(&attr, STACK_THREAD_SIZE) == 0);
    REQUIRE(pthread_create(&t, &attr, stack_measure, &left) == 0);
    pthread_join(t, NULL);
    pthread_attr_destroy(&attr);

    CHECK(left < STACK_THREAD_SIZE);
    CHECK(left > STACK_THREAD_SIZE - 64 * 1024);

    /* the process's main thread: some of its 8 MB (the usual rlimit) */
    CHECK(mrb_stack_left() > 1024 * 1024);
    CHECK(mrb_stack_left() < (size_t) 1 << 40);
}


typedef struct {
    mrb_state   *mrb;
    int          depth;
    int          raised;
} stack_probe;


/* Down until the check raises, or far deeper than any stack allows. */
static __attribute__((noinline)) void
stack_probe_down(stack_probe *p)
{
    volatile char  pad[512];

    pad[0] = 1;
    mrb_stack_check(p->mrb);
    p->depth += pad[0];
    if (p->depth < STACK_THREAD_SIZE) {
        stack_probe_down(p);
    }
    pad[0]++;   /* not a tail call: each level keeps its frame */
}


static mrb_value
stack_probe_body(mrb_state *mrb, void *arg)
{
    stack_probe_down(arg);
    return mrb_nil_value();
}


static void *
stack_probe_thread(void *arg)
{
    stack_probe  *p = arg;
    mrb_value     exc;
    mrb_bool      failed;

    exc = mrb_protect_error(p->mrb, stack_probe_body, p, &failed);
    p->raised = failed && mrb_obj_class(p->mrb, exc)
                          == mrb_class_get(p->mrb, "SystemStackError");
    return NULL;
}


/* Endless recursion that checks first ends in SystemStackError, with the
 * reserve still free, on a thread's stack as on a coroutine's. */
TEST(stack_check_raises_before_a_thread_stack_runs_out)
{
    pthread_attr_t  attr;
    pthread_t       t;
    stack_probe     p = { mrb_open(), 0, 0 };

    REQUIRE(p.mrb != NULL);
    REQUIRE(pthread_attr_init(&attr) == 0);
    REQUIRE(pthread_attr_setstacksize(&attr, STACK_THREAD_SIZE) == 0);
    REQUIRE(pthread_create(&t, &attr, stack_probe_thread, &p) == 0);
    pthread_join(t, NULL);
    pthread_attr_destroy(&attr);

    CHECK(p.raised);
    CHECK(p.depth > 100);
    CHECK(p.depth < STACK_THREAD_SIZE / 512);
    mrb_close(p.mrb);
}
