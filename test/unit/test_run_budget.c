/*
 * Unit tests of the run's time budget (mrb_run_budget.c) and of the checks
 * the compiler writes into the bytecode (mrb_irep_check.c): code with
 * checks computes what it computed without them, with its jumps, rescue
 * and ensure ranges and lines where they were; a run past its budget is
 * stopped where it loops, whatever it rescues.
 */

#include <stdio.h>
#include <string.h>
#include <mruby.h>
#include <mruby/string.h>
#include "mrb_interp.h"
#include "mrb_interp_core.h"
#include "mrb_run_budget.h"
#include "mrb_script.h"
#include "unit.h"


static char  budget_out[4096];


static int
budget_write(mrb_run_rec *run, const char *data, size_t len)
{
    return unit_append(budget_out, sizeof(budget_out), data, len);
}


static void
budget_logger(void *target, mrb_run_rec *run, int level, const char *msg,
    size_t len)
{
}


static const mrb_server  budget_server = {
    "Test", "Apache", "mod_mruby", "test", 0, NULL, budget_write,
    budget_logger
};


/* Runs code (a file named "budget.rb") with a budget of timeout_ms. */
static int
budget_run(mrb_interp *interp, const char *code, uint32_t timeout_ms,
    mrb_run_rec *run)
{
    char         err[256];
    mrb_script  *s;
    int          rc;

    s = mrb_script_from_code(code, strlen(code), "budget.rb", 1, err,
                             sizeof(err));
    if (s == NULL) {
        snprintf(run->error, sizeof(run->error), "%s", err);
        return -2;
    }

    budget_out[0] = '\0';
    mrb_run_init(run, (void *) 1, 0);
    run->timeout_ms = timeout_ms;
    rc = mrb_script_run(interp, s, run);
    mrb_script_free(s);
    return rc;
}


static mrb_interp *
budget_interp(void)
{
    char         err[256];
    mrb_interp  *interp = mrb_interp_open(&budget_server, NULL, err,
                                          sizeof(err));

    if (interp != NULL) {
        mrb_interp_seal(interp);
    }

    return interp;
}


/* Each script writes what it computed; with checks it must write the same
 * (the expected text was taken from mruby without them). */
static const struct {
    const char  *code;
    const char  *out;
} budget_same[] = {
    { "i = 0; s = 0\nwhile i < 10\n  i += 1\n  next if i % 2 == 1\n  s += i\n"
      "end\nApache.rputs s.to_s", "30" },
    { "i = 0\nbegin\n  i += 1\nend while i < 5\nApache.rputs i.to_s", "5" },
    { "i = 0\nuntil i >= 7 do i += 2 end\nApache.rputs i.to_s", "8" },
    { "n = 0\nbegin\n  n += 1\n  raise 'again' if n < 4\nrescue\n  retry\n"
      "end\nApache.rputs n.to_s", "4" },
    { "r = []\n[3, 1, 2].each { |x| r << x * 2 }\n"
      "Apache.rputs r.sort_by { |x| -x }.inspect", "[6, 4, 2]" },
    { "i = 0; log = []\nwhile i < 3\n  begin\n    i += 1\n    break if i > 5\n"
      "  ensure\n    log << i\n  end\nend\nApache.rputs log.inspect",
      "[1, 2, 3]" },
    { "x = [1, 2, 3].map do |v|\n  begin\n    raise 'e' if v == 2\n    v\n"
      "  rescue => e\n    next 0\n  ensure\n    v\n  end\nend\n"
      "Apache.rputs x.inspect", "[1, 0, 3]" },
    { "def f(a, b = 2, *c, d: 4, &e)\n  [a, b, c, d]\nend\n"
      "l = lambda { |x, y = 9| x + y }\n"
      "Apache.rputs [f(1), f(1, 3, 5, d: 6), l.call(1), l.arity, "
      "proc { |a, b| }.arity].inspect",
      "[[1, 2, [], 4], [1, 3, [5], 6], 10, -2, 2]" },
    { "s = 0\n5.times do |i|\n  j = 0\n  while j < i\n    j += 1\n"
      "    s += j\n  end\nend\nApache.rputs s.to_s", "20" },
    { "a = (1..300).map { |i| \"v#{i}\" }\nt = 0\n"
      "a.each_with_index { |v, i| t += v.size * i }\nApache.rputs t.to_s",
      "174513" },
    { "i = 0\nx = loop { i += 1; break i * 2 if i == 7 }\n"
      "Apache.rputs x.to_s", "14" },
    { NULL, NULL }
};


