/*
 * Unit tests of the wire checks (mrb_http_check.h): the byte classes, the
 * status range, and the Ruby-facing helpers' conversion (each value's
 * to_s called once, and every conversion before any check).
 */

#include <string.h>
#include <mruby.h>
#include <mruby/array.h>
#include <mruby/compile.h>
#include <mruby/string.h>
#include "mrb_http_check.h"
#include "unit.h"

#define LIT(s)  s, sizeof(s) - 1


TEST(http_check_header_names_are_tokens)
{
    CHECK(mrb_http_valid_header_name(LIT("X-Custom_1.a!#$%&'*+^`|~")));
    CHECK(!mrb_http_valid_header_name(LIT("")));
    CHECK(!mrb_http_valid_header_name(LIT("X A")));
    CHECK(!mrb_http_valid_header_name(LIT("X:A")));
    CHECK(!mrb_http_valid_header_name(LIT("X\r\nA")));
    CHECK(!mrb_http_valid_header_name(LIT("X\0A")));
    CHECK(!mrb_http_valid_header_name(LIT("X(A)")));
    CHECK(!mrb_http_valid_header_name(LIT("\xc3\xa9")));
}


TEST(http_check_header_values_have_no_control_characters)
{
    CHECK(mrb_http_valid_header_value(LIT("")));
    CHECK(mrb_http_valid_header_value(LIT("a b\tc; q=\"x\" \xc3\xa9")));
    CHECK(!mrb_http_valid_header_value(LIT("a\r\nSet-Cookie: x=1")));
    CHECK(!mrb_http_valid_header_value(LIT("a\nb")));
    CHECK(!mrb_http_valid_header_value(LIT("a\rb")));
    CHECK(!mrb_http_valid_header_value(LIT("a\0b")));
    CHECK(!mrb_http_valid_header_value(LIT("a\x7f")));
    CHECK(!mrb_http_valid_header_value(LIT("a\x01")));
}


TEST(http_check_final_status_is_200_to_599)
{
    CHECK(!mrb_http_valid_final_status(-1));
    CHECK(!mrb_http_valid_final_status(0));
    CHECK(!mrb_http_valid_final_status(100));
    CHECK(!mrb_http_valid_final_status(199));
    CHECK(mrb_http_valid_final_status(200));
    CHECK(mrb_http_valid_final_status(599));
    CHECK(!mrb_http_valid_final_status(600));
    CHECK(!mrb_http_valid_final_status(MRB_INT_MAX));
}


TEST(http_check_uris_and_args)
{
    CHECK(mrb_http_valid_target(LIT("/a/b?c=d%20e#f")));
    CHECK(mrb_http_valid_target(LIT("https://example.com/x")));
    CHECK(!mrb_http_valid_target(LIT("")));
    CHECK(!mrb_http_valid_target(LIT("/a b")));
    CHECK(!mrb_http_valid_target(LIT("/a\r\nX: y")));
    CHECK(mrb_http_valid_uri(LIT("/a b")));
    CHECK(!mrb_http_valid_uri(LIT("")));
    CHECK(!mrb_http_valid_uri(LIT("/a\r\nX: y")));
    CHECK(!mrb_http_valid_uri(LIT("/a\0")));
    CHECK(mrb_http_valid_args(LIT("")));
    CHECK(mrb_http_valid_args(LIT("a=1&b=%0d")));
    CHECK(!mrb_http_valid_args(LIT("a=1 HTTP/1.1\r\nHost: x")));
    CHECK(!mrb_http_valid_args(LIT("a=\t")));
}


/* Runs code in a fresh interpreter, with a C method check_header(k, v)
 * that answers [name, value] as the helper saw them. */
static mrb_value
check_header_m(mrb_state *mrb, mrb_value self)
{
    mrb_value     k, v, out[2];
    mrb_http_str  n, val;

    mrb_get_args(mrb, "oo", &k, &v);
    mrb_http_check_header(mrb, k, v, &n, &val);

    out[0] = mrb_str_new(mrb, n.data, n.len);
    out[1] = val.data ? mrb_str_new(mrb, val.data, val.len) : mrb_nil_value();
    return mrb_ary_new_from_values(mrb, 2, out);
}


