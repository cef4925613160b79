/*
 * Unit tests of the interpreter and scripts: the cache policies, errors as
 * one line, isolation of top-level state, startup state kept, memory flat
 * over many runs.  Benchmarks: a cached, a `stat` and a `never` run.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <mruby.h>
#include <mruby/gc.h>
#include "mrb_mruby_version.h"
#include "mrb_file_sym.h"
#include "mrb_interp.h"
#include "mrb_interp_core.h"
#include "mrb_script.h"
#include "unit.h"
#include "unit_intern.h"
#include "unit_oom.h"
#include "mrb_script_compile.h"


static char   test_out[4096];
static size_t test_out_len;
static char   test_log[4096];


static int
test_write(mrb_run_rec *run, const char *data, size_t len)
{
    if (test_out_len + len >= sizeof(test_out)) {
        return -1;
    }

    memcpy(test_out + test_out_len, data, len);
    test_out_len += len;
    test_out[test_out_len] = '\0';
    return 0;
}


static void
test_logger(void *target, mrb_run_rec *run, int level, const char *msg,
    size_t len)
{
    snprintf(test_log, sizeof(test_log), "%d %.*s", level, (int) len, msg);
}


static const mrb_server  test_server = {
    "Test", "Apache", "mod_mruby", "test", 0, NULL, test_write, test_logger
};


static mrb_interp *
interp_new(void)
{
    char         err[256];
    mrb_interp  *interp = mrb_interp_open(&test_server, NULL, err,
                                          sizeof(err));

    if (interp != NULL) {
        mrb_interp_seal(interp);
    }

    test_out_len = 0;
    test_out[0] = '\0';
    return interp;
}


/* Runs code (inline) as a request; returns what mrb_script_run returned. */
static int
run_code(mrb_interp *interp, const char *code, mrb_run_rec *run)
{
    char         err[512];
    mrb_script  *s;
    int          rc;

    s = mrb_script_from_code(code, strlen(code), "test.conf", 1, err,
                             sizeof(err));
    if (s == NULL) {
        snprintf(run->error, sizeof(run->error), "%s", err);
        return -2;
    }

    mrb_run_init(run, (void *) 1, -1);
    rc = mrb_script_run(interp, s, run);
    mrb_script_free(s);
    return rc;
}


static void
write_file(const char *path, const char *text)
{
    FILE  *f = fopen(path, "w");

    if (f != NULL) {
        fputs(text, f);
        fclose(f);
    }
}


/* A path of this process's own: test runs may overlap on one machine. */
static const char *
tmp_path(const char *name)
{
    static char  path[4][128];
    static int   next;
    char        *p = path[next++ % 4];

    snprintf(p, sizeof(path[0]), "/tmp/unit_%d_%s", (int) getpid(), name);
    return p;
}


static long
rss_kb(void)
{
    char   line[256];
    long   kb = 0;
    FILE  *f = fopen("/proc/self/status", "r");

    while (f != NULL && fgets(line, sizeof(line), f)) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = atol(line + 6);
        }
    }

    if (f != NULL) {
        fclose(f);
    }

    return kb;
}


TEST(script_inline_runs_and_returns)
{
    mrb_interp  *interp = interp_new();
    mrb_run_rec  run;

    REQUIRE(interp != NULL);
    CHECK_EQ(run_code(interp, "Apache.rputs \"#{server_name} #{Apache.module_name}\"; "
                      "Apache.echo 'x'; Apache.return Apache::HTTP_FORBIDDEN",
                      &run), 0);
    CHECK(strcmp(test_out, "Test mod_mrubyx\n") == 0);
    CHECK_EQ(run.result, 403);
    CHECK(run.returned);
    mrb_interp_close(interp);
}


TEST(script_syntax_error_names_file_and_line)
{
    const char  *path = tmp_path("syntax.rb");
    char         err[512];
    mrb_script  *s;

    s = mrb_script_from_code("a = 1\nb = (", 11, "/etc/x.conf", 40, err,
                             sizeof(err));
    CHECK(s == NULL);
    CHECK(strncmp(err, "/etc/x.conf:41: ", 16) == 0);

    write_file(path, "def f\n");
    s = mrb_script_from_file(path, MRB_CACHE_FOREVER, err, sizeof(err));
    CHECK(s == NULL);
    CHECK(strncmp(err, path, strlen(path)) == 0 && err[strlen(path)] == ':');
    unlink(path);

    s = mrb_script_from_file(tmp_path("missing.rb"), MRB_CACHE_FOREVER, err,
                             sizeof(err));
    CHECK(s == NULL);
    CHECK(strstr(err, "No such file") != NULL);
}


