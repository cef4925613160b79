/*
 * Unit tests of the run frame (mrb_interp_exec): a run made inside another
 * run, as a filter script reading the body makes one, and inside a fiber.
 * Its errors stay its own, the outer run goes on, and the top-level state
 * is removed once, when the outermost run ends.
 */

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <mruby.h>
#include <mruby/string.h>
#include "mrb_interp.h"
#include "mrb_interp_core.h"
#include "mrb_script.h"
#include "unit.h"


static char  interp_out[1024];
static char  nested_error[2048];


static int
interp_write(mrb_run_rec *run, const char *data, size_t len)
{
    size_t  used = strlen(interp_out);

    if (used + len >= sizeof(interp_out)) {
        return -1;
    }

    memcpy(interp_out + used, data, len);
    interp_out[used + len] = '\0';
    return 0;
}


static void
interp_logger(void *target, mrb_run_rec *run, int level, const char *msg,
    size_t len)
{
}


/* nested_run(code): runs code as a run inside the current one; returns
 * what mrb_script_run returned, the error in nested_error. */
static mrb_value
interp_nested_run(mrb_state *mrb, mrb_value self)
{
    mrb_interp  *interp = mrb_interp_from_state(mrb);
    mrb_script  *s;
    mrb_run_rec  run;
    mrb_value    code;
    char         err[256];
    int          rc;

    mrb_get_args(mrb, "S", &code);

    s = mrb_script_from_code(RSTRING_PTR(code), (size_t) RSTRING_LEN(code),
                             "nested", 1, err, sizeof(err));
    if (s == NULL) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, err);
    }

    mrb_run_init(&run, (void *) 1, 0);
    rc = mrb_script_run(interp, s, &run);
    mrb_script_free(s);

    snprintf(nested_error, sizeof(nested_error), "%s", run.error);
    return mrb_fixnum_value(rc);
}


static void
interp_define(mrb_state *mrb, struct RClass *server_class)
{
    mrb_define_method(mrb, mrb->kernel_module, "nested_run",
                      interp_nested_run, MRB_ARGS_REQ(1));
}


static const mrb_server  interp_server = {
    "Test", "Apache", "mod_mruby", "test", 0, interp_define, interp_write,
    interp_logger
};


static mrb_interp *
interp_sealed(void)
{
    char         err[256];
    mrb_interp  *interp = mrb_interp_open(&interp_server, NULL, err,
                                          sizeof(err));

    if (interp != NULL) {
        mrb_interp_seal(interp);
    }

    interp_out[0] = '\0';
    nested_error[0] = '\0';
    return interp;
}


/* Runs code as a request; returns what mrb_script_run returned. */
static int
interp_run_code(mrb_interp *interp, const char *code, mrb_run_rec *run)
{
    char         err[256];
    mrb_script  *s;
    int          rc;

    s = mrb_script_from_code(code, strlen(code), "outer", 1, err,
                             sizeof(err));
    if (s == NULL) {
        snprintf(run->error, sizeof(run->error), "%s", err);
        return -2;
    }

    mrb_run_init(run, (void *) 1, 0);
    rc = mrb_script_run(interp, s, run);
    mrb_script_free(s);
    return rc;
}


TEST(interp_nested_run_error_is_its_own)
{
    mrb_interp  *interp = interp_sealed();
    mrb_run_rec  run;

    REQUIRE(interp != NULL);
    CHECK_EQ(interp_run_code(interp,
                             "def deep; [1].each { raise 'inner' }; end\n"
                             "rc = nested_run('deep')\n"
                             "Apache.rputs \"#{rc} \"\n"
                             "Apache.rputs [1, 2].map { |x| x * 2 }.inspect",
                             &run), 0);
    CHECK(strcmp(interp_out, "-1 [2, 4]") == 0);
    CHECK(strncmp(nested_error, "RuntimeError: inner", 19) == 0);

    /* the next run finds the interpreter as it was */
    interp_out[0] = '\0';
    CHECK_EQ(interp_run_code(interp, "Apache.rputs 'next'", &run), 0);
    CHECK(strcmp(interp_out, "next") == 0);
    mrb_interp_close(interp);
}



