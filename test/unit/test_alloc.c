/*
 * Unit tests of the interpreter's allocator (mrb_alloc.h): a freed large
 * block comes back for the next request of its size, small blocks and
 * blocks past the bounds go back to malloc, what is kept stays within the
 * bounds, an interpreter using it compiles and runs as before, and a run
 * with a memory budget is refused what would take it past the budget,
 * except the GC arena's growth.
 */

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <mruby.h>
#include <mruby/compile.h>
#include <mruby/string.h>
#include "mrb_alloc.h"
#include "mrb_interp.h"
#include "mrb_interp_core.h"
#include "mrb_mruby_version.h"
#include "unit.h"

/* What mruby asks of the allocator for mrb's blocks (size 0 frees p). */
static void *
alloc_block(mrb_state *mrb, void *p, size_t size)
{
#ifdef MRB_STATE_ALLOCF
    return mrb->allocf(mrb, p, size, mrb->allocf_ud);
#else
    return mrb_basic_alloc_func(p, size);
#endif
}


/*
 * A run with a budget: blocks counted at their usable sizes, a block or a
 * growth past it refused (the block that failed to grow intact), what is
 * freed given back, never below zero.
 */
TEST(alloc_run_is_refused_past_its_memory_budget)
{
    mrb_state        *mrb = mrb_alloc_open();
    mrb_interp_head   head = { 0 };
    mrb_run_rec       run;
    char             *p, *q;

    REQUIRE(mrb != NULL);
    mrb_run_init(&run, NULL, 0);
    run.memory_limit = 64 * 1024;
    head.mrb = mrb;
    mrb->ud = &head;
    mrb_interp_set_run((mrb_interp *) &head, &run);

    p = alloc_block(mrb, NULL, 40000);
    REQUIRE(p != NULL);
    memset(p, 'x', 40000);
    CHECK(run.memory_used >= 40000 && run.memory_used < 41000);

    CHECK(alloc_block(mrb, NULL, 30000) == NULL);
    CHECK(alloc_block(mrb, p, 70000) == NULL);
    CHECK_EQ(run.memory_exceeded, 1);
    CHECK_EQ(p[39999], 'x');

    q = alloc_block(mrb, p, 60000);
    REQUIRE(q != NULL);
    CHECK_EQ(q[39999], 'x');
    CHECK(run.memory_used >= 60000 && run.memory_used < 61000);

    alloc_block(mrb, q, 0);
    CHECK_EQ(run.memory_used, 0);

    /* what the run did not take is no credit */
    mrb_interp_set_run((mrb_interp *) &head, NULL);
    p = alloc_block(mrb, NULL, 1000);
    mrb_interp_set_run((mrb_interp *) &head, &run);
    alloc_block(mrb, p, 0);
    CHECK_EQ(run.memory_used, 0);

    /* the GC arena grows past the budget: mruby raised its capacity
     * before it asked */
    run.memory_used = run.memory_limit;
    p = alloc_block(mrb, mrb->gc.arena, 64 * 1024);
    REQUIRE(p != NULL);
    mrb->gc.arena = (struct RBasic **) (void *) p;

    /* a budget of 0 counts nothing */
    run.memory_used = 0;
    run.memory_limit = 0;
    p = alloc_block(mrb, NULL, 1 << 20);
    CHECK(p != NULL);
    CHECK_EQ(run.memory_used, 0);
    alloc_block(mrb, p, 0);

    mrb_interp_set_run((mrb_interp *) &head, NULL);
    mrb->ud = NULL;
    mrb_close(mrb);
}


/* what is kept: with an allocator of the state's own (not mruby 4.0) */
#ifdef MRB_STATE_ALLOCF


/* Opening an interpreter frees some large blocks already: tests count
 * from what is kept once it is open. */
static unsigned
kept_since_open(mrb_state *mrb, unsigned at_open, size_t *bytes)
{
    return mrb_alloc_kept(mrb, bytes) - at_open;
}


TEST(alloc_freed_large_block_serves_the_next_request)
{
    mrb_state  *mrb = mrb_alloc_open();
    size_t      bytes, at_open_bytes;
    unsigned    at_open;
    void       *p, *q;

    REQUIRE(mrb != NULL);
    at_open = mrb_alloc_kept(mrb, &at_open_bytes);
    p = mrb_malloc(mrb, 16000);
    memset(p, 'x', 16000);
    mrb_free(mrb, p);
    CHECK_EQ(kept_since_open(mrb, at_open, &bytes), 1);
    CHECK(bytes - at_open_bytes >= 16000);

    q = mrb_malloc(mrb, 15000);
    CHECK(q == p);
    CHECK_EQ(kept_since_open(mrb, at_open, &bytes), 0);
    CHECK_EQ(bytes, at_open_bytes);

    mrb_free(mrb, q);
    mrb_close(mrb);
}