TEST(script_exception_is_one_line_with_backtrace)
{
    mrb_interp  *interp = interp_new();
    mrb_run_rec  run;

    REQUIRE(interp != NULL);
    CHECK_EQ(run_code(interp, "def f\n  raise ArgumentError, \"bad\\nvalue\"\n"
                      "end\nf\n", &run), -1);
    CHECK(strncmp(run.error, "ArgumentError: bad\\nvalue (test.conf:2", 38)
          == 0);
    CHECK(strchr(run.error, '\n') == NULL);
    CHECK(strstr(run.error, "test.conf:4") != NULL);

    /* The interpreter is usable after the error. */
    CHECK_EQ(run_code(interp, "Apache.return 7", &run), 0);
    CHECK_EQ(run.result, 7);
    mrb_interp_close(interp);
}


/*
 * The exception being logged is held for the GC while its message method
 * runs: a collection there freed it (mruby 3.3 raises an exception left in
 * mrb->exc again, so the log line no longer keeps it there), and its
 * backtrace was read from freed memory: on mruby 3.3 a script raising on
 * every run crashed within some 500 runs.
 */
TEST(script_exception_outlives_the_gc_while_it_is_logged)
{
    const char  *path = tmp_path("raising.rb");
    mrb_interp  *interp = interp_new();
    mrb_script  *s;
    mrb_run_rec  run;
    char         err[256];
    int          i;

    REQUIRE(interp != NULL);
    write_file(path, "raise 'boom'\n");
    s = mrb_script_from_file(path, MRB_CACHE_STAT, err, sizeof(err));
    REQUIRE(s != NULL);

    for (i = 0; i < 2000; i++) {
        mrb_run_init(&run, (void *) 1, 0);
        if (mrb_script_run(interp, s, &run) != -1
            || strncmp(run.error, "RuntimeError: boom (", 20) != 0)
        {
            break;
        }
    }
    CHECK_EQ(i, 2000);

    mrb_script_free(s);
    mrb_interp_close(interp);
    unlink(path);
}


TEST(script_toplevel_state_is_removed_after_a_run)
{
    mrb_interp  *interp = interp_new();
    mrb_run_rec  run;

    REQUIRE(interp != NULL);
    CHECK_EQ(run_code(interp, "$g = 1; K = 2; @i = 3; class Made; end", &run),
             0);
    CHECK_EQ(run_code(interp, "Apache.rputs [$g.inspect, @i.inspect, "
                      "Object.const_defined?(:K), Object.const_defined?(:Made)]"
                      ".inspect", &run), 0);
    CHECK(strcmp(test_out, "[\"nil\", \"nil\", false, false]") == 0);
    mrb_interp_close(interp);
}


TEST(script_removed_and_added_global_is_still_removed)
{
    char         err[256];
    mrb_interp  *interp = mrb_interp_open(&test_server, NULL, err,
                                          sizeof(err));
    mrb_run_rec  run;

    REQUIRE(interp != NULL);
    CHECK_EQ(run_code(interp, "$startup = 1", &run), 0);
    mrb_interp_seal(interp);

    /* One global out, one in: the count of globals is unchanged. */
    CHECK_EQ(run_code(interp, "Apache.remove_global_variable :$startup; "
                      "$added = 1", &run), 0);
    test_out_len = 0;
    CHECK_EQ(run_code(interp, "Apache.rputs $added.inspect", &run), 0);
    CHECK(strcmp(test_out, "nil") == 0);
    mrb_interp_close(interp);
}


TEST(script_startup_state_stays)
{
    char         err[256];
    mrb_interp  *interp = mrb_interp_open(&test_server, NULL, err,
                                          sizeof(err));
    mrb_script  *s;
    mrb_run_rec  run;
    const char  *init = "$shared = 'kept'; Shared = 1";

    REQUIRE(interp != NULL);
    s = mrb_script_from_code(init, strlen(init), "init", 1, err, sizeof(err));
    REQUIRE(s != NULL);
    mrb_run_init(&run, NULL, 0);
    run.startup = 1;
    CHECK_EQ(mrb_script_run(interp, s, &run), 0);
    mrb_script_free(s);
    mrb_interp_seal(interp);

    test_out_len = 0;
    CHECK_EQ(run_code(interp, "$shared << '!'; $new = 1", &run), 0);
    CHECK_EQ(run_code(interp, "Apache.rputs \"#{$shared} #{Shared} "
                      "#{$new.inspect}\"", &run), 0);
    CHECK(strcmp(test_out, "kept! 1 nil") == 0);
    mrb_interp_close(interp);
}


