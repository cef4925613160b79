/*
 * Unit tests of mrb_http_status.c: the HTTP status constants of the server
 * class, the same on both servers, with each original module's aliases.
 */

#include <mruby.h>

#include "mrb_interp_core.h"
#include "unit.h"
#include "unit_ruby.h"


TEST(http_status_constants_are_statuses_with_both_modules_names)
{
    mrb_state      *mrb = mrb_open();
    struct RClass  *srv;

    REQUIRE(mrb != NULL);

    srv = mrb_define_class(mrb, "Srv", mrb->object_class);
    mrb_http_status_define(mrb, srv);

    CHECK_MRB(mrb, "Srv.constants.all? { |c| c.to_s.start_with?('HTTP_') "
              "&& (100..599).include?(Srv.const_get(c)) }", "true");
    /* each of the table's 67 names once: a name given twice would take
     * the second value silently */
    CHECK_MRB(mrb, "Srv.constants.size", "67");
    CHECK_MRB(mrb, "[Srv::HTTP_OK, Srv::HTTP_MOVED_TEMPORARILY, "
              "Srv::HTTP_NOT_FOUND]", "[200, 302, 404]");

    /* nginx's names beside httpd's */
    CHECK_MRB(mrb, "[Srv::HTTP_NOT_ALLOWED, Srv::HTTP_METHOD_NOT_ALLOWED, "
              "Srv::HTTP_SERVER_ERROR, Srv::HTTP_INTERNAL_SERVER_ERROR]",
              "[405, 405, 500, 500]");

    mrb_close(mrb);
}
