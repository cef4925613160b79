/*
 * Runs that wait (mrb_wait.c): a script suspended anywhere, also inside
 * blocks and methods that C called, resumed by its "server" (here: the
 * test, which plays the event loop), while other runs go on; errors after
 * a resume, cancellation, and places where a script cannot wait.
 */

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <mruby.h>
#include <mruby/string.h>
#include <mruby/variable.h>
#include "mrb_alloc.h"
#include "mrb_interp.h"
#include "mrb_interp_core.h"
#include "mrb_part.h"
#include "mrb_redis.h"
#include "mrb_script.h"
#include "mrb_wait.h"
#include "unit.h"
#include "unit_oom.h"


static char      wait_out[2048];
static int       wait_timers;     /* wake_after calls */
static mrb_int   wait_last_msec;


static int
wait_write(mrb_run_rec *run, const char *data, size_t len)
{
    size_t  used = strlen(wait_out);

    if (used + len >= sizeof(wait_out)) {
        return -1;
    }

    memcpy(wait_out + used, data, len);
    wait_out[used + len] = '\0';
    return 0;
}


static void
wait_logger(void *target, mrb_run_rec *run, int level, const char *msg,
    size_t len)
{
}


static int
wait_log_enabled(void *target, mrb_run_rec *run, int level)
{
    return 0;
}


static int
wait_wake_after(mrb_run_rec *run, mrb_int msec)
{
    wait_timers++;
    wait_last_msec = msec;
    return 0;
}


/*
 * A part that keeps a value of the run, as Regexp keeps the last match:
 * part_keep(v) keeps v (in an instance variable of Kernel, which the
 * top-level cleanup does not watch) and marks the part dirty; part_kept
 * reads it.  Its take makes a copy, so that it allocates as Regexp's may.
 * wait_part_ends counts its run_end calls.
 */
static const mrb_part  wait_part;
static int             wait_part_ends;


static mrb_value
wait_part_self(mrb_state *mrb)
{
    return mrb_obj_value(mrb->kernel_module);
}


static mrb_value
wait_part_keep(mrb_state *mrb, mrb_value self)
{
    mrb_iv_set(mrb, wait_part_self(mrb), mrb_intern_lit(mrb, "__kept__"),
               mrb_get_arg1(mrb));
    mrb_part_dirty(mrb, &wait_part);
    return mrb_nil_value();
}


static mrb_value
wait_part_kept(mrb_state *mrb, mrb_value self)
{
    return mrb_iv_get(mrb, wait_part_self(mrb),
                      mrb_intern_lit(mrb, "__kept__"));
}


static void
wait_part_define(mrb_state *mrb)
{
    mrb_define_method(mrb, mrb->kernel_module, "part_keep", wait_part_keep,
                      MRB_ARGS_REQ(1));
    mrb_define_method(mrb, mrb->kernel_module, "part_kept", wait_part_kept,
                      MRB_ARGS_NONE());
    mrb_iv_set(mrb, wait_part_self(mrb), mrb_intern_lit(mrb, "__kept__"),
               mrb_nil_value());
}


static int
wait_part_run_end(mrb_state *mrb, const mrb_run_rec *run)
{
    wait_part_ends++;
    mrb_iv_set(mrb, wait_part_self(mrb), mrb_intern_lit(mrb, "__kept__"),
               mrb_nil_value());
    return 0;
}


static mrb_value
wait_part_take(mrb_state *mrb)
{
    mrb_value  v = wait_part_kept(mrb, mrb_nil_value());

    return mrb_string_p(v) ? mrb_str_dup(mrb, v) : v;
}


static void
wait_part_put_back(mrb_state *mrb, mrb_value kept)
{
    mrb_iv_set(mrb, wait_part_self(mrb), mrb_intern_lit(mrb, "__kept__"),
               kept);
}


static const mrb_part  wait_part = {
    "test", wait_part_define, wait_part_run_end, wait_part_take,
    wait_part_put_back
};

static const mrb_part *const  wait_parts[] = { &wait_part, NULL };


static const mrb_server  wait_server = {
    .name = "Test", .class_name = "Nginx", .module_name = "ngx_mruby",
    .module_version = "test", .log_level_base = 1, .write = wait_write,
    .log = wait_logger, .log_enabled = wait_log_enabled,
    .wake_after = wait_wake_after, .parts = wait_parts
};


static mrb_interp *
wait_interp(void)
{
    char         err[256];
    mrb_interp  *interp = mrb_interp_open(&wait_server, NULL, err,
                                          sizeof(err));

    if (interp != NULL) {
        mrb_interp_seal(interp);
    }

    wait_out[0] = '\0';
    wait_timers = 0;
    return interp;
}


static mrb_script *
wait_script(const char *code)
{
    char  err[256];

    return mrb_script_from_code(code, strlen(code), "script.rb", 1, err,
                                sizeof(err));
}


/* Starts code as a run that may wait. */
static int
wait_start(mrb_interp *interp, mrb_script *s, mrb_run_rec *run)
{
    mrb_run_init(run, (void *) 1, 0);
    run->may_wait = 1;
    return mrb_script_run(interp, s, run);
}


/* Runs code to its end, resuming it each time it waits (with a full GC in
 * between, so that what a suspended run holds must be reachable). */
static int
wait_run_through(mrb_interp *interp, const char *code, mrb_run_rec *run,
    int *waits)
{
    mrb_script  *s = wait_script(code);
    mrb_run_rec *waiting;
    int          rc;

    *waits = 0;
    if (s == NULL) {
        return -2;
    }

    rc = wait_start(interp, s, run);
    while (rc == MRB_RUN_WAITING) {
        (*waits)++;
        waiting = run->waiting;
        mrb_full_gc(mrb_interp_state(interp));
        rc = mrb_wait_resume(interp, waiting, run);
    }

    mrb_script_free(s);
    return rc;
}


TEST(wait_a_run_that_never_waits_ends_at_once)
{
    mrb_interp  *interp = wait_interp();
    mrb_run_rec  run;
    unsigned     live, idle;
    int          waits;

    REQUIRE(interp != NULL);

    /* names no waiting method: on the thread's stack */
    CHECK_EQ(wait_run_through(interp, "Nginx.rputs 'hi'; Nginx.return 7",
                              &run, &waits), 0);
    CHECK_EQ(waits, 0);
    CHECK(strcmp(wait_out, "hi") == 0);
    CHECK_EQ(run.result, 7);
    CHECK(run.returned);
    mrb_wait_counts(interp, &live, &idle);
    CHECK_EQ(live + idle, 0);

    /* names one, does not call it: on a coroutine, done at once */
    CHECK_EQ(wait_run_through(interp, "sleep 1 if $never; Nginx.rputs '!'",
                              &run, &waits), 0);
    CHECK_EQ(waits, 0);
    CHECK(strcmp(wait_out, "hi!") == 0);
    mrb_wait_counts(interp, &live, &idle);
    CHECK_EQ(live, 0);
    CHECK_EQ(idle, 1);
    mrb_interp_close(interp);
}


