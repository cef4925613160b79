/*
 * The slot map of a Redis Cluster, one per process for every interpreter
 * that names the same cluster: which node serves each of the 16384 slots
 * as master, which of that master's replicas answers reads, and every
 * node's "host:port".  It lives in C memory, out of every interpreter's
 * heap and garbage collector, and is found by a name (the nodes and
 * options given to Redis::Cluster.new), so that CLUSTER SLOTS is read once
 * per process and a MOVED seen by one interpreter changes the map for all.
 *
 * Readers take no lock (see mrb_redis_slots.c); writers (a reading of
 * CLUSTER SLOTS, a MOVED) serialize on the map's own mutex, held for no
 * longer than the write and never across a call into Ruby or a wait.
 */

#ifndef MRB_REDIS_SLOTS_H
#define MRB_REDIS_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#define MRB_REDIS_SLOTS_COUNT      16384
/* The node addresses one map can know: Redis advises clusters of at most
 * 1000 nodes, and a node's address stays known for the map's life. */
#define MRB_REDIS_SLOTS_NODES_MAX  2048
/* A slot without a node (or a master without a replica). */
#define MRB_REDIS_SLOTS_NONE       0xffff

typedef struct mrb_redis_slots_s  mrb_redis_slots;

/* One range of a CLUSTER SLOTS reading: slots first to last (inclusive)
 * served by nodes[0], whose replicas are nodes[1..n). */
typedef struct {
    unsigned      first;
    unsigned      last;
    const char  **nodes;   /* NUL-terminated "host:port"s */
    size_t        n;       /* at least 1 */
} mrb_redis_slots_range;

/* The process's map named name, made empty (nothing loaded) the first
 * time; each hold is given back once with mrb_redis_slots_give_back,
 * and the last one frees the map.  NULL out of memory. */
mrb_redis_slots *mrb_redis_slots_hold(const char *name);
void mrb_redis_slots_give_back(mrb_redis_slots *m);

/* Whether a reading was ever loaded. */
int mrb_redis_slots_loaded(const mrb_redis_slots *m);

/* The node that serves slot as master, and the replica of it that
 * answers reads (chosen by the process's id among the master's, so that
 * processes spread over them): a node number, or MRB_REDIS_SLOTS_NONE.
 * Lock-free. */
unsigned mrb_redis_slots_master(const mrb_redis_slots *m, unsigned slot);
unsigned mrb_redis_slots_replica(const mrb_redis_slots *m, unsigned slot);

/* The "host:port" of node number node, NULL when there is none; valid
 * while the map is held.  Lock-free. */
const char *mrb_redis_slots_address(const mrb_redis_slots *m, unsigned node);

/* The number of the node at addr, MRB_REDIS_SLOTS_NONE when it is not
 * known.  Lock-free. */
unsigned mrb_redis_slots_find(const mrb_redis_slots *m, const char *addr);

/* How many nodes the map knows: their numbers are 0 to that minus 1. */
unsigned mrb_redis_slots_nodes(const mrb_redis_slots *m);

/* The replicas of the master at node: up to max of their numbers in
 * out; returns how many it has. */
size_t mrb_redis_slots_replicas(mrb_redis_slots *m, unsigned node,
    unsigned *out, size_t max);

/*
 * A reading of CLUSTER SLOTS (n ranges) replaces the map: a slot in no
 * range has no node after it.  0, or -1 with the reason in err (out of
 * memory, more than MRB_REDIS_SLOTS_NODES_MAX nodes, a slot out of range),
 * the map then possibly half written (a later reading or MOVED mends it).
 */
int mrb_redis_slots_load(mrb_redis_slots *m,
    const mrb_redis_slots_range *ranges, size_t n, char *err, size_t errlen);

/* MOVED: slot's master is the node at addr (and its replica for reads one
 * of that node's, when the map knows them).  0, or -1 with the reason in
 * err. */
int mrb_redis_slots_move(mrb_redis_slots *m, unsigned slot, const char *addr,
    char *err, size_t errlen);

/*
 * The first reading is made by one caller while the others wait for it:
 * claim returns 1 when the caller may read (nobody else claimed, or the
 * last claim ended at or before now, a time in ms of mrb_redis_now_ms),
 * and the claim then lasts until until, or until unclaim.
 */
int mrb_redis_slots_claim(mrb_redis_slots *m, uint64_t now, uint64_t until);
void mrb_redis_slots_unclaim(mrb_redis_slots *m);

#endif /* MRB_REDIS_SLOTS_H */
