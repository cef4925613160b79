/*
 * The parts every interpreter gets beyond the core, in the order they are
 * defined (what Lua's linit.c is to its libraries): both adapters hand
 * this list to the core as mrb_server.parts.  A subsystem with classes of
 * its own, or with state a run must not leave to the next, is added here
 * and nowhere else.
 */

#include <stddef.h>

#include "mrb_lib.h"
#include "mrb_mutex.h"
#include "mrb_redis.h"
#include "mrb_regexp.h"

const mrb_part *const  mrb_parts[] = {
    &mrb_redis_part,
    &mrb_mutex_part,                /* before mutex.rb, in mrb_lib_part */
    &mrb_lib_part,
    &mrb_regexp_part,
    NULL
};
