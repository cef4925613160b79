/*
 * Redis::Cluster's C half: key slots (CRC16 with hash tags), the slot of a
 * command's keys, Redis::Cluster.new, the slot map's methods, and a
 * command sent to its node in the steady state; the rest of the routing
 * is Ruby (mrblib/redis_cluster.rb).
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
 * with initialize, and Redis::Cluster::SlotMap's C methods (the process's
 * slot map, mrb_redis_slots.h); returns the class, to which the Redis
 * part gives call and the commands' methods (which send through
 * mrb_redis_cluster_send).  Called by the Redis part's define, before
 * mrblib adds the Ruby half.
 */
struct RClass *mrb_redis_cluster_define(mrb_state *mrb, struct RClass *redis,
    struct RClass *base_error);

/*
 * cluster.name(*args) of the Redis::Cluster object cluster (name a String
 * or a Symbol; another object goes through Ruby): the reply, or an
 * exception raised.  args may point into the VM's stack.
 */
mrb_value mrb_redis_cluster_send(mrb_state *mrb, mrb_value cluster,
    mrb_value name, const mrb_value *args, mrb_int argc);

#endif /* MRB_REDIS_CLUSTER_H */