TEST(script_stat_recompiles_on_change_and_recovers_from_errors)
{
    const char   *path = tmp_path("stat.rb");
    mrb_interp   *interp = interp_new();
    mrb_script   *s;
    mrb_run_rec   run;
    char          err[256];

    REQUIRE(interp != NULL);
    unlink(path);
    s = mrb_script_from_file(path, MRB_CACHE_STAT, err, sizeof(err));
    REQUIRE(s != NULL);

    mrb_run_init(&run, (void *) 1, 0);
    CHECK_EQ(mrb_script_run(interp, s, &run), -1);
    CHECK(strstr(run.error, "No such file") != NULL);

    write_file(path, "Apache.return 1\n");
    mrb_run_init(&run, (void *) 1, 0);
    CHECK_EQ(mrb_script_run(interp, s, &run), 0);
    CHECK_EQ(run.result, 1);

    /* A broken version: the last one that compiled goes on running,
     * unless the run asks for failures. */
    write_file(path, "Apache.return (((\n");
    mrb_run_init(&run, (void *) 1, 0);
    CHECK_EQ(mrb_script_run(interp, s, &run), 0);
    CHECK_EQ(run.result, 1);
    mrb_run_init(&run, (void *) 1, 0);
    run.stat_on_error_fail = 1;
    CHECK_EQ(mrb_script_run(interp, s, &run), -1);
    CHECK(strncmp(run.error, path, strlen(path)) == 0);

    /* Same broken version: the same error again, not a stale success. */
    mrb_run_init(&run, (void *) 1, 0);
    run.stat_on_error_fail = 1;
    CHECK_EQ(mrb_script_run(interp, s, &run), -1);
    mrb_run_init(&run, (void *) 1, 0);
    CHECK_EQ(mrb_script_run(interp, s, &run), 0);
    CHECK_EQ(run.result, 1);

    write_file(path, "Apache.return 22 # a different size\n");
    mrb_run_init(&run, (void *) 1, 0);
    CHECK_EQ(mrb_script_run(interp, s, &run), 0);
    CHECK_EQ(run.result, 22);

    /* Removed: the last version runs on; put back, the new one. */
    unlink(path);
    mrb_run_init(&run, (void *) 1, 0);
    CHECK_EQ(mrb_script_run(interp, s, &run), 0);
    CHECK_EQ(run.result, 22);
    mrb_run_init(&run, (void *) 1, 0);
    run.stat_on_error_fail = 1;
    CHECK_EQ(mrb_script_run(interp, s, &run), -1);
    CHECK(strstr(run.error, "No such file") != NULL);
    write_file(path, "Apache.return 3\n");
    mrb_run_init(&run, (void *) 1, 0);
    CHECK_EQ(mrb_script_run(interp, s, &run), 0);
    CHECK_EQ(run.result, 3);

    mrb_script_free(s);
    mrb_interp_close(interp);
    unlink(path);
}


/*
 * mruby 3.1 finds a name in a symbol table that holds the file names of N
 * scripts in up to N steps (mrb_script_compile.c): the recompile and load
 * of an edited script must not look up its file name in the interpreter,
 * (the compiler, a state of its own, does), and the backtraces of the new
 * version still name the file, in blocks and methods too.
 */