/* What an adapter asks before it runs a script where it may wait (nginx's
 * mruby_set): whether the run would go on a coroutine. */
TEST(wait_whether_a_script_names_something_that_waits)
{
    mrb_interp  *interp = wait_interp();
    mrb_script  *quiet = wait_script("'computed'.upcase");
    mrb_script  *naps = wait_script("Nginx::Async.sleep 1 if $never; 'x'");
    mrb_script  *init = wait_script("def nap; sleep 1; end");
    mrb_run_rec  run;

    REQUIRE(interp != NULL && quiet != NULL && naps != NULL && init != NULL);
    CHECK_EQ(mrb_script_names_wait(interp, quiet), 0);
    CHECK_EQ(mrb_script_names_wait(interp, naps), 1);
    /* asked again: the scan's answer kept in the loaded proc */
    CHECK_EQ(mrb_script_names_wait(interp, quiet), 0);

    /* a startup script that names one: every script may wait */
    mrb_run_init(&run, NULL, 0);
    run.startup = 1;
    CHECK_EQ(mrb_script_run(interp, init, &run), 0);
    CHECK_EQ(mrb_script_names_wait(interp, quiet), 1);

    mrb_script_free(quiet);
    mrb_script_free(naps);
    mrb_script_free(init);
    mrb_interp_close(interp);
}


/* The startup script of the two tests below: nap is a method that waits. */
#define WAIT_STARTUP_NAP  "def nap; Nginx::Async.sleep(1); end"


/* Seals interp, whose startup defined nap: a run that calls it waits. */
static void
wait_nap_waits(mrb_interp *interp)
{
    mrb_run_rec  run;
    int      waits;

    mrb_interp_seal(interp);
    wait_out[0] = '\0';

    CHECK_EQ(wait_run_through(interp, "nap; Nginx.rputs 'woke'", &run,
                              &waits), 0);
    CHECK_EQ(waits, 1);
    CHECK(strcmp(wait_out, "woke") == 0);
}


/* A method defined by a startup script may wait: every run may then. */
TEST(wait_a_startup_script_that_names_sleep_puts_every_run_on_a_coroutine)
{
    char         err[256];
    mrb_interp  *interp = mrb_interp_open(&wait_server, NULL, err,
                                          sizeof(err));
    mrb_script  *init = wait_script(WAIT_STARTUP_NAP);
    mrb_run_rec  run;

    REQUIRE(interp != NULL && init != NULL);
    mrb_run_init(&run, NULL, 0);
    run.startup = 1;
    CHECK_EQ(mrb_script_run(interp, init, &run), 0);
    wait_nap_waits(interp);

    mrb_script_free(init);
    mrb_interp_close(interp);
}


/* Where mruby's own Fiber says "can't cross C function boundary". */
TEST(wait_anywhere_even_inside_blocks_and_methods_that_c_called)
{
    mrb_interp  *interp = wait_interp();
    mrb_run_rec  run;
    int          waits;

    REQUIRE(interp != NULL);
    CHECK_EQ(wait_run_through(interp,
        "h = Hash.new { |hash, k| Nginx::Async.sleep(5); hash[k] = k * 2 }\n"
        "o = Object.new\n"
        "def o.to_s; Nginx::Async.sleep(1); 'obj'; end\n"
        "Nginx.rputs \"#{h[21]} #{o} \"\n"
        "s = [3, 1, 2].sort_by { |x| Nginx::Async.sleep(1); x }\n"
        "Nginx.rputs s.map { |x| sleep(0.001); x * 10 }.join(',')\n"
        "[1].each { |x| Nginx.sleep(0) }\n"
        "def later(x); Nginx::Async.sleep(1); x; end\n"
        "Nginx.rputs send(:later, ' sent')\n",
        &run, &waits), 0);

    CHECK(strcmp(wait_out, "42 obj 10,20,30 sent") == 0);
    CHECK_EQ(waits, 1 + 1 + 3 + 3 + 1 + 1);
    CHECK_EQ(wait_timers, waits);
    if (strcmp(wait_out, "42 obj 10,20,30 sent") != 0) {
        printf("  out: %s\n  error: %s\n", wait_out, run.error);
    }
    mrb_interp_close(interp);
}


TEST(wait_sleep_takes_seconds_and_async_sleep_milliseconds)
{
    mrb_interp  *interp = wait_interp();
    mrb_run_rec  run;
    int          waits;

    REQUIRE(interp != NULL);
    CHECK_EQ(wait_run_through(interp, "sleep 0.25", &run, &waits), 0);
    CHECK_EQ(wait_last_msec, 250);
    CHECK_EQ(wait_run_through(interp, "Nginx::Async.sleep 30", &run,
                              &waits), 0);
    CHECK_EQ(wait_last_msec, 30);
    CHECK_EQ(wait_run_through(interp, "Nginx::Async.sleep(-1)", &run,
                              &waits), -1);
    CHECK(strstr(run.error, "ArgumentError") != NULL);
    CHECK_EQ(wait_run_through(interp, "sleep(0.0 / 0.0)", &run, &waits), -1);
    CHECK(strstr(run.error, "ArgumentError") != NULL);
    CHECK_EQ(wait_run_through(interp, "sleep 1e300", &run, &waits), -1);
    CHECK(strstr(run.error, "ArgumentError") != NULL);
    CHECK_EQ(wait_run_through(interp, "sleep(-1)", &run, &waits), -1);
    CHECK(strstr(run.error, "0 to 86400") != NULL);
    mrb_interp_close(interp);
}


/* Two runs interleaved: each keeps its own locals, frames and output. */
TEST(wait_runs_interleave)
{
    mrb_interp  *interp = wait_interp();
    mrb_script  *a = wait_script(
        "x = 'a1'; Nginx::Async.sleep(1); Nginx.rputs x\n"
        "y = [x, 'a2'].map { |v| Nginx::Async.sleep(1); v }\n"
        "Nginx.rputs y.last");
    mrb_script  *b = wait_script(
        "x = 'b1'; Nginx::Async.sleep(1); Nginx.rputs x");
    mrb_run_rec  ra, rb, *wa, *wb;

    REQUIRE(interp != NULL && a != NULL && b != NULL);

    CHECK_EQ(wait_start(interp, a, &ra), MRB_RUN_WAITING);
    CHECK_EQ(wait_start(interp, b, &rb), MRB_RUN_WAITING);
    wa = ra.waiting;
    wb = rb.waiting;

    CHECK_EQ(mrb_wait_resume(interp, wa, &ra), MRB_RUN_WAITING);
    mrb_full_gc(mrb_interp_state(interp));
    CHECK_EQ(mrb_wait_resume(interp, wb, &rb), 0);
    CHECK_EQ(mrb_wait_resume(interp, wa, &ra), MRB_RUN_WAITING);
    CHECK_EQ(mrb_wait_resume(interp, wa, &ra), 0);

    CHECK(strcmp(wait_out, "a1b1a2") == 0);

    mrb_script_free(a);
    mrb_script_free(b);
    mrb_interp_close(interp);
}


