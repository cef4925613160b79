/*
 * Unit tests of mrb_error.c: an exception as one error-log line, on a bare
 * mrb_state.  (A run's error with its backtrace at debug, through the
 * server's log: test_script.c and test_interp.c.)
 */

#include <string.h>

#include <mruby.h>
#include <mruby/compile.h>

#include "mrb_errbuf.h"
#include "mrb_interp_core.h"
#include "unit.h"
#include "unit_oom.h"

/* The exception code, compiled as file.rb, raises: its backtrace has
 * frames on every mruby (3.3 and 4.0 give none for code of no file). */
static mrb_value
error_of_file(mrb_state *mrb, const char *code, const char *file)
{
    mrbc_context  *cxt = mrbc_context_new(mrb);
    mrb_value      exc;

    mrbc_filename(mrb, cxt, file);
    mrb_load_string_cxt(mrb, code, cxt);
    mrbc_context_free(mrb, cxt);
    exc = mrb->exc != NULL ? mrb_obj_value(mrb->exc) : mrb_nil_value();
    mrb->exc = NULL;

    return exc;
}


/* The exception code raises, taken out of mrb->exc. */
static mrb_value
error_of(mrb_state *mrb, const char *code)
{
    mrb_value  exc;

    mrb_load_string(mrb, code);
    exc = mrb->exc != NULL ? mrb_obj_value(mrb->exc) : mrb_nil_value();
    mrb->exc = NULL;

    return exc;
}


TEST(error_line_escapes_newlines_returns_and_nul)
{
    char        line[MRB_ERR_RUN_LEN];
    mrb_state  *mrb = mrb_open();
    mrb_value   exc;

    REQUIRE(mrb != NULL);

    exc = error_of(mrb, "raise \"one\\ntwo\\r\\nthree\\0four\"");
    REQUIRE(!mrb_nil_p(exc));

    mrb_error_format(mrb, exc, line, sizeof(line));

    CHECK(strncmp(line, "RuntimeError: one\\ntwo\\r\\nthree\\0four",
                  strlen("RuntimeError: one\\ntwo\\r\\nthree\\0four")) == 0);
    CHECK(strchr(line, '\n') == NULL && strchr(line, '\r') == NULL);
    CHECK(mrb->exc == NULL);

    mrb_close(mrb);
}


TEST(error_line_names_a_class_whose_message_raises)
{
    char        line[MRB_ERR_RUN_LEN];
    mrb_state  *mrb = mrb_open();
    mrb_value   exc;

    REQUIRE(mrb != NULL);

    exc = error_of(mrb, "class OddError < StandardError; def message; "
                   "raise 'no message today'; end; end; raise OddError");
    REQUIRE(!mrb_nil_p(exc));

    mrb_error_format(mrb, exc, line, sizeof(line));

    CHECK(strncmp(line, "OddError: ", 10) == 0);
    CHECK(strstr(line, "no message today") == NULL);
    CHECK(mrb->exc == NULL);

    mrb_close(mrb);
}


/* Cut, never overrun, and never half an escape. */
TEST(error_line_is_cut_to_its_buffer)
{
    char        line[16];
    mrb_state  *mrb = mrb_open();
    mrb_value   exc;

    REQUIRE(mrb != NULL);

    exc = error_of(mrb, "raise \"ab\\ncd\"");
    REQUIRE(!mrb_nil_p(exc));

    memset(line, 'x', sizeof(line));
    mrb_error_format(mrb, exc, line, 15);
    CHECK(strcmp(line, "RuntimeError: ") == 0);
    CHECK(line[15] == 'x');

    mrb_error_format(mrb, exc, line, sizeof(line));
    CHECK(strcmp(line, "RuntimeError: a") == 0);

    mrb_close(mrb);
}


/* Out of memory while the line is made (the class name and the backtrace
 * allocate): the line says so, where the raise used to abort the process
 * (nothing outside the run catches it). */
TEST(error_line_out_of_memory_says_so)
{
    char        line[MRB_ERR_RUN_LEN];
    mrb_state  *mrb = mrb_open();
    mrb_value   exc;
    long        n;
    int         short_of_memory = 0;

    REQUIRE(mrb != NULL);

    exc = error_of_file(mrb, "def f; raise 'deep'; end; f", "deep.rb");
    REQUIRE(!mrb_nil_p(exc));
    mrb_gc_register(mrb, exc);

    for (n = 0; n < 100; n++) {
        unit_oom_heap_full(mrb);
        unit_oom_after(mrb, n);
        mrb_error_format(mrb, exc, line, sizeof(line));
        unit_oom_end(mrb);

        CHECK(mrb->exc == NULL);
        if (!unit_oom_failed()) {
            break;
        }
        CHECK(strstr(line, "out of memory describing it") != NULL);
        short_of_memory++;
    }

    CHECK(short_of_memory > 0);
    CHECK(strncmp(line, "RuntimeError: deep (", 20) == 0);

    mrb_gc_unregister(mrb, exc);
    mrb_close(mrb);
}