/*
 * A run past its memory budget fails with the budget and the script's
 * name, and the next run in the interpreter goes on as before.
 */
TEST(interp_run_past_its_memory_budget_fails_and_the_next_runs)
{
    static const char  code[] = "a = Array.new(100_000); i = 0\n"
                                "loop { a[i] = 'x' * 64; i += 1 }";
    static const char  spends[] = "x = 1; [1].each { x }; 'y' * 1000";
    mrb_interp  *interp = interp_sealed();
    char         err[256];
    mrb_script  *s;
    mrb_run_rec  run;

    REQUIRE(interp != NULL);
    /* small blocks up to the budget, and the top level's env (the
     * block's) to be copied when the run ends */
    s = mrb_script_from_code(code, strlen(code), "appends", 1, err,
                             sizeof(err));
    REQUIRE(s != NULL);

    mrb_run_init(&run, (void *) 1, 0);
    run.memory_limit = 4 * 1024 * 1024;
    CHECK_EQ(mrb_script_run(interp, s, &run), -1);
    CHECK(strncmp(run.error, "NoMemoryError: past the run's memory budget "
                  "of 4194304 bytes (", 61) == 0);
    mrb_script_free(s);

    /* a budget spent at once: the run's end (it copies the top level's
     * env, which the block made) is not counted */
    s = mrb_script_from_code(spends, strlen(spends), "spends", 1, err,
                             sizeof(err));
    REQUIRE(s != NULL);
    mrb_run_init(&run, (void *) 1, 0);
    run.memory_limit = 1;
    CHECK_EQ(mrb_script_run(interp, s, &run), -1);
    CHECK(strncmp(run.error, "NoMemoryError: past the run's memory budget "
                  "of 1 bytes (", 54) == 0);
    mrb_script_free(s);

    CHECK_EQ(interp_run_code(interp, "Apache.rputs 'next' * 2", &run), 0);
    CHECK(strcmp(interp_out, "nextnext") == 0);
    mrb_interp_close(interp);
}


/* A server at debug level whose log keeps each line, "LEVEL MESSAGE\n". */
static char  debug_log[1024];

static void
interp_debug_logger(void *target, mrb_run_rec *run, int level, const char *msg,
    size_t len)
{
    size_t  used = strlen(debug_log);

    snprintf(debug_log + used, sizeof(debug_log) - used, "%d %.*s\n", level,
             (int) len, msg);
}


static int
interp_at_debug(void *target, mrb_run_rec *run, int level)
{
    return 1;
}


static const mrb_server  interp_debug_server = {
    "Test", "Apache", "mod_mruby", "test", 0, interp_define, interp_write,
    interp_debug_logger, interp_at_debug
};


TEST(interp_error_backtrace_one_line_a_frame_at_debug)
{
    char         err[256];
    mrb_run_rec  run;
    mrb_interp  *interp;
    const char  *code = "def f; raise 'x'; end\nf";

    /* not at debug: one line */
    interp = interp_sealed();
    REQUIRE(interp != NULL);
    CHECK_EQ(interp_run_code(interp, code, &run), -1);
    CHECK(strcmp(run.error, "RuntimeError: x (outer:1:in f, outer:2)") == 0);
    mrb_interp_close(interp);

    /* at debug: the frames first, at the error's level */
    interp = mrb_interp_open(&interp_debug_server, NULL, err, sizeof(err));
    REQUIRE(interp != NULL);
    mrb_interp_seal(interp);
    debug_log[0] = '\0';
    CHECK_EQ(interp_run_code(interp, code, &run), -1);
    CHECK(strcmp(run.error, "RuntimeError: x (backtrace above)") == 0);
    CHECK(strcmp(debug_log, "3 mruby: backtrace 1/2: outer:1:in f\n"
                            "3 mruby: backtrace 2/2: outer:2\n") == 0);
    mrb_interp_close(interp);
}


