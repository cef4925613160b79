/*
 * Redis: a client class on hiredis, for state shared by a fleet of servers.
 */

#ifndef MRB_REDIS_H
#define MRB_REDIS_H

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

#endif /* MRB_REDIS_H */