TEST(wait_an_exception_after_a_resume_fails_the_run_with_file_line)
{
    mrb_interp  *interp = wait_interp();
    mrb_run_rec  run;
    int          waits;

    REQUIRE(interp != NULL);
    CHECK_EQ(wait_run_through(interp,
                              "Nginx::Async.sleep(1)\n"
                              "raise ArgumentError, 'after the nap'\n",
                              &run, &waits), -1);
    CHECK_EQ(waits, 1);
    CHECK(strstr(run.error, "ArgumentError: after the nap") != NULL);
    CHECK(strstr(run.error, "script.rb:2") != NULL);

    /* the interpreter goes on */
    CHECK_EQ(wait_run_through(interp, "Nginx.rputs 'ok'", &run, &waits), 0);
    CHECK(strstr(wait_out, "ok") != NULL);
    mrb_interp_close(interp);
}


TEST(wait_cancel_unwinds_the_run_and_frees_its_stack)
{
    mrb_interp  *interp = wait_interp();
    mrb_script  *s = wait_script(
        "begin\n"
        "  begin\n"
        "    Nginx::Async.sleep(1000)\n"
        "  rescue => e\n"
        "    Nginx.rputs 'rescued'\n"
        "  end\n"
        "ensure\n"
        "  Nginx.rputs 'ensure'\n"
        "end\n"
        "Nginx.rputs 'after'\n");
    mrb_run_rec  run;
    unsigned     live, idle;

    REQUIRE(interp != NULL && s != NULL);
    CHECK_EQ(wait_start(interp, s, &run), MRB_RUN_WAITING);
    mrb_wait_counts(interp, &live, &idle);
    CHECK_EQ(live, 1);

    mrb_wait_cancel(interp, run.waiting);

    CHECK(strcmp(wait_out, "ensure") == 0);
    mrb_wait_counts(interp, &live, &idle);
    CHECK_EQ(live, 0);

    mrb_script_free(s);
    mrb_interp_close(interp);
}


TEST(wait_where_a_run_cannot_wait_the_script_gets_an_error)
{
    mrb_interp  *interp = wait_interp();
    mrb_script  *s = wait_script("sleep 1");
    mrb_run_rec  run;

    REQUIRE(interp != NULL && s != NULL);
    mrb_run_init(&run, (void *) 1, 0);
    CHECK_EQ(mrb_script_run(interp, s, &run), -1);
    CHECK(strstr(run.error, "sleep: cannot wait here") != NULL);
    CHECK_EQ(wait_timers, 0);

    mrb_script_free(s);
    mrb_interp_close(interp);
}


/* Fibers of the script's own still work inside a run that waits. */
TEST(wait_inside_a_scripts_own_fiber)
{
    mrb_interp  *interp = wait_interp();
    mrb_run_rec  run;
    int          waits;

    REQUIRE(interp != NULL);
    CHECK_EQ(wait_run_through(interp,
        "f = Fiber.new { Nginx::Async.sleep(1); Fiber.yield 'y'; 'z' }\n"
        "Nginx.rputs f.resume\n"
        "Nginx::Async.sleep(1)\n"
        "Nginx.rputs f.resume\n",
        &run, &waits), 0);
    CHECK_EQ(waits, 2);
    CHECK(strcmp(wait_out, "yz") == 0);
    mrb_interp_close(interp);
}


BENCH(bench_wait_suspend_resume_from_ruby)
{
    mrb_interp  *interp = wait_interp();
    mrb_script  *s = wait_script("20000.times { Nginx::Async.sleep(0) }");
    mrb_run_rec  run;
    uint64_t     t0, t, best = UINT64_MAX;
    int          rc, r, n = 0;

    /* the fastest of 10 runs of 20,000 (see test_coro.c's benches) */
    for (r = 0; r < 10; r++) {
        n = 0;
        t0 = unit_now_ns();
        rc = wait_start(interp, s, &run);
        while (rc == MRB_RUN_WAITING) {
            n++;
            rc = mrb_wait_resume(interp, run.waiting, &run);
        }
        t = unit_now_ns() - t0;
        best = t < best ? t : best;
    }

    unit_report("Async.sleep(0) from Ruby: suspend + resume (fastest of 10)",
                (double) best / n, "ns");

    t0 = unit_now_ns();
    mrb_script_free(s);
    s = wait_script("Nginx.return 1; sleep 1 if $never");
    for (n = 0; n < 200000; n++) {
        wait_start(interp, s, &run);
    }
    unit_report("a run that could wait and does not, on a coroutine",
                (double) (unit_now_ns() - t0) / n, "ns");

    t0 = unit_now_ns();
    for (n = 0; n < 200000; n++) {
        mrb_run_init(&run, (void *) 1, 0);
        mrb_script_run(interp, s, &run);
    }
    unit_report("the same run, not asked to wait: on the thread's stack",
                (double) (unit_now_ns() - t0) / n, "ns");

    mrb_script_free(s);
    mrb_interp_close(interp);
}


/* Many runs waiting at once, garbage made in between: what each holds
 * stays alive, and the contexts of finished runs are reused. */
TEST(wait_many_runs_wait_at_once)
{
    mrb_interp  *interp = wait_interp();
    mrb_script  *s = wait_script(
        "a = 'x' * 100\n"
        "begin\n"
        "  Nginx::Async.sleep(1)\n"
        "  b = [a] * 3\n"
        "  Nginx::Async.sleep(1)\n"
        "ensure\n"
        "  Nginx.rputs b.join.size == 300 ? '' : 'bad'\n"
        "end\n");
    mrb_script  *g = wait_script("200.times { [1, 2, 3].map { |x| x.to_s * 20 } }");
    static mrb_run_rec  runs[150];
    mrb_run_rec gr;
    unsigned     live, idle;
    int          i, round;

    REQUIRE(interp != NULL && s != NULL && g != NULL);

    for (round = 0; round < 3; round++) {
        for (i = 0; i < 150; i++) {
            CHECK_EQ(wait_start(interp, s, &runs[i]), MRB_RUN_WAITING);
            mrb_run_init(&gr, (void *) 1, 0);
            mrb_script_run(interp, g, &gr);
        }
        for (i = 0; i < 150; i++) {
            CHECK_EQ(mrb_wait_resume(interp, runs[i].waiting, &runs[i]),
                     MRB_RUN_WAITING);
            mrb_run_init(&gr, (void *) 1, 0);
            mrb_script_run(interp, g, &gr);
        }
        for (i = 0; i < 150; i++) {
            CHECK_EQ(mrb_wait_resume(interp, runs[i].waiting, &runs[i]), 0);
        }
    }

    CHECK(strcmp(wait_out, "") == 0);
    mrb_wait_counts(interp, &live, &idle);
    CHECK_EQ(live, 0);

    mrb_script_free(s);
    mrb_script_free(g);
    mrb_interp_close(interp);
}


/* Recursion through to_s called by interpolation: on a coroutine's fixed
 * stack it ends in SystemStackError, not in the guard page. */
