/*
 * Redis: a client class on hiredis, for state shared by a fleet of servers.
 */

#ifndef MRB_REDIS_H
#define MRB_REDIS_H

#include <mruby.h>

/* Defines ::Redis and its exception classes. */
void mrb_redis_define(mrb_state *mrb);

/*
 * At the end of a request run that sent a command leaving its link in a
 * state of its own (MULTI, SELECT, SUBSCRIBE, CLIENT REPLY, ...): drops
 * the links run holds, so the next request gets a fresh one.  Returns
 * whether other runs (waiting ones) still hold links.  Raises nothing.
 */
int mrb_redis_run_end(mrb_state *mrb, const void *run);

#endif /* MRB_REDIS_H */
