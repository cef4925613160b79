/*
 * A Redis Cluster's slot map, shared by the interpreters of a process
 * (see mrb_redis_slots.h).
 *
 * Why readers need no lock: a slot's entry is one atomic 16-bit node
 * number, and a node, once added, is neither changed nor removed while
 * the map lives (the node table only grows, and a node's address is
 * immutable).  A writer publishes a node's pointer before the count of
 * nodes and before any slot entry that names it (release stores; readers
 * load with acquire), so every number a reader finds names a node it can
 * read.  A reading of CLUSTER SLOTS written while a reader looks may give
 * it the old node for one slot and the new one for the next: the old one
 * answers MOVED, as it would have a moment earlier.  No slot is ever
 * cleared on the way to its new value, so a reader never finds a slot
 * without a node that has one.  On nginx the steady state thus costs two
 * plain loads; under Apache's threads the same, and only writers (rare:
 * the first reading, a MOVED, a reading after a failure) take the map's
 * mutex, which keeps two of them from adding one node twice.
 *
 * Why a map is found by name in a process-wide list: the interpreters of
 * an Apache child are made and dropped as its load changes, each running
 * Redis::Cluster.new on its own; the map must outlive any one of them.
 * Each interpreter holds the map (a count, under the list's lock) while
 * its object for the cluster lives, and the last to give it back frees
 * it.  A map made before a fork is the child's own copy from then on:
 * one map per process.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrb_redis_slots.h"


typedef struct {
    uint16_t  *replicas;   /* guarded by the map's lock */
    size_t     nreplicas;
    char       addr[];     /* "host:port", immutable */
} slots_node;

struct mrb_redis_slots_s {
    _Atomic uint16_t        master[MRB_REDIS_SLOTS_COUNT];
    _Atomic uint16_t        replica[MRB_REDIS_SLOTS_COUNT];
    slots_node *_Atomic     node[MRB_REDIS_SLOTS_NODES_MAX];
    _Atomic unsigned        nnodes;
    _Atomic int             loaded;
    _Atomic uint64_t        claimed_until;   /* ms; 0: not claimed */
    pthread_mutex_t         lock;            /* writers */
    unsigned                holds;           /* guarded by slots_list_lock */
    mrb_redis_slots        *next;
    char                    name[];
};


static pthread_mutex_t   slots_list_lock = PTHREAD_MUTEX_INITIALIZER;
static mrb_redis_slots  *slots_list;


static mrb_redis_slots *
slots_new(const char *name)
{
    size_t            i, len = strlen(name);
    mrb_redis_slots  *m;

    m = calloc(1, sizeof(mrb_redis_slots) + len + 1);
    if (m == NULL) {
        return NULL;
    }

    if (pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m);
        return NULL;
    }

    for (i = 0; i < MRB_REDIS_SLOTS_COUNT; i++) {
        atomic_init(&m->master[i], MRB_REDIS_SLOTS_NONE);
        atomic_init(&m->replica[i], MRB_REDIS_SLOTS_NONE);
    }

    memcpy(m->name, name, len + 1);
    return m;
}


static void
slots_free(mrb_redis_slots *m)
{
    unsigned     i, n = atomic_load(&m->nnodes);
    slots_node  *node;

    for (i = 0; i < n; i++) {
        node = atomic_load(&m->node[i]);
        free(node->replicas);
        free(node);
    }

    pthread_mutex_destroy(&m->lock);
    free(m);
}


mrb_redis_slots *
mrb_redis_slots_hold(const char *name)
{
    mrb_redis_slots  *m;

    pthread_mutex_lock(&slots_list_lock);

    for (m = slots_list; m != NULL; m = m->next) {
        if (strcmp(m->name, name) == 0) {
            break;
        }
    }

    if (m == NULL) {
        m = slots_new(name);
        if (m != NULL) {
            m->next = slots_list;
            slots_list = m;
        }
    }

    if (m != NULL) {
        m->holds++;
    }

    pthread_mutex_unlock(&slots_list_lock);
    return m;
}


void
mrb_redis_slots_give_back(mrb_redis_slots *m)
{
    int                last;
    mrb_redis_slots  **p;

    pthread_mutex_lock(&slots_list_lock);

    last = --m->holds == 0;

    if (last) {
        for (p = &slots_list; *p != m; p = &(*p)->next) { /* void */ }
        *p = m->next;
    }

    pthread_mutex_unlock(&slots_list_lock);

    if (last) {
        slots_free(m);
    }
}


