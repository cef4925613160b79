/*
 * Redis: a client class on hiredis, for state shared by a fleet of servers.
 */

#ifndef MRB_REDIS_H
#define MRB_REDIS_H

#include <stddef.h>
#include <mruby.h>

#include "mrb_part.h"

/*
 * ::Redis and its exception classes, as a part (mrb_part.h).  Its run_end
 * runs at the end of a request run that sent a command leaving its link
 * in a state of its own (MULTI, SELECT, SUBSCRIBE, CLIENT REPLY, ...):
 * it drops the links the run holds, so the next request gets a fresh one,
 * and stays dirty while other runs (waiting ones) still hold links.
 */
extern const mrb_part  mrb_redis_part;

/* The bytes of a command name given as a String or a Symbol (*len set);
 * NULL for another object (which the command sends by its to_s). */
const char *mrb_redis_name(mrb_state *mrb, mrb_value name, mrb_int *len);

/* Whether the command named by the len bytes at name changes nothing on
 * the server (GET, MGET, HGET, ...; any case): one that may be sent
 * again, or to a replica. */
int mrb_redis_read_only(const char *name, size_t len);

/* redis.name(*args) of the ::Redis object redis (name a String): the
 * reply, or an exception raised as the method would.  args
 * may point into the VM's stack: they are converted before the first
 * wait. */
mrb_value mrb_redis_command(mrb_state *mrb, mrb_value redis, mrb_value name,
    const mrb_value *args, mrb_int argc);

#endif /* MRB_REDIS_H */