TEST(wait_deep_recursion_on_a_coroutine_is_a_system_stack_error)
{
    mrb_interp  *interp = wait_interp();
    mrb_run_rec  run;
    int          waits;

    REQUIRE(interp != NULL);
    CHECK_EQ(wait_run_through(interp,
        "class Deep\n"
        "  def initialize(n); @n = n; end\n"
        "  def to_s; @n == 0 ? 'bottom' : \"#{Deep.new(@n - 1)}\"; end\n"
        "end\n"
        "sleep 0.001\n"
        "Nginx.rputs Deep.new(100_000).to_s\n",
        &run, &waits), -1);
    CHECK(strstr(run.error, "SystemStackError") != NULL);

    /* and the interpreter runs the next script */
    CHECK_EQ(wait_run_through(interp, "sleep 0; Nginx.rputs 'next'", &run,
                              &waits), 0);
    CHECK(strcmp(wait_out, "next") == 0);
    mrb_interp_close(interp);
}


/* Runs s to its end, resuming it each time it waits, with a budget. */
static int
wait_run_budget(mrb_interp *interp, mrb_script *s, size_t limit,
    mrb_run_rec *run)
{
    int  rc;

    mrb_run_init(run, (void *) 1, 0);
    run->may_wait = 1;
    run->memory_limit = limit;
    rc = mrb_script_run(interp, s, run);
    while (rc == MRB_RUN_WAITING) {
        rc = mrb_wait_resume(interp, run->waiting, run);
    }

    return rc;
}


/*
 * A run on a coroutine past its memory budget, with the budget set a few
 * bytes apart each time so that the refusal falls on each kind of block in
 * turn, also the copy of the script's env that mruby makes as it pops the
 * script's frame: each run fails with NoMemoryError and where it was, and
 * the interpreter runs the next script; so does a run that rescued it and
 * ends at its budget.  Before, a NoMemoryError raised in that copy unwound
 * to the coroutine's first frame, where mruby 3.1 ended the context and
 * went on in a NULL previous one (SIGSEGV).
 */
TEST(wait_a_run_past_its_memory_budget_on_a_coroutine_fails_cleanly)
{
    mrb_interp  *interp = wait_interp();
    mrb_script  *s = wait_script("sleep 0\n"
                                 "a = []; loop { a << 'x' * 64 }\n");
    mrb_run_rec  run;
    size_t       limit;
    int          failed, waits;

    REQUIRE(interp != NULL && s != NULL);

    for (limit = 256 * 1024; limit < 256 * 1024 + 2048; limit += 8) {
        CHECK_EQ(wait_run_budget(interp, s, limit, &run), -1);
        CHECK(strstr(run.error, "NoMemoryError: past the run's memory "
                     "budget of ") != NULL);
        CHECK(strstr(run.error, "(script.rb:2)") != NULL);
    }
    mrb_script_free(s);

    /* rescued twice, the second time at a block of 24 bytes (3.1) or a
     * heap page (3.3 keeps 'x' * 8 in the object), the run ends with fewer
     * left than the copy needs: the copy is refused as the script's frame
     * returns, and the run fails.  The proc in a global keeps the env
     * alive: 3.3 skips the copy of one the collection in the failing
     * allocation found unreachable. */
    s = wait_script("sleep 0\n"
                    "a = Array.new(20_000); i = 0\n"
                    "$kept = proc { a }\n"
                    "begin\n"
                    "  loop { a[i] = 'x' * 64; i += 1 }\n"
                    "rescue NoMemoryError\n"
                    "  begin\n"
                    "    loop { a[i] = 'x' * 8; i += 1 }\n"
                    "  rescue NoMemoryError\n"
                    "  end\n"
                    "end\n");
    REQUIRE(s != NULL);
    /* 256 budgets spread over more than a heap page (about 48 kB), so
     * that the last refusal falls on a string, not always on the page */
    failed = 0;
    for (limit = 1024 * 1024; limit < 1024 * 1024 + 256 * 264;
         limit += 264)
    {
        if (wait_run_budget(interp, s, limit, &run) != 0) {
            CHECK(strstr(run.error, "NoMemoryError: past the run's memory "
                         "budget of ") != NULL);
            failed++;
        }
    }
    CHECK(failed > 0);

    mrb_script_free(s);
    CHECK_EQ(wait_run_through(interp, "sleep 0; Nginx.rputs 'next'", &run,
                              &waits), 0);
    CHECK(strcmp(wait_out, "next") == 0);
    mrb_interp_close(interp);
}


/* A cancelled run's ensure that waits again gets Cancelled at once: no
 * timer is armed for a request that is going away. */
TEST(wait_a_cancelled_run_cannot_arm_a_timer_again)
{
    mrb_interp  *interp = wait_interp();
    mrb_script  *s = wait_script(
        "begin\n"
        "  Nginx::Async.sleep(1000)\n"
        "ensure\n"
        "  begin\n"
        "    Nginx::Async.sleep(5)\n"
        "  rescue Exception => e\n"
        "    Nginx.rputs e.class.to_s\n"
        "  end\n"
        "end\n");
    mrb_run_rec  run;
    unsigned     live, idle;

    REQUIRE(interp != NULL && s != NULL);
    CHECK_EQ(wait_start(interp, s, &run), MRB_RUN_WAITING);
    CHECK_EQ(wait_timers, 1);

    mrb_wait_cancel(interp, run.waiting);

    CHECK_EQ(wait_timers, 1);
    CHECK(strcmp(wait_out, "Nginx::Async::Cancelled") == 0);
    mrb_wait_counts(interp, &live, &idle);
    CHECK_EQ(live, 0);

    mrb_script_free(s);
    mrb_interp_close(interp);
}


/*
 * Out of memory for a new run's context, at each allocation in turn: the
 * run fails with an error instead of aborting the process (nothing above
 * it catches a raise yet), the slot it took is freed, and the GC arena is
 * as before.  An entry left there per failure made the arena grow inside
 * a failing allocation, where mruby 3.1 raises its capacity before the
 * realloc that fails; the next entries were then written past its end
 * (a singleton class's method table, once the interpreter defined one more
 * class).  The room asked for below keeps every failure of the loops out
 * of that window, whatever the interpreter defines.
 */