TEST(script_edit_looks_up_no_file_name_and_names_it)
{
    const char   *path = tmp_path("named.rb");
    mrb_interp   *interp = interp_new();
    mrb_script   *s;
    mrb_run_rec   run;
    char          err[256], where[192];

    REQUIRE(interp != NULL);
    write_file(path, "Apache.return 1\n");
    s = mrb_script_from_file(path, MRB_CACHE_STAT, err, sizeof(err));
    REQUIRE(s != NULL);
    mrb_run_init(&run, (void *) 1, 0);
    CHECK_EQ(mrb_script_run(interp, s, &run), 0);
    CHECK_EQ(run.result, 1);

    write_file(path, "def f\n  [1].each do\n    raise 'edited'\n  end\n"
               "end\nf\n");
    unit_intern_watch(mrb_interp_state(interp), path);
    mrb_run_init(&run, (void *) 1, 0);
    CHECK_EQ(mrb_script_run(interp, s, &run), -1);
    CHECK_EQ(unit_intern_count(), 0);
    unit_intern_watch(NULL, NULL);

    snprintf(where, sizeof(where), "edited (%s:3", path);
    CHECK(strstr(run.error, where) != NULL);
    snprintf(where, sizeof(where), "%s:6", path);
    CHECK(strstr(run.error, where) != NULL);

    mrb_script_free(s);
    mrb_interp_close(interp);
    unlink(path);
}


/* Runs the script at path once; returns mrb_script_run's answer. */
static int
run_file_once(mrb_interp *interp, const char *path, mrb_run_rec *run)
{
    mrb_script  *s;
    char         err[256];
    int          rc;

    s = mrb_script_from_file(path, MRB_CACHE_STAT, err, sizeof(err));
    if (s == NULL) {
        return -2;
    }

    mrb_run_init(run, (void *) 1, 0);
    rc = mrb_script_run(interp, s, run);
    mrb_script_free(s);
    return rc;
}


/*
 * A script's first run in an interpreter names its file there without
 * mruby's lookup (which scans the whole table for a new name:
 * mrb_file_sym.c), and a name the table holds already is not added again.
 * Fails with the usual lookup: 1 lookup of the name, not 0.
 */
TEST(script_first_run_looks_up_no_file_name_and_names_it)
{
    const char   *first = tmp_path("first.rb");
    const char   *named = tmp_path("first_named.rb");
    const char   *known = tmp_path("first_known.rb");
    mrb_interp   *interp = interp_new();
    mrb_state    *mrb;
    mrb_run_rec   run;
    mrb_sym       sym, symidx;
    char          where[192];

    REQUIRE(interp != NULL);
    mrb = mrb_interp_state(interp);

    write_file(first, "Apache.return 1\n");
    CHECK_EQ(run_file_once(interp, first, &run), 0);

    write_file(named, "def f\n  raise 'first'\nend\nf\n");
    unit_intern_watch(mrb, named);
    CHECK_EQ(run_file_once(interp, named, &run), -1);
    CHECK_EQ(unit_intern_count(), 0);
    unit_intern_watch(NULL, NULL);

    snprintf(where, sizeof(where), "first (%s:2", named);
    CHECK(strstr(run.error, where) != NULL);
    snprintf(where, sizeof(where), "%s:4", named);
    CHECK(strstr(run.error, where) != NULL);

    /* the interpreter's index finds the name that was added */
    symidx = mrb->symidx;
    REQUIRE(mrb_file_sym_protected(mrb, mrb_interp_file_syms(interp), named,
                                   &sym) == 0);
    CHECK_EQ(mrb->symidx, symidx);
    CHECK(strcmp(mrb_sym_name(mrb, sym), named) == 0);

    /* a name a script made a Symbol of is the file's symbol */
    sym = mrb_intern_cstr(mrb, known);
    write_file(known, "raise 'known'\n");
    symidx = mrb->symidx;
    CHECK_EQ(run_file_once(interp, known, &run), -1);
    CHECK_EQ(mrb->symidx, symidx);
    CHECK_EQ(mrb_intern_cstr(mrb, known), sym);
    snprintf(where, sizeof(where), "known (%s:1", known);
    CHECK(strstr(run.error, where) != NULL);

    mrb_interp_close(interp);
    unlink(first);
    unlink(named);
    unlink(known);
}


/*
 * The compiler runs with no frame of mruby's to catch a raise: out of
 * memory in its bytecode dump (mrb_dump_irep) aborted the process.  Each
 * of the dump's allocations failing in turn is an error that says so, and
 * the compiler compiles on after it.  (The parser and the code generator
 * catch their own; mruby 3.1's code generator crashes when its first pool
 * cannot be had, so the failures here start after it.)
 */
