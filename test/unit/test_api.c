/*
 * The registration tables of mrb_api.h: a field table's getters, one C
 * function for many fields, each reading the field its method was defined
 * for.
 */

#include <stddef.h>

#include <mruby.h>

#include "mrb_api.h"
#include "unit.h"
#include "unit_ruby.h"

typedef struct {
    mrb_int  first;
    mrb_int  second;
} api_record;

static api_record  api_the_record = { 1, 2 };


static mrb_value
api_get_int(mrb_state *mrb, mrb_value self)
{
    size_t  offset = mrb_api_field_offset(mrb);

    return mrb_int_value(mrb, *(mrb_int *) ((char *) &api_the_record
                                            + offset));
}


static mrb_value
api_set_second(mrb_state *mrb, mrb_value self)
{
    mrb_get_args(mrb, "i", &api_the_record.second);
    return self;
}


static const mrb_api_field  api_fields[] = {
    { "first", api_get_int, NULL, offsetof(api_record, first) },
    { "second", api_get_int, api_set_second, offsetof(api_record, second) },
    MRB_API_FIELD_END
};


TEST(api_fields_read_the_field_their_method_was_defined_for)
{
    mrb_state      *mrb;
    struct RClass  *c;

    mrb = mrb_open();
    REQUIRE(mrb != NULL);

    c = mrb_define_class(mrb, "Record", mrb->object_class);
    mrb_api_define_fields(mrb, c, api_fields);

    CHECK_MRB(mrb, "r = Record.new; [r.first, r.second]", "[1, 2]");
    CHECK_MRB(mrb, "r = Record.new; r.second = 5; [r.first, r.second]",
               "[1, 5]");
    CHECK_MRB(mrb, "Record.new.respond_to?(:first=)", "false");

    /* as a method defined with MRB_ARGS_NONE() */
    CHECK_MRB(mrb, "Record.new.first(1)",
               "wrong number of arguments (given 1, expected 0) "
               "(ArgumentError)");

    mrb_close(mrb);
}