TEST(wait_out_of_memory_for_a_new_context_fails_the_run)
{
    mrb_interp  *interp = wait_interp();
    mrb_script  *s = wait_script("Nginx::Async.sleep(1)\n"
                                 "Nginx.rputs 'x'\n");
    mrb_state   *mrb;
    mrb_run_rec  held, run;
    size_t       before;
    long         n, failures;
    int          i, ai;

    REQUIRE(interp != NULL && s != NULL);
    mrb = mrb_interp_state(interp);

    /* loaded and scanned; the slot stays held, so that none is idle */
    REQUIRE(wait_start(interp, s, &held) == MRB_RUN_WAITING);
    ai = mrb_gc_arena_save(mrb);
#if !defined(MRB_GC_FIXED_ARENA)
    REQUIRE(mrb->gc.arena_capa - ai >= 32);
#endif

    /* the allocations a new run makes, each failing in turn */
    for (failures = 0; failures < 1000; failures++) {
        mrb_run_init(&run, (void *) 1, 0);
        run.may_wait = 1;
        unit_oom_after(mrb, failures);
        if (mrb_script_run(interp, s, &run) == MRB_RUN_WAITING) {
            break;
        }
        unit_oom_end(mrb);
        CHECK(strstr(run.error, "out of memory") != NULL);
        REQUIRE(mrb_gc_arena_save(mrb) == ai);
    }
    unit_oom_end(mrb);
    REQUIRE(run.waiting != NULL);
    CHECK(failures > 3);

    /* the same failures 100 times more: nothing stays but what the
     * interpreter's allocator keeps (mrb_alloc.h: at most 64 kB) */
    mrb_full_gc(mrb);
    before = unit_heap_bytes();
    for (i = 0; i < 100; i++) {
        for (n = 0; n < failures; n++) {
            mrb_run_init(&run, (void *) 1, 0);
            run.may_wait = 1;
            unit_oom_after(mrb, n);
            CHECK_EQ(mrb_script_run(interp, s, &run), -1);
            unit_oom_end(mrb);
            REQUIRE(mrb_gc_arena_save(mrb) == ai);
        }
    }
    mrb_full_gc(mrb);

    /* a slot left behind is over a kilobyte, on each of the failures */
    if (unit_heap_bytes() > before + MRB_ALLOC_KEEP_BYTES) {
        unit_fail(__FILE__, __LINE__, "the heap grew by %zu bytes in %ld "
                  "failures", unit_heap_bytes() - before, failures);
    }

    CHECK_EQ(mrb_wait_resume(interp, held.waiting, &held), 0);
    CHECK(strcmp(wait_out, "x") == 0);
    mrb_script_free(s);
    mrb_interp_close(interp);
}


/*
 * Out of memory for the interpreter's wait state, which its first run that
 * may wait makes, at each allocation in turn (from a full object heap, so
 * that the state's first object needs a page): the run fails with the
 * coroutine's out-of-memory error (the raise had no protect frame above it,
 * and mruby aborted the process), the state is freed, so that the next run
 * makes it again, and the GC arena is as before.
 */
TEST(wait_out_of_memory_for_the_wait_state_fails_the_first_run)
{
    mrb_interp  *interp = wait_interp();
    mrb_script  *s = wait_script("Nginx::Async.sleep(1)\n"
                                 "Nginx.rputs 'x'\n");
    mrb_state   *mrb;
    mrb_run_rec  run;
    size_t       before;
    long         failures;
    int          i, rc, ai;

    REQUIRE(interp != NULL && s != NULL);
    mrb = mrb_interp_state(interp);

    /* loaded, by a run that may not wait: no state yet */
    mrb_run_init(&run, (void *) 1, 0);
    CHECK_EQ(mrb_script_run(interp, s, &run), -1);
    CHECK(strstr(run.error, "cannot wait here") != NULL);
    REQUIRE(*mrb_interp_wait_state(interp) == NULL);
    ai = mrb_gc_arena_save(mrb);
#if !defined(MRB_GC_FIXED_ARENA)
    REQUIRE(mrb->gc.arena_capa - ai >= 32);
#endif

    /* the first failure, 200 times: a state left behind is over a
     * kilobyte each time */
    before = unit_heap_bytes();
    for (i = 0; i < 200; i++) {
        unit_oom_heap_full(mrb);
        mrb_run_init(&run, (void *) 1, 0);
        run.may_wait = 1;
        unit_oom_after(mrb, 0);
        CHECK_EQ(mrb_script_run(interp, s, &run), -1);
        unit_oom_end(mrb);
        REQUIRE(unit_oom_failed());
        REQUIRE(*mrb_interp_wait_state(interp) == NULL);
        REQUIRE(mrb_gc_arena_save(mrb) == ai);
    }
    if (unit_heap_bytes() > before + MRB_ALLOC_KEEP_BYTES) {
        unit_fail(__FILE__, __LINE__, "the heap grew by %zu bytes in 200 "
                  "failures", unit_heap_bytes() - before);
    }
    CHECK(strstr(run.error, "out of memory for the run's coroutine")
          != NULL);

    /* each allocation in turn, until the state is made */
    rc = -1;
    for (failures = 0; failures < 1000; failures++) {
        unit_oom_heap_full(mrb);
        mrb_run_init(&run, (void *) 1, 0);
        run.may_wait = 1;
        unit_oom_after(mrb, failures);
        rc = mrb_script_run(interp, s, &run);
        unit_oom_end(mrb);
        if (*mrb_interp_wait_state(interp) != NULL) {
            break;
        }
        CHECK_EQ(rc, -1);
        CHECK(strstr(run.error, "out of memory") != NULL);
        REQUIRE(mrb_gc_arena_save(mrb) == ai);
    }
    REQUIRE(*mrb_interp_wait_state(interp) != NULL);
    CHECK(failures > 0);

    /* then the run goes as far as the allocations left let it
     * (wait_out_of_memory_for_a_new_context_fails_the_run); with none
     * failing it waits and ends */
    if (rc != MRB_RUN_WAITING) {
        CHECK_EQ(wait_start(interp, s, &run), MRB_RUN_WAITING);
    }
    wait_out[0] = '\0';
    CHECK_EQ(mrb_wait_resume(interp, run.waiting, &run), 0);
    CHECK(strcmp(wait_out, "x") == 0);

    mrb_script_free(s);
    mrb_interp_close(interp);
}


/*
 * Out of memory for the wait state in a startup run: the state it could not
 * make does not tell whether the methods it defined wait, so every run
 * that may wait takes a coroutine, and one that calls such a method waits
 * (instead of failing with "cannot wait here").
 */
TEST(wait_out_of_memory_for_the_wait_state_in_startup_keeps_waits)
{
    char         err[256];
    mrb_interp  *interp = mrb_interp_open(&wait_server, NULL, err,
                                          sizeof(err));
    mrb_script  *init = wait_script(WAIT_STARTUP_NAP);
    mrb_state   *mrb;
    mrb_run_rec  run;

    REQUIRE(interp != NULL && init != NULL);
    mrb = mrb_interp_state(interp);

    /* compiled into this interpreter first, so that the one failure below
     * falls in the state */
    mrb_run_init(&run, NULL, 0);
    CHECK_EQ(mrb_script_run(interp, init, &run), 0);
    REQUIRE(*mrb_interp_wait_state(interp) == NULL);

    unit_oom_heap_full(mrb);
    mrb_run_init(&run, NULL, 0);
    run.startup = 1;
    unit_oom_once(mrb, 0);
    CHECK_EQ(mrb_script_run(interp, init, &run), 0);
    unit_oom_end(mrb);
    REQUIRE(unit_oom_failed());
    REQUIRE(*mrb_interp_wait_state(interp) == NULL);
    wait_nap_waits(interp);

    mrb_script_free(init);
    mrb_interp_close(interp);
}