/* The exception a run raised is formatted after mrb->exc lets go of it:
 * the GC must not collect it meanwhile (it did, one run in about 1,000,
 * and the worker aborted on a FrozenError from a freed object). */
TEST(interp_error_of_many_runs_survives_the_gc)
{
    mrb_run_rec  run;
    mrb_interp  *interp = interp_sealed();
    int          i;

    REQUIRE(interp != NULL);

    for (i = 0; i < 5000; i++) {
        CHECK_EQ(interp_run_code(interp, "raise 'boom'", &run), -1);
        CHECK(strcmp(run.error, "RuntimeError: boom (outer:1)") == 0);
    }

    mrb_interp_close(interp);
}

TEST(interp_nested_run_in_a_fiber)
{
    mrb_interp  *interp = interp_sealed();
    mrb_run_rec  run;

    REQUIRE(interp != NULL);
    CHECK_EQ(interp_run_code(interp,
                             "f = Fiber.new do\n"
                             "  Fiber.yield nested_run('raise \"f\"')\n"
                             "  2\n"
                             "end\n"
                             "Apache.rputs \"#{f.resume} #{f.resume}\"",
                             &run), 0);
    CHECK(strcmp(interp_out, "-1 2") == 0);
    CHECK(strncmp(nested_error, "RuntimeError: f", 15) == 0);

    /* an error of the fiber itself is the outer run's */
    CHECK_EQ(interp_run_code(interp, "Fiber.new { raise 'in fiber' }.resume",
                             &run), -1);
    CHECK(strncmp(run.error, "RuntimeError: in fiber", 22) == 0);
    mrb_interp_close(interp);
}


TEST(interp_toplevel_state_is_removed_when_the_outer_run_ends)
{
    mrb_interp  *interp = interp_sealed();
    mrb_run_rec  run;

    REQUIRE(interp != NULL);
    CHECK_EQ(interp_run_code(interp,
                             "nested_run('$made = 1; Made = 2')\n"
                             "Apache.rputs \"#{$made} #{Made}\"", &run), 0);
    CHECK(strcmp(interp_out, "1 2") == 0);

    interp_out[0] = '\0';
    CHECK_EQ(interp_run_code(interp, "Apache.rputs \"#{$made.inspect} "
                             "#{Object.const_defined?(:Made)}\"", &run), 0);
    CHECK(strcmp(interp_out, "nil false") == 0);
    mrb_interp_close(interp);
}


/* mruby starts every Random::DEFAULT in one state: each interpreter is
 * seeded anew, so two draw different numbers (1 in 2**30 to fail). */
TEST(interp_random_is_seeded_for_each_interpreter)
{
    char         first[64];
    mrb_interp  *a = interp_sealed(), *b;
    mrb_run_rec  run;

    REQUIRE(a != NULL);
    CHECK_EQ(interp_run_code(a, "Apache.rputs rand(1 << 30).to_s", &run), 0);
    snprintf(first, sizeof(first), "%s", interp_out);

    b = interp_sealed();
    REQUIRE(b != NULL);
    CHECK_EQ(interp_run_code(b, "Apache.rputs rand(1 << 30).to_s", &run), 0);
    CHECK(first[0] != '\0' && interp_out[0] != '\0');
    CHECK(strcmp(first, interp_out) != 0);

    mrb_interp_close(a);
    mrb_interp_close(b);
}


