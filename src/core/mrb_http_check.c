/*
 * Checks of what a script hands to the wire (see mrb_http_check.h): the
 * byte classes of RFC 9110 as tables, and the Ruby-facing helpers that
 * convert each argument once before checking it.
 */

#include <mruby.h>
#include <mruby/string.h>

#include "mrb_http_check.h"


/* tchar: "!#$%&'*+-.^_`|~", DIGIT, ALPHA (RFC 9110 5.6.2). */
static const unsigned char  http_tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1,
    ['*'] = 1, ['+'] = 1, ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1,
    ['`'] = 1, ['|'] = 1, ['~'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1,
    ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1,
    ['G'] = 1, ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1,
    ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1,
    ['g'] = 1, ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1,
    ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
    ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1,
};


static int
http_is_ctl(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}


int
mrb_http_valid_header_name(const char *p, size_t len)
{
    size_t  i;

    if (len == 0) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if (!http_tchar[(unsigned char) p[i]]) {
            return 0;
        }
    }

    return 1;
}


int
mrb_http_valid_header_value(const char *p, size_t len)
{
    size_t         i;
    unsigned char  c;

    for (i = 0; i < len; i++) {
        c = (unsigned char) p[i];

        if (http_is_ctl(c) && c != '\t') {
            return 0;
        }
    }

    return 1;
}


int
mrb_http_valid_final_status(mrb_int status)
{
    return status >= 200 && status <= 599;
}


int
mrb_http_valid_args(const char *p, size_t len)
{
    size_t         i;
    unsigned char  c;

    for (i = 0; i < len; i++) {
        c = (unsigned char) p[i];

        if (http_is_ctl(c) || c == ' ') {
            return 0;
        }
    }

    return 1;
}


int
mrb_http_valid_uri(const char *p, size_t len)
{
    size_t  i;

    if (len == 0) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if (http_is_ctl((unsigned char) p[i])) {
            return 0;
        }
    }

    return 1;
}


int
mrb_http_valid_target(const char *p, size_t len)
{
    return len > 0 && mrb_http_valid_args(p, len);
}


/* Ruby */


/* v as a String: itself, a Symbol's name, or v.to_s (called once). */
static mrb_value
http_to_str(mrb_state *mrb, mrb_value v)
{
    if (mrb_symbol_p(v)) {
        return mrb_sym_str(mrb, mrb_symbol(v));
    }

    return mrb_obj_as_string(mrb, v);
}


static void
http_str_of(mrb_value s, mrb_http_str *out)
{
    out->data = RSTRING_PTR(s);
    out->len = (size_t) RSTRING_LEN(s);
}


void
mrb_http_check_header(mrb_state *mrb, mrb_value name, mrb_value value,
    mrb_http_str *name_out, mrb_http_str *value_out)
{
    mrb_value  name_s, value_s;

    name_s = http_to_str(mrb, name);
    value_s = mrb_nil_p(value) ? value : http_to_str(mrb, value);

    /* from here on nothing calls into Ruby */

    http_str_of(name_s, name_out);

    if (!mrb_http_valid_header_name(name_out->data, name_out->len)) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR,
                   "invalid header name %!v (want an RFC 9110 token)",
                   name_s);
    }

    if (mrb_nil_p(value_s)) {
        value_out->data = NULL;
        value_out->len = 0;
        return;
    }

    http_str_of(value_s, value_out);

    if (!mrb_http_valid_header_value(value_out->data, value_out->len)) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR,
                   "invalid value for header %v "
                   "(CR, LF, NUL or another control character)", name_s);
    }
}


void
mrb_http_check_header_value(mrb_state *mrb, const char *what,
    mrb_value value, mrb_http_str *out)
{
    mrb_value  s;

    if (mrb_nil_p(value)) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR, "nil value for header %s", what);
    }

    s = http_to_str(mrb, value);
    http_str_of(s, out);

    if (!mrb_http_valid_header_value(out->data, out->len)) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR,
                   "invalid value for header %s "
                   "(CR, LF, NUL or another control character)", what);
    }
}


/* value as a String, checked by valid; error names what and what it is
 * refused for. */
static void
http_check_str(mrb_state *mrb, const char *what, mrb_value value,
    int (*valid)(const char *p, size_t len), const char *why,
    mrb_http_str *out)
{
    mrb_value  s;

    s = http_to_str(mrb, value);
    http_str_of(s, out);

    if (!valid(out->data, out->len)) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR, "invalid %s (%s)", what, why);
    }
}


void
mrb_http_check_uri(mrb_state *mrb, const char *what, mrb_value value,
    mrb_http_str *out)
{
    http_check_str(mrb, what, value, mrb_http_valid_uri,
                   "empty, or a control character", out);
}


void
mrb_http_check_target(mrb_state *mrb, const char *what, mrb_value value,
    mrb_http_str *out)
{
    http_check_str(mrb, what, value, mrb_http_valid_target,
                   "empty, or a control character or space", out);
}


void
mrb_http_check_args(mrb_state *mrb, const char *what, mrb_value value,
    mrb_http_str *out)
{
    http_check_str(mrb, what, value, mrb_http_valid_args,
                   "a control character or space", out);
}


void
mrb_http_check_final_status(mrb_state *mrb, mrb_int status)
{
    if (!mrb_http_valid_final_status(status)) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR,
                   "invalid status %i (a final status is 200-599)", status);
    }
}