static int
wait_wake_on_fd(mrb_run_rec *run, int fd, int events, mrb_int msec, int *ready)
{
    return -1;
}


/* wait_server with a loop that can watch sockets (nginx's side) */
static const mrb_part *const  wait_redis_parts[] = { &mrb_redis_part, NULL };

static const mrb_server  wait_fd_server = {
    .name = "Test", .class_name = "Nginx", .module_name = "ngx_mruby",
    .module_version = "test", .log_level_base = 1, .write = wait_write,
    .log = wait_logger, .log_enabled = wait_log_enabled,
    .wake_after = wait_wake_after, .wake_on_fd = wait_wake_on_fd,
    .parts = wait_redis_parts
};


/* A script that names Redis runs on a coroutine only where the server can
 * watch its socket (nginx); elsewhere (Apache) it would block anyway. */
TEST(wait_redis_puts_a_run_on_a_coroutine_only_where_sockets_are_watched)
{
    char         err[256];
    mrb_interp  *interp;
    mrb_run_rec  run;
    unsigned     live, idle;
    int          waits;

    interp = wait_interp();
    REQUIRE(interp != NULL);
    CHECK_EQ(wait_run_through(interp, "Redis if $never; Nginx.rputs 'a'",
                              &run, &waits), 0);
    mrb_wait_counts(interp, &live, &idle);
    CHECK_EQ(live + idle, 0);
    mrb_interp_close(interp);

    interp = mrb_interp_open(&wait_fd_server, NULL, err, sizeof(err));
    REQUIRE(interp != NULL);
    mrb_interp_seal(interp);
    CHECK_EQ(wait_run_through(interp, "Redis if $never; Nginx.rputs 'b'",
                              &run, &waits), 0);
    mrb_wait_counts(interp, &live, &idle);
    CHECK_EQ(live, 0);
    CHECK_EQ(idle, 1);
    mrb_interp_close(interp);
}


/*
 * What a run sets at top level before it waits: it finds its own values
 * after the wait, while runs that run meanwhile (one that sets the same
 * names and waits too, one that sets nothing) see only the sealed state,
 * and a full GC in between frees nothing it set.  Each ends as sealed.
 */
#define WAIT_TL_SET(v)                                                     \
    "$tl = '" v "'; TL = '" v "'; @tl = '" v "'\n"                         \
    "Nginx::HTTP_OK = '" v "'\n"                                           \
    "Nginx.send(:remove_const, :HTTP_NOT_FOUND)\n"                         \
    "module Kernel; def tl_m; '" v "'; end; def server_name; '" v "'; end;" \
    " end\n"                                                               \
    "Nginx.freeze\n"                                                       \
    "Nginx::Async.sleep(1)\n"                                              \
    "Nginx.rputs \"#{$tl}#{TL}#{@tl}#{Nginx::HTTP_OK}#{tl_m}#{server_name}"\
    " #{Nginx.const_defined?(:HTTP_NOT_FOUND)} #{Nginx.frozen?};\"\n"

#define WAIT_TL_PEEK                                                       \
    "Nginx.rputs \"[#{$tl.inspect} #{Object.const_defined?(:TL)} "         \
    "#{@tl.inspect} #{Nginx::HTTP_OK} #{respond_to?(:tl_m)} #{server_name}" \
    " #{Nginx.const_defined?(:HTTP_NOT_FOUND)} #{Nginx.frozen?}]\""

#define WAIT_TL_SEALED  "[nil false nil 200 false Test true false]"

TEST(wait_a_runs_top_level_state_is_its_own_across_its_wait)
{
    mrb_interp  *interp = wait_interp();
    mrb_script  *a = wait_script(WAIT_TL_SET("a"));
    mrb_script  *b = wait_script(WAIT_TL_SET("b"));
    mrb_script  *peek = wait_script(WAIT_TL_PEEK);
    mrb_state   *mrb;
    mrb_run_rec  ra, rb, rp, *wa, *wb;

    REQUIRE(interp != NULL && a != NULL && b != NULL && peek != NULL);
    mrb = mrb_interp_state(interp);

    CHECK_EQ(wait_start(interp, a, &ra), MRB_RUN_WAITING);
    wa = ra.waiting;
    CHECK_EQ(wait_start(interp, peek, &rp), 0);
    CHECK_EQ(wait_start(interp, b, &rb), MRB_RUN_WAITING);
    wb = rb.waiting;
    CHECK_EQ(wait_start(interp, peek, &rp), 0);

    mrb_full_gc(mrb);
    CHECK_EQ(mrb_wait_resume(interp, wa, &ra), 0);
    CHECK_EQ(wait_start(interp, peek, &rp), 0);
    mrb_full_gc(mrb);
    CHECK_EQ(mrb_wait_resume(interp, wb, &rb), 0);
    CHECK_EQ(wait_start(interp, peek, &rp), 0);

    CHECK(strcmp(wait_out, WAIT_TL_SEALED WAIT_TL_SEALED
                           "aaaaaa false true;" WAIT_TL_SEALED
                           "bbbbbb false true;" WAIT_TL_SEALED) == 0);
    if (ra.error[0] != '\0' || rb.error[0] != '\0') {
        printf("  out: %s\n  a: %s\n  b: %s\n", wait_out, ra.error,
               rb.error);
    }

    mrb_script_free(a);
    mrb_script_free(b);
    mrb_script_free(peek);
    mrb_interp_close(interp);
}


/*
 * Out of memory while a run's top-level state (and what a part keeps) is
 * taken aside (when another run starts while it waits) or put back (when
 * it resumes), at each allocation in turn: the run either goes on with
 * its own state or fails with NoMemoryError when it resumes (never goes
 * on without it); the other run sees the sealed state either way, nothing
 * crashes, and the heap does not grow.
 */
