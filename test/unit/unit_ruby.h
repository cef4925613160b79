/*
 * A check on a bare mrb_state (no interpreter of the core around it): the
 * inspect of code's value, or of the exception it raised, is expected.
 */

#ifndef UNIT_RUBY_H
#define UNIT_RUBY_H

#include <mruby.h>

void unit_expect_ruby(mrb_state *mrb, const char *file, int line,
    const char *code, const char *expected);

#define CHECK_MRB(mrb, code, expected)                                      \
    unit_expect_ruby(mrb, __FILE__, __LINE__, code, expected)

#endif /* UNIT_RUBY_H */