TEST(interp_stack_overflow_is_an_error_of_the_run)
{
    mrb_interp  *interp = interp_sealed();
    mrb_run_rec  run;

    REQUIRE(interp != NULL);
    CHECK_EQ(interp_run_code(interp, "def down(n); down(n + 1); end; down(0)",
                             &run), -1);
    CHECK(strncmp(run.error, "SystemStackError", 16) == 0);

    interp_out[0] = '\0';
    CHECK_EQ(interp_run_code(interp, "Apache.rputs 'still here'", &run), 0);
    CHECK(strcmp(interp_out, "still here") == 0);
    mrb_interp_close(interp);
}


/* Runs code as a request and then "probe" as the next one; the probe's
 * output in interp_out. */
static int
interp_run_then(mrb_interp *interp, const char *code, const char *probe)
{
    mrb_run_rec  run;

    interp_run_code(interp, code, &run);
    interp_out[0] = '\0';
    return interp_run_code(interp, probe, &run);
}


TEST(interp_frozen_top_level_is_unfrozen_and_cleaned)
{
    mrb_interp  *interp = interp_sealed();
    mrb_run_rec  run;

    REQUIRE(interp != NULL);

    /* the cleanup removing @a and X raised FrozenError with no handler:
     * mruby aborted the process */
    CHECK_EQ(interp_run_code(interp, "@a = 1; freeze", &run), 0);
    CHECK_EQ(interp_run_code(interp, "X = 1; Object.freeze", &run), 0);
    CHECK_EQ(interp_run_code(interp, "Kernel.freeze; Apache.freeze", &run),
             0);

    interp_out[0] = '\0';
    CHECK_EQ(interp_run_code(interp,
                             "@b = 2; Y = 3; class Z; end\n"
                             "Apache.rputs [@a.inspect, "
                             "Object.const_defined?(:X), frozen?, "
                             "Object.frozen?, Kernel.frozen?, "
                             "Apache.frozen?].inspect", &run), 0);
    CHECK(strcmp(interp_out, "[\"nil\", false, false, false, false, false]")
          == 0);
    mrb_interp_close(interp);
}


TEST(interp_module_constants_and_methods_are_restored)
{
    mrb_interp  *interp = interp_sealed();

    REQUIRE(interp != NULL);

    /* the server class constant, reassigned and removed */
    CHECK_EQ(interp_run_then(interp, "Apache = 5",
                             "Apache.rputs get_server_class.to_s"), 0);
    CHECK(strcmp(interp_out, "Apache") == 0);
    CHECK_EQ(interp_run_then(interp,
                             "Object.send(:remove_const, :Apache)",
                             "Apache.rputs Apache::HTTP_OK.to_s"), 0);
    CHECK(strcmp(interp_out, "200") == 0);

    /* a constant under the server class, and a core class's constant */
    CHECK_EQ(interp_run_then(interp, "Apache::HTTP_OK = 1; String = 2",
                             "Apache.rputs \"#{Apache::HTTP_OK} "
                             "#{String.name}\""), 0);
    CHECK(strcmp(interp_out, "200 String") == 0);

    /* the module's methods: the server class's and Kernel's */
    CHECK_EQ(interp_run_then(interp,
                             "def Apache.rputs(s); end\n"
                             "module Kernel; def server_name; 'x'; end; "
                             "def added_to_kernel; end; end",
                             "Apache.rputs server_name + "
                             "respond_to?(:added_to_kernel).to_s"), 0);
    CHECK(strcmp(interp_out, "Testfalse") == 0);

    CHECK_EQ(interp_run_then(interp,
                             "class << Apache; remove_method :rputs; end",
                             "Apache.rputs 'back'"), 0);
    CHECK(strcmp(interp_out, "back") == 0);
    mrb_interp_close(interp);
}