TEST(wait_out_of_memory_keeping_the_top_level_state_fails_the_run)
{
    mrb_interp  *interp = wait_interp();
    mrb_script  *a = wait_script(
        "$tl = 'a' * 2; TL = 'a' * 2; @tl = 'a' * 2\n"
        "part_keep('b' * 1)\n"
        "Nginx::Async.sleep(1)\n"
        "Nginx.rputs \"#{$tl}#{TL}#{@tl}#{part_kept};\"\n");
    mrb_script  *peek = wait_script(
        "Nginx.rputs \"[#{$tl.inspect} #{Object.const_defined?(:TL)} "
        "#{@tl.inspect} #{part_kept.inspect}]\"");
    mrb_state   *mrb;
    mrb_run_rec  ra, rp;
    size_t       before = 0;
    long         n;
    int          phase, rc, lost, kept, round, done;

    REQUIRE(interp != NULL && a != NULL && peek != NULL);
    mrb = mrb_interp_state(interp);

    /* loaded, scanned, a slot and the tables grown once */
    REQUIRE(wait_start(interp, a, &ra) == MRB_RUN_WAITING);
    REQUIRE(wait_start(interp, peek, &rp) == 0);
    REQUIRE(mrb_wait_resume(interp, ra.waiting, &ra) == 0);

    /* phase 0: failing from the start of the run in between (the take
     * fails); phase 1: from the waiting run's resumption (the put-back) */
    for (round = 0; round < 2; round++) {
        for (phase = 0; phase < 2; phase++) {
            lost = 0;
            kept = 0;
            done = 0;
            if (round == 1 && phase == 0) {
                mrb_full_gc(mrb);
                before = unit_heap_bytes();
            }

            for (n = 0; n < 1000 && !done; n++) {
                REQUIRE(wait_start(interp, a, &ra) == MRB_RUN_WAITING);

                wait_out[0] = '\0';
                if (phase == 0) {
                    unit_oom_after(mrb, n);
                }
                rc = wait_start(interp, peek, &rp);
                if (phase == 0) {
                    unit_oom_end(mrb);
                    done = !unit_oom_failed();
                }
                CHECK(rc == -1 || strcmp(wait_out, "[nil false nil nil]") == 0);

                wait_out[0] = '\0';
                REQUIRE(wait_start(interp, peek, &rp) == 0);
                CHECK(strcmp(wait_out, "[nil false nil nil]") == 0);

                wait_out[0] = '\0';
                if (phase == 1) {
                    unit_oom_after(mrb, n);
                }
                rc = mrb_wait_resume(interp, ra.waiting, &ra);
                if (phase == 1) {
                    unit_oom_end(mrb);
                    done = !unit_oom_failed();
                }

                if (rc == 0) {
                    CHECK(strcmp(wait_out, "aaaaaab;") == 0);
                    kept++;
                } else {
                    CHECK_EQ(rc, -1);
                    CHECK(strstr(ra.error, "NoMemoryError") != NULL);
                    lost++;
                }

                wait_out[0] = '\0';
                REQUIRE(wait_start(interp, peek, &rp) == 0);
                CHECK(strcmp(wait_out, "[nil false nil nil]") == 0);
            }

            /* putting back re-adds names to tables that kept their room:
             * it allocated nothing when this was written */
            CHECK(done);
            CHECK(phase == 1 || lost > 0);
            CHECK(kept > 0);
        }
    }

    /* the second round's failures: nothing stays but what the
     * interpreter's allocator keeps (mrb_alloc.h) */
    mrb_full_gc(mrb);
    if (unit_heap_bytes() > before + MRB_ALLOC_KEEP_BYTES) {
        unit_fail(__FILE__, __LINE__, "the heap grew by %zu bytes",
                  unit_heap_bytes() - before);
    }

    mrb_script_free(a);
    mrb_script_free(peek);
    mrb_interp_close(interp);
}


/*
 * A part whose take leaves the interpreter without what it took, as the
 * Mutex's does with the locks a run holds: part_hold(v) holds v, and its
 * run_end lets go of what is held (counted in wait_hold_released).
 */
static const mrb_part  wait_hold_part;
static int             wait_hold_released;


static mrb_value
wait_hold(mrb_state *mrb, mrb_value self)
{
    mrb_iv_set(mrb, wait_part_self(mrb), mrb_intern_lit(mrb, "__held__"),
               mrb_get_arg1(mrb));
    mrb_part_dirty(mrb, &wait_hold_part);
    return mrb_nil_value();
}


static void
wait_hold_define(mrb_state *mrb)
{
    mrb_define_method(mrb, mrb->kernel_module, "part_hold", wait_hold,
                      MRB_ARGS_REQ(1));
    mrb_iv_set(mrb, wait_part_self(mrb), mrb_intern_lit(mrb, "__held__"),
               mrb_nil_value());
}


static mrb_value
wait_hold_take(mrb_state *mrb)
{
    mrb_value  held = mrb_iv_get(mrb, wait_part_self(mrb),
                                 mrb_intern_lit(mrb, "__held__"));

    mrb_iv_set(mrb, wait_part_self(mrb), mrb_intern_lit(mrb, "__held__"),
               mrb_nil_value());
    return held;
}


static int
wait_hold_run_end(mrb_state *mrb, const mrb_run_rec *run)
{
    if (!mrb_nil_p(wait_hold_take(mrb))) {
        wait_hold_released++;
    }
    return 0;
}


static void
wait_hold_put_back(mrb_state *mrb, mrb_value held)
{
    mrb_iv_set(mrb, wait_part_self(mrb), mrb_intern_lit(mrb, "__held__"),
               held);
}


static const mrb_part  wait_hold_part = {
    "hold", wait_hold_define, wait_hold_run_end, wait_hold_take,
    wait_hold_put_back
};

/* the holding part first, as the Mutex's comes before Regexp's */
static const mrb_part *const  wait_hold_parts[] = {
    &wait_hold_part, &wait_part, NULL
};

static const mrb_server  wait_hold_server = {
    .name = "Test", .class_name = "Nginx", .module_name = "ngx_mruby",
    .module_version = "test", .log_level_base = 1, .write = wait_write,
    .log = wait_logger, .log_enabled = wait_log_enabled,
    .wake_after = wait_wake_after, .parts = wait_hold_parts
};


/*
 * Out of memory while the parts' state of a waiting run is taken aside, at
 * each allocation in turn: what the takes before the failing one took (a
 * held lock) stays the run's, so that it is let go once, when the run
 * ends.  (It was lost when a later take raised: a global Mutex then
 * stayed locked by a live process for ever.)
 */
TEST(wait_out_of_memory_taking_the_parts_state_keeps_what_was_taken)
{
    char         err[256];
    mrb_interp  *interp = mrb_interp_open(&wait_hold_server, NULL, err,
                                          sizeof(err));
    mrb_script  *a = wait_script(
        "part_hold('lock')\n"
        "part_keep('b' * 1)\n"
        "Nginx::Async.sleep(1)\n"
        "Nginx.rputs 'a;'\n");
    mrb_script  *peek = wait_script("Nginx.rputs 'peek;'\n");
    mrb_state   *mrb;
    mrb_run_rec  ra, rp;
    long         n;
    int          done = 0, lost = 0, rc;

    REQUIRE(interp != NULL && a != NULL && peek != NULL);
    mrb_interp_seal(interp);
    mrb = mrb_interp_state(interp);

    /* loaded, scanned, a slot and the tables grown once */
    REQUIRE(wait_start(interp, a, &ra) == MRB_RUN_WAITING);
    REQUIRE(wait_start(interp, peek, &rp) == 0);
    REQUIRE(mrb_wait_resume(interp, ra.waiting, &ra) == 0);

    for (n = 0; n < 1000 && !done; n++) {
        wait_hold_released = 0;
        REQUIRE(wait_start(interp, a, &ra) == MRB_RUN_WAITING);

        /* every object made below needs a new heap page: small ones
         * allocate nothing else */
        unit_oom_heap_full(mrb);
        unit_oom_after(mrb, n);
        wait_start(interp, peek, &rp);
        unit_oom_end(mrb);
        done = !unit_oom_failed();

        wait_out[0] = '\0';
        rc = mrb_wait_resume(interp, ra.waiting, &ra);
        if (rc != 0) {
            CHECK_EQ(rc, -1);
            CHECK(strstr(ra.error, "NoMemoryError") != NULL);
            lost++;
        }
        CHECK_EQ(wait_hold_released, 1);
    }

    CHECK(done);
    CHECK(lost > 0);

    mrb_script_free(a);
    mrb_script_free(peek);
    mrb_interp_close(interp);
}