static mrb_value
check_status_m(mrb_state *mrb, mrb_value self)
{
    mrb_int  status;

    mrb_get_args(mrb, "i", &status);
    mrb_http_check_final_status(mrb, status);
    return mrb_fixnum_value(status);
}


static mrb_value
check_args_m(mrb_state *mrb, mrb_value self)
{
    mrb_value     v;
    mrb_http_str  a;

    mrb_get_args(mrb, "o", &v);
    mrb_http_check_args(mrb, "args", v, &a);
    return mrb_str_new(mrb, a.data, a.len);
}


static mrb_state *
open_with_helpers(void)
{
    mrb_state  *mrb = mrb_open();

    if (mrb != NULL) {
        mrb_define_method(mrb, mrb->kernel_module, "check_header",
                          check_header_m, MRB_ARGS_REQ(2));
        mrb_define_method(mrb, mrb->kernel_module, "check_status",
                          check_status_m, MRB_ARGS_REQ(1));
        mrb_define_method(mrb, mrb->kernel_module, "check_args",
                          check_args_m, MRB_ARGS_REQ(1));
    }

    return mrb;
}


/* The result of code as a C string ("" if it is not a String). */
static const char *
eval_str(mrb_state *mrb, const char *code)
{
    mrb_value  v = mrb_load_string(mrb, code);

    if (mrb->exc != NULL) {
        v = mrb_obj_value(mrb->exc);
        mrb->exc = NULL;
        v = mrb_inspect(mrb, v);
    }

    return mrb_string_p(v) ? mrb_str_to_cstr(mrb, v) : "";
}


TEST(http_check_helpers_raise_argument_error_naming_the_header)
{
    mrb_state  *mrb = open_with_helpers();

    REQUIRE(mrb != NULL);

    CHECK(strcmp(eval_str(mrb, "check_header('X-A', 'b').inspect"),
                 "[\"X-A\", \"b\"]") == 0);
    CHECK(strcmp(eval_str(mrb, "check_header(:'X-A', 5).inspect"),
                 "[\"X-A\", \"5\"]") == 0);
    CHECK(strcmp(eval_str(mrb, "check_header('X-A', nil).inspect"),
                 "[\"X-A\", nil]") == 0);
    CHECK(strstr(eval_str(mrb, "check_header('X-A', \"a\\r\\nB: c\")"),
                 "ArgumentError") != NULL);
    CHECK(strstr(eval_str(mrb, "check_header('X-A', \"a\\r\\nB: c\")"),
                 "invalid value for header X-A") != NULL);
    CHECK(strstr(eval_str(mrb, "check_header(\"X\\nA\", 'b')"),
                 "invalid header name") != NULL);
    CHECK(strstr(eval_str(mrb, "check_status(100)"), "ArgumentError")
          != NULL);
    CHECK(strstr(eval_str(mrb, "check_status(-1)"), "ArgumentError")
          != NULL);
    CHECK(strcmp(eval_str(mrb, "check_status(404).to_s"), "404") == 0);
    CHECK(strstr(eval_str(mrb, "check_args('a=1 HTTP/1.0')"),
                 "invalid args") != NULL);

    mrb_close(mrb);
}


/* A value whose to_s changes the name already converted: the check sees
 * the name as it is after every to_s ran. */
TEST(http_check_helpers_convert_everything_before_checking)
{
    mrb_state  *mrb = open_with_helpers();

    REQUIRE(mrb != NULL);

    CHECK(strstr(eval_str(mrb,
                     "$k = 'X-A'\n"
                     "v = Object.new\n"
                     "def v.to_s; $k << \"\\r\\nSet-Cookie: x\"; 'b'; end\n"
                     "check_header($k, v)"),
                 "invalid header name") != NULL);

    CHECK(strcmp(eval_str(mrb,
                     "$n = 0\n"
                     "v = Object.new\n"
                     "def v.to_s; $n += 1; 'b'; end\n"
                     "check_header('X-A', v); $n.to_s"),
                 "1") == 0);

    mrb_close(mrb);
}
