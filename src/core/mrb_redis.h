/*
 * Redis: a client class on hiredis, for state shared by a fleet of servers.
 */

#ifndef MRB_REDIS_H
#define MRB_REDIS_H

#include <mruby.h>

/* Defines ::Redis and its exception classes. */
void mrb_redis_define(mrb_state *mrb);

#endif /* MRB_REDIS_H */