/* wait_fd_server's loop, played by the test: the watch last asked for */
static int   wait_fd_events;
static int  *wait_fd_ready;


static int
wait_watch_fd(mrb_run_rec *run, int fd, int events, mrb_int msec, int *ready)
{
    wait_fd_events = events;
    wait_fd_ready = ready;
    return 0;
}


static const mrb_server  wait_watch_server = {
    .name = "Test", .class_name = "Nginx", .module_name = "ngx_mruby",
    .module_version = "test", .log_level_base = 1, .write = wait_write,
    .log = wait_logger, .log_enabled = wait_log_enabled,
    .wake_after = wait_wake_after, .wake_on_fd = wait_watch_fd,
    .parts = wait_redis_parts
};


/* A listening loopback socket; *port is set. */
static int
wait_listen(int *port)
{
    struct sockaddr_in  sa;
    socklen_t           len = sizeof(sa);
    int                 fd = socket(AF_INET, SOCK_STREAM, 0);

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    if (fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0
        || listen(fd, 4) != 0
        || getsockname(fd, (struct sockaddr *) &sa, &len) != 0)
    {
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }

    *port = ntohs(sa.sin_port);
    return fd;
}


/*
 * `Server = get_server_class` and a global before a Redis call (the
 * slide-30 script): the call suspends the run where the server watches
 * sockets, instead of blocking the thread in poll() as it did while the
 * top-level state could not survive a wait; a run meanwhile sees neither,
 * and the script finds both after the reply.  (A blocking poll here
 * would find no reply: the fake server answers only between resumptions.)
 */
TEST(wait_a_redis_call_after_a_top_level_constant_suspends_the_run)
{
    char          err[256], code[512], buf[256];
    mrb_interp   *interp;
    mrb_script   *s, *peek;
    mrb_run_rec   run, rp;
    struct pollfd pfd;
    int           lfd, cfd = -1, port, rc, waits = 0;

    lfd = wait_listen(&port);
    REQUIRE(lfd >= 0);
    snprintf(code, sizeof(code),
             "Server = get_server_class\n"
             "$g = 'g'\n"
             "v = Redis.new('127.0.0.1', %d, timeout: 1).get('k')\n"
             "Server.rputs \"#{v} #{$g} #{Server::HTTP_OK}\"\n", port);

    interp = mrb_interp_open(&wait_watch_server, NULL, err, sizeof(err));
    REQUIRE(interp != NULL);
    mrb_interp_seal(interp);
    wait_out[0] = '\0';
    s = wait_script(code);
    peek = wait_script("Nginx.rputs \"[#{$g.inspect} "
                       "#{Object.const_defined?(:Server)}]\"");
    REQUIRE(s != NULL && peek != NULL);

    rc = wait_start(interp, s, &run);
    while (rc == MRB_RUN_WAITING && waits < 10) {
        waits++;
        REQUIRE(wait_start(interp, peek, &rp) == 0);

        if (cfd < 0) {
            cfd = accept(lfd, NULL, NULL);
            REQUIRE(cfd >= 0);
        }

        if (wait_fd_events == MRB_FD_READ) {
            /* the GET is in: answer it */
            pfd.fd = cfd;
            pfd.events = POLLIN;
            REQUIRE(poll(&pfd, 1, 5000) == 1);
            CHECK(read(cfd, buf, sizeof(buf)) > 0);
            CHECK(write(cfd, "$1\r\nx\r\n", 7) == 7);
        }

        *wait_fd_ready = 1;
        rc = mrb_wait_resume(interp, run.waiting, &run);
    }

    CHECK_EQ(rc, 0);
    CHECK(waits >= 1);
    CHECK(strncmp(wait_out, "[nil false]", 11) == 0);
    CHECK(strstr(wait_out, "x g 200") != NULL);
    if (rc != 0) {
        printf("  out: %s\n  error: %s\n", wait_out, run.error);
    }

    if (cfd >= 0) {
        close(cfd);
    }
    close(lfd);
    mrb_script_free(s);
    mrb_script_free(peek);
    mrb_interp_close(interp);
}


/* What a part keeps of a run (as Regexp keeps the last match, outside the
 * top-level tables) is the run's own across its wait too: the run in
 * between sees none, and what it keeps does not replace the waiting
 * run's. */
TEST(wait_what_a_part_keeps_is_the_runs_own_across_its_wait)
{
    mrb_interp  *interp = wait_interp();
    mrb_script  *a = wait_script(
        "part_keep('ab')\n"
        "Nginx::Async.sleep(1)\n"
        "Nginx.rputs \"#{part_kept.inspect};\"\n");
    mrb_script  *peek = wait_script(
        "Nginx.rputs \"#{part_kept.inspect}|\"\n"
        "part_keep('q')\n");
    mrb_run_rec  ra, rp;

    REQUIRE(interp != NULL && a != NULL && peek != NULL);

    CHECK_EQ(wait_start(interp, a, &ra), MRB_RUN_WAITING);
    CHECK_EQ(wait_start(interp, peek, &rp), 0);
    mrb_full_gc(mrb_interp_state(interp));
    CHECK_EQ(mrb_wait_resume(interp, ra.waiting, &ra), 0);
    CHECK_EQ(wait_start(interp, peek, &rp), 0);

    CHECK(strcmp(wait_out, "nil|\"ab\";nil|") == 0);
    if (strcmp(wait_out, "nil|\"ab\";nil|") != 0) {
        printf("  out: %s\n  error: %s\n", wait_out, ra.error);
    }

    mrb_script_free(a);
    mrb_script_free(peek);
    mrb_interp_close(interp);
}


/* A part's run_end runs when an outermost run that marked it dirty ends,
 * once, and not after the runs that did not. */
TEST(wait_a_parts_run_end_follows_only_the_runs_that_marked_it)
{
    mrb_interp  *interp = wait_interp();
    mrb_script  *keep = wait_script("part_keep('x')\n");
    mrb_script  *plain = wait_script("Nginx.rputs \"#{part_kept.inspect}\"");
    mrb_run_rec  run;

    REQUIRE(interp != NULL && keep != NULL && plain != NULL);
    wait_part_ends = 0;

    CHECK_EQ(wait_start(interp, plain, &run), 0);
    CHECK_EQ(wait_part_ends, 0);
    CHECK_EQ(wait_start(interp, keep, &run), 0);
    CHECK_EQ(wait_part_ends, 1);
    CHECK_EQ(wait_start(interp, plain, &run), 0);
    CHECK_EQ(wait_start(interp, plain, &run), 0);
    CHECK_EQ(wait_part_ends, 1);
    CHECK(strcmp(wait_out, "nilnilnil") == 0);

    mrb_script_free(keep);
    mrb_script_free(plain);
    mrb_interp_close(interp);
}