TEST(interp_plain_runs_restore_nothing)
{
    mrb_interp  *interp = interp_sealed();
    mrb_run_rec  run;
    int          i;

    REQUIRE(interp != NULL);

    for (i = 0; i < 3; i++) {
        CHECK_EQ(interp_run_code(interp,
                                 "x = [1, 'a', :b].map(&:to_s).join\n"
                                 "Apache.rputs x.upcase + "
                                 "Apache::HTTP_OK.to_s", &run), 0);
    }

    CHECK_EQ(mrb_interp_toplevel_restores(interp), 0);
    CHECK_EQ(mrb_interp_toplevel_compares(interp), 0);

    CHECK_EQ(interp_run_code(interp, "Made = 1", &run), 0);
    CHECK_EQ(mrb_interp_toplevel_restores(interp), 1);
    CHECK_EQ(mrb_interp_toplevel_compares(interp), 1);
    CHECK_EQ(interp_run_code(interp, "Apache.rputs 'a'", &run), 0);
    CHECK_EQ(mrb_interp_toplevel_restores(interp), 1);
    CHECK_EQ(mrb_interp_toplevel_compares(interp), 1);
    mrb_interp_close(interp);
}


/*
 * Runs that do not name what changes the top level skip the comparison of
 * its tables' values (mrb_toplevel_scan.c; an added or removed name shows
 * in the sizes, compared after every run).  Each of these reassigns or
 * redefines something that exists, in a way the bytecode shows only as a
 * method name, and must still be put back before the probe runs.
 */
static const char  *const  interp_probe =
    "s = get_server_class\n"
    "s.rputs [Object.const_get(:Apache).to_s, s::HTTP_OK, server_name, "
    "Object.const_defined?(:Leak)].inspect";

#define INTERP_PROBE_CLEAN  "[\"Apache\", 200, \"Test\", false]"


/* Runs code in a new interpreter, then the probe; 0 if the probe saw the
 * interpreter as it was sealed. */
static int
interp_leaks(mrb_interp *interp, const char *code)
{
    if (interp_run_then(interp, code, interp_probe) != 0
        || strcmp(interp_out, INTERP_PROBE_CLEAN) != 0)
    {
        fprintf(stderr, "  after %s: %s\n", code, interp_out);
        return 1;
    }

    return 0;
}


TEST(interp_reflective_changes_are_restored)
{
    static const char  *const  hostile[] = {
        "Kernel.send(:define_method, :server_name) { 'x' }",
        "Kernel.__send__(:define_method, :server_name) { 'x' }",
        "Object.const_set(:Apache, 5)",
        "Apache.const_set(:HTTP_OK, 1)",
        "eval('Apache = 5')",
        "Object.class_eval('Apache = 5')",
        "Kernel.module_eval('def server_name; \"x\"; end')",
        "Kernel.instance_eval { define_method(:server_name) { 'x' } }",
        "Apache.define_singleton_method(:rputs) { |s| }",
        "Object.__send__(('const_' + 'set').to_sym, :Apache, 5)",
        "Object.method(:const_set).call(:Apache, 5)",
        "[[:Apache, 5]].each { |a| Object.const_set(*a) }",
        NULL
    };
    mrb_interp  *interp;
    int          i;

    for (i = 0; hostile[i] != NULL; i++) {
        interp = interp_sealed();
        REQUIRE(interp != NULL);
        CHECK_EQ(interp_leaks(interp, hostile[i]), 0);
        mrb_interp_close(interp);
    }
}


/*
 * What one run leaves (a method in another class, an alias, a block or a
 * Method in a shared object) can change the top level when a later run
 * that names nothing calls it: from then on every run compares.
 */
TEST(interp_code_left_by_a_run_is_watched_in_later_runs)
{
    static const char  *const  steps[][2] = {
        { "class Module; alias cs const_set; end", "Object.cs(:Apache, 5)" },
        { "def Object.mk; const_set(:Apache, 5); end", "Object.mk" },
        { "class String; def mk; Object.const_set(:Apache, 5); end; end",
          "'a'.mk" },
        { "String.instance_variable_set(:@f, "
          "-> { Object.const_set(:Apache, 5) })",
          "String.instance_variable_get(:@f).call" },
        { "String.instance_variable_set(:@m, Object.method(:const_set))",
          "String.instance_variable_get(:@m).call(:Apache, 5)" },
    };
    mrb_interp  *interp;
    mrb_run_rec  run;
    size_t       i;

    for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        interp = interp_sealed();
        REQUIRE(interp != NULL);
        CHECK_EQ(interp_run_code(interp, steps[i][0], &run), 0);
        CHECK_EQ(interp_leaks(interp, steps[i][1]), 0);
        mrb_interp_close(interp);
    }
}