TEST(script_compile_out_of_memory_is_an_error)
{
    static const char  src[] =
        "class Oom\n  def f(a)\n    [a, 2].map { |x| x * 3 }\n  end\nend\n"
        "Oom.new.f(1)\n";
    mrb_state     *mrb;
    struct RProc  *proc;
    uint8_t       *bin = NULL;
    size_t         bin_len;
    long           parsed, compiled, failures, failed = 0;
    int            ai, rc;
    char           err[256];

    /* its names interned: the next compiles ask for the same allocations */
    REQUIRE(mrb_script_compile(src, sizeof(src) - 1, "oom.rb", 0, &bin,
                               &bin_len, err, sizeof(err)) == 0);
    free(bin);

    mrb = mrb_script_compiler_get();
    REQUIRE(mrb != NULL);
    ai = mrb_gc_arena_save(mrb);
    unit_oom_after(mrb, 1000000);
    proc = mrb_script_parse(mrb, src, sizeof(src) - 1, "oom.rb", 0, err,
                            sizeof(err));
    parsed = unit_oom_asked();
    unit_oom_end(mrb);
    mrb_gc_arena_restore(mrb, ai);
    REQUIRE(proc != NULL);

    unit_oom_after(mrb, 1000000);
    REQUIRE(mrb_script_compile(src, sizeof(src) - 1, "oom.rb", 0, &bin,
                               &bin_len, err, sizeof(err)) == 0);
    compiled = unit_oom_asked();
    unit_oom_end(mrb);
    free(bin);
    REQUIRE(compiled > parsed);

    for (failures = parsed; failures < compiled; failures++) {
        REQUIRE(mrb_script_compiler_get() == mrb);
        unit_oom_after(mrb, failures);
        rc = mrb_script_compile(src, sizeof(src) - 1, "oom.rb", 0, &bin,
                                &bin_len, err, sizeof(err));
        unit_oom_end(mrb);
        if (rc == 0) {
            free(bin);
            continue;
        }
        failed++;
        CHECK(strcmp(err, "oom.rb: out of memory compiling") == 0);
    }

    CHECK(failed > 0);
    REQUIRE(mrb_script_compile(src, sizeof(src) - 1, "oom.rb", 0, &bin,
                               &bin_len, err, sizeof(err)) == 0);
    free(bin);
}


/*
 * The compiler is opened again once the names interned since its first
 * compile pass 1,024 (mrb_script_compile.c): a script of more names than
 * that alone must not reopen it at each of its compiles.
 */
TEST(script_compile_of_many_names_keeps_the_compiler)
{
    mrb_state  *mrb;
    char       *src;
    size_t      len = 0;
    uint8_t    *bin;
    size_t      bin_len;
    char        err[256];
    int         i;

    src = malloc(1500 * 32);
    REQUIRE(src != NULL);
    for (i = 0; i < 1500; i++) {
        len += (size_t) sprintf(src + len, ":a_long_name_%04d\n", i);
    }

    REQUIRE(mrb_script_compile(src, len, "many.rb", 0, &bin, &bin_len, err,
                               sizeof(err)) == 0);
    free(bin);

    /* a name only this state holds: gone if the state is another */
    mrb = mrb_script_compiler_get();
    REQUIRE(mrb != NULL);
    mrb_intern_lit(mrb, "only_in_this_compiler");

    REQUIRE(mrb_script_compile(src, len, "many.rb", 0, &bin, &bin_len, err,
                               sizeof(err)) == 0);
    free(bin);
    mrb = mrb_script_compiler_get();
    CHECK(mrb_intern_check_cstr(mrb, "only_in_this_compiler") != 0);
    free(src);
}


/* The newest entry of each of mruby's 256 buckets, or NULL (none yet). */
static mrb_sym *
sym_buckets(mrb_state *mrb)
{
    return MRB_SYM_BUCKETS(mrb);
}


/* Runs once each of the new files PATH.I.rb for i in [from, to), while
 * until(mrb) is 0 (NULL: to the end). */
static void
run_new_files(mrb_interp *interp, const char *path, int from, int to,
    mrb_sym *(*until)(mrb_state *mrb))
{
    mrb_run_rec  run;
    char         name[192];
    int          i;

    for (i = from;
         i < to && (until == NULL || until(mrb_interp_state(interp)) == NULL);
         i++)
    {
        snprintf(name, sizeof(name), "%s.%d.rb", path, i);
        write_file(name, "Apache.return 2\n");
        CHECK_EQ(run_file_once(interp, name, &run), 0);
        unlink(name);
    }
}


