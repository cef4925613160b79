/*
 * ::Redis on hiredis (being written: the class is defined empty for now so
 * that the core links).
 */

#include <mruby.h>
#include "mrb_redis.h"


void
mrb_redis_define(mrb_state *mrb)
{
    mrb_define_class(mrb, "Redis", mrb->object_class);
}