/* A sealed interpreter whose startup script was code. */
static mrb_interp *
interp_with_startup(const char *code)
{
    char         err[256];
    mrb_interp  *interp = mrb_interp_open(&interp_server, NULL, err,
                                          sizeof(err));
    mrb_script  *s;
    mrb_run_rec  run;

    if (interp == NULL) {
        return NULL;
    }

    s = mrb_script_from_code(code, strlen(code), "startup", 1, err,
                             sizeof(err));
    if (s != NULL) {
        mrb_run_init(&run, NULL, 0);
        run.startup = 1;
        mrb_script_run(interp, s, &run);
        mrb_script_free(s);
    }

    mrb_interp_seal(interp);
    interp_out[0] = '\0';
    return interp;
}


TEST(interp_code_a_startup_script_left_is_watched)
{
    static const char  *const  startup[] = {
        "def Apache.mk; Object.const_set(:Apache, 5); end",
        "class Helper; def self.mk; eval('Object::Apache = 5'); end; end\n"
        "def Apache.mk; Helper.mk; end",
        "MK = -> { Object.const_set(:Apache, 5) }\n"
        "def Apache.mk; MK.call; end",
        "class Module; alias cs const_set; end\n"
        "def Apache.mk; Object.cs(:Apache, 5); end",
        "class Helper; extend Forwardable; def obj; Object; end\n"
        "def_delegator :obj, :const_set, :mk; end\n"
        "def Apache.mk; Helper.new.mk(:Apache, 5); end",
    };
    mrb_interp  *interp;
    size_t       i;

    for (i = 0; i < sizeof(startup) / sizeof(startup[0]); i++) {
        interp = interp_with_startup(startup[i]);
        REQUIRE(interp != NULL);
        CHECK_EQ(interp_leaks(interp, "Apache.mk"), 0);
        mrb_interp_close(interp);
    }
}


/* A startup script that only defines classes, methods, constants and
 * accessors leaves nothing that changes the top level: its requests skip
 * the comparison. */
TEST(interp_plain_startup_code_keeps_runs_cheap)
{
    mrb_interp  *interp = interp_with_startup(
        "class Counter\n"
        "  attr_reader :n\n"
        "  include Comparable\n"
        "  LIMIT = 10\n"
        "  def initialize; @n = 0; end\n"
        "  def bump; @n += 1; [1, 2].each { |x| @n += x }; self; end\n"
        "  alias to_s inspect\n"
        "end\n"
        "COUNTER = Counter.new\n");
    mrb_run_rec  run;

    REQUIRE(interp != NULL);
    CHECK_EQ(interp_run_code(interp, "Apache.rputs COUNTER.bump.n.to_s",
                             &run), 0);
    CHECK(strcmp(interp_out, "4") == 0);
    CHECK_EQ(mrb_interp_toplevel_compares(interp), 0);
    mrb_interp_close(interp);
}


/* Descriptors open in this process. */
static int
interp_open_fds(void)
{
    int  fd, n = 0;

    for (fd = 0; fd < 1024; fd++) {
        if (fcntl(fd, F_GETFD) != -1) {
            n++;
        }
    }

    return n;
}


/*
 * A run that runs out of descriptors (File objects it cannot reach any
 * more hold them) gives them back when it ends: nothing else would collect
 * them while every later request fails before it allocates.
 */