/*
 * The file names an interpreter adds stay out of mruby's buckets: its own
 * lookups of the names before them then never walk past them (with N
 * scripts run, a lookup of `rputs` crossed a gap of more than 254 entries
 * of its bucket and scanned the table down to it: O(N) at each load on
 * mruby 4.0, mrb_file_sym.c).  Fails with the names linked: the buckets'
 * newest entries change.
 */
TEST(script_first_runs_leave_mrubys_buckets_as_they_were)
{
    const char   *path = tmp_path("buckets.rb");
    mrb_interp   *interp = interp_new();
    mrb_state    *mrb;
    mrb_run_rec   run;
    mrb_sym       before[256];
    mrb_sym      *buckets;

    REQUIRE(interp != NULL);
    mrb = mrb_interp_state(interp);
    write_file(path, "Apache.return 1\n");

    /* mruby 4.0 has no buckets below 256 names: file names make them */
    run_new_files(interp, path, 0, 1000, sym_buckets);

    CHECK_EQ(run_file_once(interp, path, &run), 0);
    buckets = sym_buckets(mrb);
    REQUIRE(buckets != NULL);
    memcpy(before, buckets, sizeof(before));

    run_new_files(interp, path, 1000, 1020, NULL);

    buckets = sym_buckets(mrb);
    REQUIRE(buckets != NULL);
    CHECK(memcmp(before, buckets, sizeof(before)) == 0);
    mrb_interp_close(interp);
    unlink(path);
}


/*
 * A compile adds its file's name to the compiler's table through an index
 * of that table (mrb_file_sym.c), so the parser's and the code generator's
 * lookups of the name find it: none scans the table as a lookup of a new
 * name does.  Fails with their own lookups: 1 miss.
 */
TEST(script_compile_adds_the_file_name_without_a_scan)
{
    static const char  src[] = "def f\n  1\nend\nf\n";
    mrb_state         *mrb;
    uint8_t           *bin;
    size_t             bin_len;
    char               err[256];

    REQUIRE(mrb_script_compile(src, sizeof(src) - 1, "scan_first.rb", 0,
                               &bin, &bin_len, err, sizeof(err)) == 0);
    free(bin);

    /* the state the next compile uses (opened again here if it was due) */
    mrb = mrb_script_compiler_get();
    REQUIRE(mrb != NULL);
    unit_intern_watch(mrb, "scan_second.rb");
    REQUIRE(mrb_script_compile(src, sizeof(src) - 1, "scan_second.rb", 0,
                               &bin, &bin_len, err, sizeof(err)) == 0);
    free(bin);
    CHECK(unit_intern_count() > 0);
    CHECK_EQ(unit_intern_misses(), 0);
    unit_intern_watch(NULL, NULL);
    CHECK(mrb_intern_check_cstr(mrb, "scan_second.rb") != 0);
}


TEST(script_forever_ignores_edits_never_sees_them)
{
    const char   *path = tmp_path("policy.rb");
    mrb_interp   *interp = interp_new();
    mrb_script   *forever, *never;
    mrb_run_rec   run;
    char          err[256];

    REQUIRE(interp != NULL);
    write_file(path, "Apache.return 1\n");
    forever = mrb_script_from_file(path, MRB_CACHE_FOREVER, err, sizeof(err));
    never = mrb_script_from_file(path, MRB_CACHE_NEVER, err, sizeof(err));
    REQUIRE(forever != NULL && never != NULL);

    write_file(path, "Apache.return 2 # edited\n");

    mrb_run_init(&run, (void *) 1, 0);
    CHECK_EQ(mrb_script_run(interp, forever, &run), 0);
    CHECK_EQ(run.result, 1);

    mrb_run_init(&run, (void *) 1, 0);
    CHECK_EQ(mrb_script_run(interp, never, &run), 0);
    CHECK_EQ(run.result, 2);

    mrb_script_free(forever);
    mrb_script_free(never);
    mrb_interp_close(interp);
    unlink(path);
}


TEST(script_for_file_is_one_per_path_and_policy)
{
    char         err[256];
    mrb_script  *a, *b, *c;

    a = mrb_script_for_file(tmp_path("for_file.rb"), MRB_CACHE_STAT, err,
                            sizeof(err));
    b = mrb_script_for_file(tmp_path("for_file.rb"), MRB_CACHE_STAT, err,
                            sizeof(err));
    c = mrb_script_for_file(tmp_path("for_file.rb"), MRB_CACHE_NEVER, err,
                            sizeof(err));
    CHECK(a != NULL && a == b);
    CHECK(c != NULL && c != a);
}