TEST(run_budget_checks_keep_what_the_code_computes)
{
    mrb_interp   *interp = budget_interp();
    mrb_run_rec   run;
    int           i, rc;

    REQUIRE(interp != NULL);

    for (i = 0; budget_same[i].code != NULL; i++) {
        rc = budget_run(interp, budget_same[i].code, 1000, &run);
        if (rc != 0 || strcmp(budget_out, budget_same[i].out) != 0) {
            unit_fail(__FILE__, __LINE__, "script %d: rc %d, wrote \"%s\", "
                      "wanted \"%s\" (%s)", i, rc, budget_out,
                      budget_same[i].out, run.error);
        }
    }

    mrb_interp_close(interp);
}


TEST(run_budget_checks_keep_the_lines_of_errors)
{
    mrb_interp   *interp = budget_interp();
    mrb_run_rec   run;

    REQUIRE(interp != NULL);

    CHECK_EQ(budget_run(interp, "i = 0\nwhile i < 3\n  i += 1\nend\n"
                        "[1].each { |x| x }\nraise 'here'\n", 1000, &run), -1);
    CHECK(strstr(run.error, "budget.rb:6") != NULL);

    CHECK_EQ(budget_run(interp, "i = 0\nwhile i < 3\n  i += 1\n"
                        "  raise 'in' if i == 2\nend\n", 1000, &run), -1);
    CHECK(strstr(run.error, "budget.rb:4") != NULL);

    mrb_interp_close(interp);
}


/* Each of these loops for ever; the budget stops it near its line. */
static const struct {
    const char  *code;
    const char  *where;
} budget_endless[] = {
    { "x = 0\nloop {}\n", "budget.rb:2" },
    { "x = 0\nwhile true; end\n", "budget.rb:2" },
    { "x = 0\nx += 1 while true\n", "budget.rb:2" },
    { "x = 0\n[3, 1, 2].sort_by { |v| loop { x += v } }\n", "budget.rb:2" },
    { "x = 0\nbegin\n  loop { x += 1 }\nrescue Exception => e\n"
      "  Apache.rputs 'rescued'\nend\n", "budget.rb:3" },
    { "begin\n  raise 'first'\nensure\n  while true; end\nend\n",
      "budget.rb:4" },
    { "loop do\n  begin\n    loop {}\n  rescue Exception\n  end\nend\n",
      "budget.rb:3" },
    { NULL, NULL }
};


TEST(run_budget_stops_endless_loops_where_they_loop)
{
    mrb_interp   *interp = budget_interp();
    mrb_run_rec   run;
    char          err[256];
    uint64_t      t0, ms;
    int           i, rc;

    REQUIRE(interp != NULL);
    REQUIRE(mrb_run_clock_start(err, sizeof(err)) == 0);

    for (i = 0; budget_endless[i].code != NULL; i++) {
        t0 = unit_now_ns();
        rc = budget_run(interp, budget_endless[i].code, 100, &run);
        ms = (unit_now_ns() - t0) / 1000000;

        if (rc != -1 || strstr(run.error, "RunTimeout") == NULL
            || strstr(run.error, budget_endless[i].where) == NULL)
        {
            unit_fail(__FILE__, __LINE__, "script %d: rc %d, error \"%s\"",
                      i, rc, run.error);
        }
        /* stopped, not run to some other end: at least the budget */
        CHECK(ms >= 95);
    }

    /* the interpreter serves the next run */
    CHECK_EQ(budget_run(interp, "Apache.rputs 'next'", 100, &run), 0);
    CHECK(strcmp(budget_out, "next") == 0);

    mrb_run_clock_stop();
    mrb_interp_close(interp);
}


TEST(run_budget_ensure_gets_its_grace)
{
    mrb_interp   *interp = budget_interp();
    mrb_run_rec   run;
    char          err[256];

    REQUIRE(interp != NULL);
    REQUIRE(mrb_run_clock_start(err, sizeof(err)) == 0);

    CHECK_EQ(budget_run(interp, "begin\n  loop {}\nensure\n"
                        "  3.times { |i| Apache.rputs i.to_s }\nend\n", 50,
                        &run), -1);
    CHECK(strcmp(budget_out, "012") == 0);
    CHECK(strstr(run.error, "budget.rb:2") != NULL);

    mrb_run_clock_stop();
    mrb_interp_close(interp);
}


TEST(run_budget_none_when_zero)
{
    mrb_interp   *interp = budget_interp();
    mrb_run_rec   run;
    char          err[256];

    REQUIRE(interp != NULL);
    REQUIRE(mrb_run_clock_start(err, sizeof(err)) == 0);

    /* 40 ms of work with a budget of 0: not stopped */
    CHECK_EQ(budget_run(interp, "t = Time.now\nwhile Time.now - t < 0.04; "
                        "end\nApache.rputs 'done'", 0, &run), 0);
    CHECK(strcmp(budget_out, "done") == 0);

    mrb_run_clock_stop();
    mrb_interp_close(interp);
}