TEST(alloc_small_and_huge_blocks_go_back_to_malloc)
{
    mrb_state  *mrb = mrb_alloc_open();
    size_t      bytes;
    unsigned    at_open;

    REQUIRE(mrb != NULL);
    at_open = mrb_alloc_kept(mrb, &bytes);
    mrb_free(mrb, mrb_malloc(mrb, 100));
    mrb_free(mrb, mrb_malloc(mrb, MRB_ALLOC_KEEP_MIN - 100));
    mrb_free(mrb, mrb_malloc(mrb, MRB_ALLOC_KEEP_MAX + 1));
    CHECK_EQ(kept_since_open(mrb, at_open, &bytes), 0);
    mrb_close(mrb);
}


TEST(alloc_small_request_does_not_take_a_large_block)
{
    mrb_state  *mrb = mrb_alloc_open();
    size_t      bytes;
    unsigned    at_open;
    void       *small;

    REQUIRE(mrb != NULL);
    at_open = mrb_alloc_kept(mrb, &bytes);
    mrb_free(mrb, mrb_malloc(mrb, 16000));
    small = mrb_malloc(mrb, 7000);
    CHECK_EQ(kept_since_open(mrb, at_open, &bytes), 1);
    mrb_free(mrb, small);
    mrb_close(mrb);
}


TEST(alloc_keeps_no_more_than_its_bounds)
{
    mrb_state  *mrb = mrb_alloc_open();
    void       *block[20];
    size_t      bytes;
    unsigned    kept;
    int         i;

    REQUIRE(mrb != NULL);
    for (i = 0; i < 20; i++) {
        block[i] = mrb_malloc(mrb, i % 2 ? 16000 : 600);
    }
    for (i = 0; i < 20; i++) {
        mrb_free(mrb, block[i]);
    }

    kept = mrb_alloc_kept(mrb, &bytes);
    CHECK(kept > 0 && kept <= MRB_ALLOC_KEEP_BLOCKS);
    CHECK(bytes > 0 && bytes <= MRB_ALLOC_KEEP_BYTES);
    mrb_close(mrb);
}


TEST(alloc_shrinking_a_large_block_keeps_content_and_block)
{
    mrb_state  *mrb = mrb_alloc_open();
    size_t      bytes;
    unsigned    at_open;
    char       *p, *q;

    REQUIRE(mrb != NULL);
    at_open = mrb_alloc_kept(mrb, &bytes);
    p = mrb_malloc(mrb, 1024);
    memcpy(p, "twelve bytes", 13);
    q = mrb_realloc(mrb, p, 13);
    CHECK(strcmp(q, "twelve bytes") == 0);
    CHECK_EQ(kept_since_open(mrb, at_open, &bytes), 1);

    q = mrb_realloc(mrb, q, 3000);
    CHECK(strcmp(q, "twelve bytes") == 0);
    mrb_free(mrb, q);
    mrb_close(mrb);
}

#endif


TEST(alloc_interpreter_compiles_and_runs_many_times)
{
    mrb_state  *mrb = mrb_alloc_open();
    size_t      bytes;
    mrb_value   v;
    int         i, ai;

    REQUIRE(mrb != NULL);
    for (i = 0; i < 2000; i++) {
        ai = mrb_gc_arena_save(mrb);
        v = mrb_load_string(mrb, "s = 'hello ' + 'world'; [s] * 2");
        mrb_gc_arena_restore(mrb, ai);
        REQUIRE(mrb->exc == NULL);
    }

    v = mrb_load_string(mrb, "[1, 2, 3].map { |x| x * 2 }.join(',')");
    REQUIRE(mrb_string_p(v));
    CHECK(strcmp(mrb_str_to_cstr(mrb, v), "2,4,6") == 0);

#ifdef MRB_STATE_ALLOCF
    /* A compile frees its pool pages: they are what is kept. */
    CHECK(mrb_alloc_kept(mrb, &bytes) > 0);
    CHECK(bytes <= MRB_ALLOC_KEEP_BYTES);
#else
    CHECK_EQ(mrb_alloc_kept(mrb, &bytes), 0);
#endif
    mrb_close(mrb);
}


#if defined(__SANITIZE_ADDRESS__) && defined(MRB_STATE_ALLOCF)
/* A kept block is poisoned: writing to it after mruby freed it is caught. */
TEST(alloc_use_of_a_kept_block_is_reported_under_asan)
{
    mrb_state  *mrb = mrb_alloc_open();
    pid_t       pid;
    int         status, null;
    char       *p;

    REQUIRE(mrb != NULL);
    p = mrb_malloc(mrb, 16000);
    mrb_free(mrb, p);

    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        null = open("/dev/null", O_WRONLY);
        dup2(null, STDERR_FILENO);
        p[100] = 'x';
        _exit(0);
    }

    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));
    mrb_close(mrb);
}
#endif