TEST(script_memory_is_flat_over_many_runs)
{
    const char   *path = tmp_path("rss.rb");
    mrb_cache_policy  policies[] = { MRB_CACHE_FOREVER, MRB_CACHE_NEVER };
    mrb_interp   *interp = interp_new();
    mrb_script   *s;
    mrb_run_rec   run;
    char          err[256];
    long          warm = 0, end;
    int           p, i;

    REQUIRE(interp != NULL);
    write_file(path, "class Foo; def bar; 'x' * 100; end; end\n"
                     "$x = Foo.new.bar; Y = [1, 2]; @z = {a: 1}\n");

    for (p = 0; p < 2; p++) {
        s = mrb_script_from_file(path, policies[p], err, sizeof(err));
        REQUIRE(s != NULL);

        for (i = 0; i < 120000; i++) {
            if (i == 20000) {
                warm = rss_kb();
            }
            mrb_run_init(&run, (void *) 1, 0);
            if (mrb_script_run(interp, s, &run) != 0) {
                unit_fail(__FILE__, __LINE__, "%s", run.error);
                return;
            }
        }

        end = rss_kb();
#ifndef __SANITIZE_ADDRESS__
        /* AddressSanitizer keeps freed memory in quarantine. */
        CHECK(end - warm < 1024);
#endif
        mrb_script_free(s);
    }

    mrb_interp_close(interp);
    unlink(path);
}


/*
 * Under `never` each run's proc is garbage after it.  Those that a minor GC
 * promoted while they ran must not pile up in the old generation until a
 * major GC hundreds of thousands of runs later, each holding its bytecode:
 * what the GC finds alive after a mark stays where it was after warm-up.
 */
TEST(script_never_garbage_does_not_pile_up)
{
    const char   *path = tmp_path("never_gc.rb");
    mrb_interp   *interp = interp_new();
    mrb_state    *mrb;
    mrb_script   *s;
    mrb_run_rec   run;
    char          err[256];
    size_t        warm = 0, most = 0;
    int           i;

    REQUIRE(interp != NULL);
    mrb = mrb_interp_state(interp);
    write_file(path, "Apache.return 1\n");
    s = mrb_script_from_file(path, MRB_CACHE_NEVER, err, sizeof(err));
    REQUIRE(s != NULL);

    for (i = 0; i < 200000; i++) {
        mrb_run_init(&run, (void *) 1, 0);
        REQUIRE(mrb_script_run(interp, s, &run) == 0);
        if (i == 5000) {
            warm = mrb->gc.live_after_mark;
        } else if (i > 5000 && mrb->gc.live_after_mark > most) {
            most = mrb->gc.live_after_mark;
        }
    }

    /* Without the full GCs: 803 after warm-up, 1,038 by 200,000 runs. */
    CHECK(most < warm + warm / 10);
    mrb_script_free(s);
    mrb_interp_close(interp);
    unlink(path);
}


static double
bench_policy(mrb_cache_policy policy, int n)
{
    const char   *path = tmp_path("bench.rb");
    mrb_interp   *interp = interp_new();
    mrb_script   *s;
    mrb_run_rec   run;
    char          err[256];
    uint64_t      t0;
    int           i;

    write_file(path, "r = 1 + 2\n");
    s = mrb_script_from_file(path, policy, err, sizeof(err));
    if (interp == NULL || s == NULL) {
        return -1;
    }

    t0 = unit_now_ns();
    for (i = 0; i < n; i++) {
        mrb_run_init(&run, (void *) 1, 0);
        mrb_script_run(interp, s, &run);
    }
    t0 = unit_now_ns() - t0;

    mrb_script_free(s);
    mrb_interp_close(interp);
    unlink(path);
    return (double) t0 / n / 1000.0;
}


BENCH(script_run_cost)
{
    unit_report("run, forever", bench_policy(MRB_CACHE_FOREVER, 1000000),
                "us/run");
    unit_report("run, stat", bench_policy(MRB_CACHE_STAT, 1000000), "us/run");
    unit_report("run, never", bench_policy(MRB_CACHE_NEVER, 100000),
                "us/run");
}
