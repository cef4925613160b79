/*
 * The entries of a shared dictionary zone, as the two files that work on
 * them share them: mrb_shdict_zone.c (the hash table, the LRU list and the
 * operations on user entries) and mrb_shdict_ledger.c (held counts, the
 * sweep of dead holders, the rebuild after a holder of the mutex died).
 * Nothing outside the shdict files (and their unit tests) should need it.
 * Every call here is made with the zone locked.
 *
 * The functions are hidden from the modules' other files (and from
 * interposition), so that mrb_shdict_zone.c's own calls stay inlined.
 */

#ifndef MRB_SHDICT_ENTRY_H
#define MRB_SHDICT_ENTRY_H

#include <string.h>
#include "mrb_shdict_layout.h"

#define SHD_HIDDEN  __attribute__((visibility("hidden")))

#define shd_entry_at(z, off)  ((shd_entry *) shd_ptr(z, off))
#define shd_buckets(z)        ((shd_off *) shd_ptr(z, (z)->buckets))
#define shd_value_of(e)       ((e)->data + (e)->klen)

/* The time, read at most once per call and only if an expiry needs it. */
typedef struct {
    uint64_t  now;
} shd_clock;

/* CLOCK_MONOTONIC in ms, read on the first call for clk. */
SHD_HIDDEN uint64_t shd_now(shd_clock *clk);


static inline int64_t
shd_int_of(shd_entry *e)
{
    int64_t  i;

    memcpy(&i, shd_value_of(e), 8);
    return i;
}


static inline void
shd_int_store(shd_entry *e, int64_t i)
{
    memcpy(shd_value_of(e), &i, 8);
}


/* mrb_shdict_zone.c */

/* The LRU list (head and tail) and the ledger list (head only, tail NULL)
 * share the entries' prev/next links; an entry is on at most one of them. */
SHD_HIDDEN void shd_list_push(mrb_shdict_zone *z, shd_off *head,
    shd_off *tail, shd_entry *e);
SHD_HIDDEN void shd_list_unlink(mrb_shdict_zone *z, shd_off *head,
    shd_off *tail, shd_entry *e);

#define shd_lru_push(z, e)    shd_list_push(z, &(z)->lru_head, &(z)->lru_tail, e)
#define shd_lru_unlink(z, e)  shd_list_unlink(z, &(z)->lru_head, &(z)->lru_tail, e)

SHD_HIDDEN void shd_hash_link(mrb_shdict_zone *z, shd_entry *e);
SHD_HIDDEN void shd_hash_unlink(mrb_shdict_zone *z, shd_entry *e);

/* A user entry (owner NULL), or the ledger entry of owner on key (hash
 * covering the key and the owner); NULL when there is none. */
SHD_HIDDEN shd_entry *shd_find(mrb_shdict_zone *z, uint32_t hash,
    const char *key, size_t klen, const char *owner);

/* The live user entry for key: an expired one is removed on sight. */
SHD_HIDDEN shd_entry *shd_lookup(mrb_shdict_zone *z, uint32_t hash,
    const char *key, size_t klen, shd_clock *clk);

/* Memory for a new entry, freeing the idle ledgers and then evicting least
 * recently used entries while evict allows; NULL with *rc set when there is
 * none.  An entry the caller still needs must be off the LRU list
 * meanwhile. */
SHD_HIDDEN shd_entry *shd_entry_alloc(mrb_shdict_zone *z, size_t size,
    int evict, mrb_shdict_rc *rc);

/* Completes a new user entry and makes it visible. */
SHD_HIDDEN void shd_entry_publish(mrb_shdict_zone *z, shd_entry *e,
    uint32_t hash, const char *key, size_t klen, const mrb_shdict_value *v,
    uint64_t expires);

/* Empties the hash table and every list (not the allocator's). */
SHD_HIDDEN void shd_lists_clear(mrb_shdict_zone *z);

/* Removes a user entry, with the ledgers that hold it. */
SHD_HIDDEN void shd_entry_remove(mrb_shdict_zone *z, shd_entry *e);

SHD_HIDDEN void shd_value_store(shd_entry *e, const mrb_shdict_value *v);


/*
 * An operation on one key's entry, with the mutex held: e is the key's
 * live user entry, or NULL.  k has the key and its hash.
 */
typedef struct {
    const char  *key;
    size_t       klen;
    uint32_t     hash;
    shd_clock    clk;
} shd_key;

typedef mrb_shdict_rc (*shd_entry_op)(mrb_shdict_zone *z, shd_entry *e,
    shd_key *k, void *arg);

/*
 * The frame of every operation on one key: the key hashed before the mutex
 * is taken, its entry looked up, op_locked run, and one way out through the
 * unlock.  op_locked's status, or LOCK_FAILED.  Inlined, op_locked becomes
 * a direct call.
 */
static inline mrb_shdict_rc
shd_with_entry(mrb_shdict_zone *z, const char *key, size_t klen,
    shd_entry_op op_locked, void *arg)
{
    shd_key        k = { key, klen, mrb_shdict_hash(key, klen), { 0 } };
    mrb_shdict_rc  rc;

    if (mrb_shdict_zone_lock(z) != 0) {
        return MRB_SHDICT_LOCK_FAILED;
    }

    rc = op_locked(z, shd_lookup(z, k.hash, key, klen, &k.clk), &k, arg);

    mrb_shdict_zone_unlock(z);
    return rc;
}


/* mrb_shdict_ledger.c */

/* Removes ledger l; if it held a count, parent (may be NULL) loses its
 * pin. */
SHD_HIDDEN void shd_ledger_remove(mrb_shdict_zone *z, shd_entry *l,
    shd_entry *parent);

/* Frees every idle ledger. */
SHD_HIDDEN void shd_idle_free(mrb_shdict_zone *z);

/* Removes the ledgers of dead owners (force: even before the interval is
 * over); how many held a count.  Takes the mutex itself. */
SHD_HIDDEN size_t shd_sweep(mrb_shdict_zone *z, int force);

/* Derives every list again from the chunks tagged as entries: a process
 * died holding the mutex mid-update. */
SHD_HIDDEN void shd_rebuild(mrb_shdict_zone *z);


/*
 * Dead owners are looked for at most once per interval, by whichever call
 * comes first.  Every hold and release asks, so the question is answered
 * here, inline: a call into shd_sweep, whose frame holds its table of
 * owners, cost more than the answer.  Without the mutex.
 */
static inline void
shd_sweep_maybe(mrb_shdict_zone *z)
{
    shd_clock  clk = { 0 };

    if (__atomic_load_n(&z->nledgers, __ATOMIC_RELAXED) != 0
        && __atomic_load_n(&z->next_sweep, __ATOMIC_RELAXED) <= shd_now(&clk))
    {
        shd_sweep(z, 0);
    }
}

#endif /* MRB_SHDICT_ENTRY_H */
