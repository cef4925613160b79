/*
 * Redis::Cluster's C half: key slots (CRC16 with hash tags), the slot of a
 * command's keys, and the commands as methods; the routing is Ruby
 * (mrblib/redis_cluster.rb).
 */

#ifndef MRB_REDIS_CLUSTER_H
#define MRB_REDIS_CLUSTER_H

#include <stddef.h>
#include <mruby.h>

#include "mrb_api.h"

/* The cluster slot (0 to 16383) of a key, or of its {hash tag}. */
unsigned mrb_redis_cluster_key_slot(const char *key, size_t len);

/*
 * Defines Redis::Cluster and Redis::ClusterError < base_error under redis,
 * with each of commands' names as a method that sends its name and
 * arguments through Redis::Cluster#call.  Called by the Redis part's
 * define, before mrblib adds the Ruby half.
 */
void mrb_redis_cluster_define(mrb_state *mrb, struct RClass *redis,
    struct RClass *base_error, const mrb_api_method *commands);

#endif /* MRB_REDIS_CLUSTER_H */