int
mrb_redis_slots_loaded(const mrb_redis_slots *m)
{
    return atomic_load_explicit(&m->loaded, memory_order_acquire);
}


unsigned
mrb_redis_slots_master(const mrb_redis_slots *m, unsigned slot)
{
    return atomic_load_explicit(&m->master[slot], memory_order_acquire);
}


unsigned
mrb_redis_slots_replica(const mrb_redis_slots *m, unsigned slot)
{
    return atomic_load_explicit(&m->replica[slot], memory_order_acquire);
}


unsigned
mrb_redis_slots_nodes(const mrb_redis_slots *m)
{
    return atomic_load_explicit(&m->nnodes, memory_order_acquire);
}


const char *
mrb_redis_slots_address(const mrb_redis_slots *m, unsigned node)
{
    if (node >= mrb_redis_slots_nodes(m)) {
        return NULL;
    }

    return atomic_load_explicit(&m->node[node], memory_order_acquire)->addr;
}


unsigned
mrb_redis_slots_find(const mrb_redis_slots *m, const char *addr)
{
    unsigned  i, n = mrb_redis_slots_nodes(m);

    for (i = 0; i < n; i++) {
        if (strcmp(atomic_load_explicit(&m->node[i], memory_order_acquire)
                       ->addr, addr) == 0)
        {
            return i;
        }
    }

    return MRB_REDIS_SLOTS_NONE;
}


size_t
mrb_redis_slots_replicas(mrb_redis_slots *m, unsigned node, unsigned *out,
    size_t max)
{
    size_t       i, n = 0;
    slots_node  *r;

    pthread_mutex_lock(&m->lock);

    if (node < atomic_load(&m->nnodes)) {
        r = atomic_load(&m->node[node]);
        n = r->nreplicas;

        for (i = 0; i < n && i < max; i++) {
            out[i] = r->replicas[i];
        }
    }

    pthread_mutex_unlock(&m->lock);
    return n;
}


/* The number of the node at addr, added when new; MRB_REDIS_SLOTS_NONE
 * with the reason in err.  The map's lock is held. */
static unsigned
slots_intern_locked(mrb_redis_slots *m, const char *addr, char *err,
    size_t errlen)
{
    size_t       len;
    unsigned     i, n = atomic_load(&m->nnodes);
    slots_node  *node;

    i = mrb_redis_slots_find(m, addr);
    if (i != MRB_REDIS_SLOTS_NONE) {
        return i;
    }

    if (n == MRB_REDIS_SLOTS_NODES_MAX) {
        snprintf(err, errlen, "more than %d node addresses",
                 MRB_REDIS_SLOTS_NODES_MAX);
        return MRB_REDIS_SLOTS_NONE;
    }

    len = strlen(addr);
    node = calloc(1, sizeof(slots_node) + len + 1);
    if (node == NULL) {
        snprintf(err, errlen, "out of memory");
        return MRB_REDIS_SLOTS_NONE;
    }

    memcpy(node->addr, addr, len + 1);
    atomic_store_explicit(&m->node[n], node, memory_order_release);
    atomic_store_explicit(&m->nnodes, n + 1, memory_order_release);

    return n;
}


/* The replica of master that this process reads from, or
 * MRB_REDIS_SLOTS_NONE.  The map's lock is held. */
static unsigned
slots_pick_replica_locked(mrb_redis_slots *m, unsigned master)
{
    slots_node  *node = atomic_load(&m->node[master]);

    if (node->nreplicas == 0) {
        return MRB_REDIS_SLOTS_NONE;
    }

    return node->replicas[(size_t) getpid() % node->nreplicas];
}


