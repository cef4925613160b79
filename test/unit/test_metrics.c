/*
 * The metrics table: runs counted in a process's slot, summed over the
 * slots of several processes, exceptions by class, the histogram, and
 * both formats.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mrb_metrics.h"
#include "unit.h"


static const char  metrics_phase[] = "content";


/* One run of script that ends with rc, result and error. */
static void
metrics_one_run(const char *script, _Atomic uint64_t *cache, int rc,
    mrb_int result, const char *error)
{
    mrb_run_rec  run;

    mrb_run_init(&run, NULL, 0);
    run.phase = metrics_phase;
    mrb_metrics_run_begin(&run, script, cache);
    if (run.metrics_row == 0) {
        return;
    }
    mrb_metrics_run_start(&run);
    run.result = result;
    snprintf(run.error, sizeof(run.error), "%s", error);
    mrb_metrics_run_end(NULL, &run, rc);
}


static char *
metrics_text(mrb_metrics_format_e format)
{
    char    *out = NULL;
    size_t   len;
    char     err[256];

    if (mrb_metrics_format(format, "test", &out, &len, err, sizeof(err))
        != 0)
    {
        return NULL;
    }
    CHECK_EQ(strlen(out), len);
    return out;
}


TEST(metrics_format_of_query_finds_format_json)
{
    CHECK(mrb_metrics_format_of_query(NULL, 0) == MRB_METRICS_PROMETHEUS);
    CHECK(mrb_metrics_format_of_query("format=json", 11) == MRB_METRICS_JSON);
    CHECK(mrb_metrics_format_of_query("a=1&format=json", 15)
          == MRB_METRICS_JSON);
    CHECK(mrb_metrics_format_of_query("format=jsonx", 12)
          == MRB_METRICS_PROMETHEUS);
    CHECK(mrb_metrics_format_of_query("xformat=json", 12)
          == MRB_METRICS_PROMETHEUS);
    /* len bounds the arguments: no NUL needed */
    CHECK(mrb_metrics_format_of_query("format=json", 10)
          == MRB_METRICS_PROMETHEUS);
}


TEST(metrics_nothing_counted_before_attach)
{
    _Atomic uint64_t  cache = 0;
    mrb_run_rec       run;
    char              err[256];

    mrb_run_init(&run, NULL, 0);
    run.phase = metrics_phase;
    mrb_metrics_run_begin(&run, "/a.rb", &cache);
    CHECK_EQ(run.metrics_row, 0);

    CHECK(mrb_metrics_attach(err, sizeof(err)) != 0);
    CHECK(strstr(err, "not mapped") != NULL);
}


TEST(metrics_runs_exceptions_and_5xx_are_counted)
{
    _Atomic uint64_t  cache = 0;
    char              err[256], *text;

    REQUIRE(mrb_metrics_open(err, sizeof(err)) == 0);
    REQUIRE(mrb_metrics_attach(err, sizeof(err)) == 0);

    metrics_one_run("/a.rb", &cache, 0, 200, "");
    metrics_one_run("/a.rb", &cache, 0, 503, "");
    metrics_one_run("/a.rb", &cache, -1, 0,
                    "Foo::BarError: no (/a.rb:2)");
    metrics_one_run("/a.rb", &cache, -1, 0, "/a.rb:3: syntax error");

    text = metrics_text(MRB_METRICS_PROMETHEUS);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "mruby_runs_total{server=\"test\",script=\"/a.rb\","
                       "phase=\"content\"} 4\n") != NULL);
    CHECK(strstr(text, "mruby_responses_5xx_total{server=\"test\","
                       "script=\"/a.rb\",phase=\"content\"} 3\n") != NULL);
    CHECK(strstr(text, "phase=\"content\",class=\"Foo::BarError\"} 1\n")
          != NULL);
    CHECK(strstr(text, "phase=\"content\",class=\"-\"} 1\n") != NULL);
    CHECK(strstr(text, "le=\"+Inf\"} 4\n") != NULL);
    CHECK(strstr(text, "mruby_run_seconds_count{server=\"test\","
                       "script=\"/a.rb\",phase=\"content\"} 4\n") != NULL);
    free(text);

    text = metrics_text(MRB_METRICS_JSON);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "\"runs\": 4, \"responses_5xx\": 3") != NULL);
    CHECK(strstr(text, "\"Foo::BarError\": 1") != NULL);
    CHECK(strstr(text, "\"-\": 1") != NULL);
    free(text);
}


TEST(metrics_are_summed_over_processes)
{
    _Atomic uint64_t  cache = 0;
    char              err[256], *text;
    pid_t             pid;
    int               status, i;

    REQUIRE(mrb_metrics_open(err, sizeof(err)) == 0);

    /* each child counts in a slot of its own, and exits: what it
     * counted stays */
    for (i = 0; i < 3; i++) {
        pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            if (mrb_metrics_attach(err, sizeof(err)) != 0) {
                _exit(1);
            }
            metrics_one_run("/b.rb", &cache, 0, 200, "");
            metrics_one_run("/b.rb", &cache, 0, 200, "");
            _exit(0);
        }
        REQUIRE(waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }

    REQUIRE(mrb_metrics_attach(err, sizeof(err)) == 0);
    metrics_one_run("/b.rb", &cache, 0, 200, "");

    text = metrics_text(MRB_METRICS_PROMETHEUS);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "script=\"/b.rb\",phase=\"content\"} 7\n") != NULL);
    free(text);
}


TEST(metrics_label_values_are_escaped)
{
    _Atomic uint64_t  cache = 0;
    char              err[256], *text;

    REQUIRE(mrb_metrics_open(err, sizeof(err)) == 0);
    REQUIRE(mrb_metrics_attach(err, sizeof(err)) == 0);

    metrics_one_run("/x\"y\\z\n.rb", &cache, 0, 200, "");

    text = metrics_text(MRB_METRICS_PROMETHEUS);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "script=\"/x\\\"y\\\\z\\n.rb\"") != NULL);
    free(text);
}
