/*
 * Unit tests of the run frame (mrb_interp_exec): a run made inside another
 * run, as a filter script reading the body makes one, and inside a fiber.
 * Its errors stay its own, the outer run goes on, and the top-level state
 * is removed once, when the outermost run ends.
 */

#include <stdio.h>
#include <string.h>
#include <mruby.h>
#include <mruby/string.h>
#include "mrb_interp.h"
#include "mrb_script.h"
#include "unit.h"


static char  interp_out[1024];
static char  nested_error[2048];


static int
interp_write(mrb_run *run, const char *data, size_t len)
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
interp_logger(void *target, mrb_run *run, int level, const char *msg,
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
    mrb_run      run;
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
interp_run_code(mrb_interp *interp, const char *code, mrb_run *run)
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
    mrb_run      run;

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


TEST(interp_nested_run_in_a_fiber)
{
    mrb_interp  *interp = interp_sealed();
    mrb_run      run;

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
    mrb_run      run;

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


TEST(interp_stack_overflow_is_an_error_of_the_run)
{
    mrb_interp  *interp = interp_sealed();
    mrb_run      run;

    REQUIRE(interp != NULL);
    CHECK_EQ(interp_run_code(interp, "def down(n); down(n + 1); end; down(0)",
                             &run), -1);
    CHECK(strncmp(run.error, "SystemStackError", 16) == 0);

    interp_out[0] = '\0';
    CHECK_EQ(interp_run_code(interp, "Apache.rputs 'still here'", &run), 0);
    CHECK(strcmp(interp_out, "still here") == 0);
    mrb_interp_close(interp);
}