/* The range's nodes added, and its replicas made its master's. */
static int
slots_add_range_locked(mrb_redis_slots *m, const mrb_redis_slots_range *r,
    char *err, size_t errlen)
{
    size_t       i;
    unsigned     id, master_id = MRB_REDIS_SLOTS_NONE;
    uint16_t    *replicas;
    slots_node  *master;

    if (r->n == 0 || r->first > r->last
        || r->last >= MRB_REDIS_SLOTS_COUNT)
    {
        snprintf(err, errlen, "a range of slots %u-%u with %zu nodes",
                 r->first, r->last, r->n);
        return -1;
    }

    replicas = NULL;
    if (r->n > 1) {
        replicas = malloc((r->n - 1) * sizeof(uint16_t));
        if (replicas == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }

    for (i = 0; i < r->n; i++) {
        id = slots_intern_locked(m, r->nodes[i], err, errlen);
        if (id == MRB_REDIS_SLOTS_NONE) {
            free(replicas);
            return -1;
        }
        if (i == 0) {
            master_id = id;
        } else {
            replicas[i - 1] = (uint16_t) id;
        }
    }

    master = atomic_load(&m->node[master_id]);
    free(master->replicas);
    master->replicas = replicas;
    master->nreplicas = r->n - 1;

    return 0;
}


static int
slots_load_locked(mrb_redis_slots *m, const mrb_redis_slots_range *ranges,
    size_t n, char *err, size_t errlen)
{
    size_t       i;
    unsigned     s, master, replica, nodes;
    uint16_t    *to;
    slots_node  *node;

    /* a node that is no master in this reading has no replicas */
    nodes = atomic_load(&m->nnodes);
    for (s = 0; s < nodes; s++) {
        node = atomic_load(&m->node[s]);
        free(node->replicas);
        node->replicas = NULL;
        node->nreplicas = 0;
    }

    for (i = 0; i < n; i++) {
        if (slots_add_range_locked(m, &ranges[i], err, errlen) != 0) {
            return -1;
        }
    }

    /* the new entries computed first, so that no slot is cleared on the
     * way to its new node: a reader sees the old node or the new one */
    to = malloc(2 * MRB_REDIS_SLOTS_COUNT * sizeof(uint16_t));
    if (to == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }

    for (s = 0; s < 2 * MRB_REDIS_SLOTS_COUNT; s++) {
        to[s] = MRB_REDIS_SLOTS_NONE;
    }

    for (i = 0; i < n; i++) {
        master = mrb_redis_slots_find(m, ranges[i].nodes[0]);
        replica = slots_pick_replica_locked(m, master);

        for (s = ranges[i].first; s <= ranges[i].last; s++) {
            to[s] = (uint16_t) master;
            to[MRB_REDIS_SLOTS_COUNT + s] = (uint16_t) replica;
        }
    }

    for (s = 0; s < MRB_REDIS_SLOTS_COUNT; s++) {
        atomic_store_explicit(&m->master[s], to[s], memory_order_release);
        atomic_store_explicit(&m->replica[s], to[MRB_REDIS_SLOTS_COUNT + s],
                              memory_order_release);
    }

    free(to);
    atomic_store_explicit(&m->loaded, 1, memory_order_release);
    return 0;
}


int
mrb_redis_slots_load(mrb_redis_slots *m, const mrb_redis_slots_range *ranges,
    size_t n, char *err, size_t errlen)
{
    int  rc;

    pthread_mutex_lock(&m->lock);
    rc = slots_load_locked(m, ranges, n, err, errlen);
    pthread_mutex_unlock(&m->lock);

    return rc;
}


int
mrb_redis_slots_move(mrb_redis_slots *m, unsigned slot, const char *addr,
    char *err, size_t errlen)
{
    int       rc = -1;
    unsigned  id;

    if (slot >= MRB_REDIS_SLOTS_COUNT) {
        snprintf(err, errlen, "no slot %u", slot);
        return -1;
    }

    pthread_mutex_lock(&m->lock);

    id = slots_intern_locked(m, addr, err, errlen);
    if (id == MRB_REDIS_SLOTS_NONE) {
        goto done;
    }

    /* the replica first: a reader never reads the old master's replica
     * for the new master's slot after it saw the new master */
    atomic_store_explicit(&m->replica[slot],
                          (uint16_t) slots_pick_replica_locked(m, id),
                          memory_order_release);
    atomic_store_explicit(&m->master[slot], (uint16_t) id,
                          memory_order_release);
    rc = 0;

done:

    pthread_mutex_unlock(&m->lock);
    return rc;
}


int
mrb_redis_slots_claim(mrb_redis_slots *m, uint64_t now, uint64_t until)
{
    uint64_t  cur = atomic_load(&m->claimed_until);

    do {
        if (cur > now) {
            return 0;
        }
    } while (!atomic_compare_exchange_weak(&m->claimed_until, &cur, until));

    return 1;
}


void
mrb_redis_slots_unclaim(mrb_redis_slots *m)
{
    atomic_store(&m->claimed_until, 0);
}