TEST(interp_descriptors_of_a_failed_run_are_given_back)
{
    pid_t  pid;
    int    status;

    pid = fork();
    if (pid == 0) {
        struct rlimit  lim;
        mrb_interp    *interp = interp_sealed();
        mrb_run_rec    run;
        int            before, rc;

        getrlimit(RLIMIT_NOFILE, &lim);
        before = interp_open_fds();
        lim.rlim_cur = (rlim_t) before + 40;
        setrlimit(RLIMIT_NOFILE, &lim);

        rc = interp_run_code(interp,
                             "files = []\n"
                             "100.times { files << File.open('/dev/null') }",
                             &run);
        if (rc != -1 || interp_open_fds() > before + 1) {
            fprintf(stderr, "  rc %d, %d descriptors before, %d after\n",
                    rc, before, interp_open_fds());
            _exit(1);
        }
        _exit(0);
    }
    REQUIRE(pid > 0);
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}


/*
 * mrb_interp_take_this (Apache: a callback resuming a run that waits in an
 * interpreter another thread is using): it waits for the interpreter to be
 * given back, and while it waits nobody else is lent that one.
 */
typedef struct {
    mrb_interp       *want;
    pid_t             tid;
    volatile int      got;
} interp_taker;


static void *
interp_take_this_main(void *arg)
{
    interp_taker  *t = arg;

    t->tid = (pid_t) syscall(SYS_gettid);
    mrb_interp_take_this(t->want);
    t->got = 1;
    return NULL;
}


/* Whether thread tid of this process sleeps (in the condition wait). */
static int
interp_thread_sleeps(pid_t tid)
{
    char   path[64], buf[256], *p;
    FILE  *f;
    int    sleeps = 0;

    snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int) tid);
    f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(buf, sizeof(buf), f) != NULL
            && (p = strrchr(buf, ')')) != NULL)
        {
            sleeps = p[2] == 'S';
        }
        fclose(f);
    }

    return sleeps;
}


static int
interp_wait_sleeping(interp_taker *t)
{
    uint64_t  deadline = unit_now_ns() + 10ull * 1000000000;

    while (unit_now_ns() < deadline) {
        if (t->tid != 0 && interp_thread_sleeps(t->tid)) {
            return 1;
        }
        usleep(1000);
    }

    return 0;
}


TEST(interp_take_this_waits_for_the_interpreter_and_keeps_it)
{
    char           err[256];
    mrb_interp    *a, *b, *x;
    interp_taker   t;
    pthread_t      thread;

    a = mrb_interp_take(&interp_server, NULL, NULL, NULL, err, sizeof(err));
    b = mrb_interp_take(&interp_server, NULL, NULL, NULL, err, sizeof(err));
    REQUIRE(a != NULL && b != NULL && a != b);

    /* idle: taken at once */
    mrb_interp_give_back(b);
    mrb_interp_take_this(b);

    /* lent (a is ours): the taker waits */
    memset(&t, 0, sizeof(t));
    t.want = a;
    REQUIRE(pthread_create(&thread, NULL, interp_take_this_main, &t) == 0);
    REQUIRE(interp_wait_sleeping(&t));
    CHECK(!t.got);

    /* another interpreter given back wakes it, and it waits on */
    mrb_interp_give_back(b);
    REQUIRE(interp_wait_sleeping(&t));
    CHECK(!t.got);
    x = mrb_interp_take(&interp_server, NULL, NULL, NULL, err, sizeof(err));
    CHECK(x == b);

    /* the wanted one goes to the taker, not to the next mrb_interp_take */
    mrb_interp_give_back(a);
    pthread_join(thread, NULL);
    CHECK(t.got);
    x = mrb_interp_take(&interp_server, NULL, NULL, NULL, err, sizeof(err));
    CHECK(x != a);

    mrb_interp_give_back(x);
    mrb_interp_give_back(a);
    if (x != b) {
        mrb_interp_give_back(b);
    }
    mrb_interp_close_idle();
}
