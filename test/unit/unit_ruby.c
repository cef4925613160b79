/*
 * unit_ruby.h: checks of Ruby code's value on a bare mrb_state.
 */

#include <string.h>

#include <mruby.h>
#include <mruby/compile.h>
#include <mruby/string.h>

#include "unit.h"
#include "unit_ruby.h"


void
unit_expect_ruby(mrb_state *mrb, const char *file, int line,
    const char *code, const char *expected)
{
    mrb_value  v;

    v = mrb_load_string(mrb, code);

    /* "message (Class)", as mruby 3.x inspects an exception (4.0:
     * #<Class: message>) */
    if (mrb->exc != NULL) {
        v = mrb_format(mrb, "%v (%C)",
                       mrb_funcall(mrb, mrb_obj_value(mrb->exc), "message", 0),
                       mrb_obj_class(mrb, mrb_obj_value(mrb->exc)));
        mrb->exc = NULL;
    } else {
        v = mrb_inspect(mrb, v);
    }

    if (strcmp(RSTRING_PTR(v), expected) != 0) {
        unit_fail(file, line, "%s: %s, not %s", code, RSTRING_PTR(v),
                  expected);
    }
}
