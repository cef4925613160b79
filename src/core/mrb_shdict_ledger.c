/*
 * Held counts of a shared dictionary zone (SharedDict#hold / release): each
 * process's share of a key's Integer is kept in a ledger entry of its own,
 * keyed by the key and the process (mrb_shdict_owner.h), so that what a
 * process held can be given back when it dies without releasing.  Here are
 * the ledgers, hold and release, the sweep that finds the dead owners, and
 * the rebuild of every list after a process died holding the mutex
 * mid-update (the zone's user entries with them).
 */

#include <stdlib.h>
#include <string.h>
#include "mrb_shdict_entry.h"
#include "mrb_shdict_owner.h"

/* owners a sweep collects on its stack; more take a malloc'd array */
#define SHD_SWEEP_STACK  128


/* The hash of a ledger entry: its key's hash mixed with the owner's
 * identity, rather than the owner's bytes hashed after the key's (hold and
 * release both need it). */
static uint32_t
shd_ledger_hash(uint32_t hash, const mrb_shdict_owner *o)
{
    uint64_t  h;

    h = (((uint64_t) hash << 32) | o->pid) ^ (o->start * 0x9e3779b97f4a7c15ull);
    h *= 0xbf58476d1ce4e5b9ull;

    return (uint32_t) (h >> 32);
}


/* The owner suffix of a ledger key. */
static void
shd_owner_pack(const mrb_shdict_owner *o, char *out)
{
    memcpy(out, &o->pid, 4);
    memcpy(out + 4, &o->start, 8);
}


static void
shd_owner_unpack(const char *in, mrb_shdict_owner *o)
{
    memcpy(&o->pid, in, 4);
    memcpy(&o->start, in + 4, 8);
}


/* The user entry a ledger entry holds. */
static shd_entry *
shd_ledger_parent(mrb_shdict_zone *z, shd_entry *l)
{
    size_t  klen = l->klen - SHD_OWNER_LEN;

    return shd_find(z, mrb_shdict_hash(l->data, klen), l->data, klen, NULL);
}


/*
 * Ledgers pin their parent while they hold a count: it leaves the LRU list
 * (never evicted) and loses its expiry.  A ledger whose count falls to 0 is
 * kept, idle, rather than freed: the same process holding the same key again
 * (the next request for a file) then finds it instead of allocating one.
 * An idle ledger pins nothing and shows nowhere; the sweep frees the idle
 * ones, and so does an allocation that finds the zone full, before it
 * evicts anything.
 */

static void
shd_pin(mrb_shdict_zone *z, shd_entry *parent)
{
    if (parent->pins++ == 0) {
        shd_lru_unlink(z, parent);
        parent->expires = 0;
    }
}


/* parent may be NULL */
static void
shd_unpin(mrb_shdict_zone *z, shd_entry *parent)
{
    if (parent != NULL && parent->pins != 0 && --parent->pins == 0) {
        shd_lru_push(z, parent);
    }
}


void
shd_ledger_remove(mrb_shdict_zone *z, shd_entry *l, shd_entry *parent)
{
    if (shd_int_of(l) == 0) {
        z->nidle--;

    } else {
        shd_unpin(z, parent);
    }

    shd_list_unlink(z, &z->ledgers, NULL, l);
    shd_hash_unlink(z, l);
    z->nledgers--;
    l->tag = 0;
    shd_slab_free(z, shd_offset(z, l));
}


void
shd_idle_free(mrb_shdict_zone *z)
{
    shd_off     off, next;
    shd_entry  *l;

    for (off = z->ledgers; off != 0 && z->nidle != 0; off = next) {
        l = shd_entry_at(z, off);
        next = l->next;

        if (shd_int_of(l) == 0) {
            shd_ledger_remove(z, l, NULL);
        }
    }
}


/* The sweep: the ledgers of owners that died go, with what they held. */

static int
shd_owner_cmp(const void *a, const void *b)
{
    const mrb_shdict_owner  *x = a, *y = b;

    if (x->pid != y->pid) {
        return (x->pid > y->pid) - (x->pid < y->pid);
    }

    return (x->start > y->start) - (x->start < y->start);
}


/* Sorts owners and drops duplicates; returns how many are left. */
static size_t
shd_owners_unique(mrb_shdict_owner *owners, size_t n)
{
    size_t  i, m;

    if (n == 0) {
        return 0;
    }

    qsort(owners, n, sizeof(mrb_shdict_owner), shd_owner_cmp);

    for (i = 1, m = 1; i < n; i++) {
        if (shd_owner_cmp(&owners[i], &owners[m - 1]) != 0) {
            owners[m++] = owners[i];
        }
    }

    return m;
}


/*
 * The owners of the live ledgers into *owners (stack, or a malloc'd array
 * when they outnumber it); the idle ledgers go.  0 when no sweep is due.
 */
static size_t
shd_sweep_collect_locked(mrb_shdict_zone *z, int force,
    mrb_shdict_owner *stack, mrb_shdict_owner **owners)
{
    size_t             n, cap;
    shd_off            off, next;
    shd_clock          clk = { 0 };
    shd_entry         *l;
    mrb_shdict_owner  *set;

    *owners = stack;

    /* another process may have swept since the caller looked */
    if (!force && z->next_sweep > shd_now(&clk)) {
        return 0;
    }

    z->next_sweep = shd_now(&clk) + MRB_SHDICT_SWEEP_INTERVAL;

    cap = SHD_SWEEP_STACK;

    if (z->nledgers > SHD_SWEEP_STACK) {
        set = malloc(z->nledgers * sizeof(mrb_shdict_owner));
        if (set != NULL) {
            *owners = set;
            cap = z->nledgers;
        }
    }

    n = 0;

    for (off = z->ledgers; off != 0; off = next) {
        l = shd_entry_at(z, off);
        next = l->next;

        if (shd_int_of(l) == 0) {
            shd_ledger_remove(z, l, NULL);
            continue;
        }

        if (n < cap) {
            shd_owner_unpack(l->data + l->klen - SHD_OWNER_LEN,
                             &(*owners)[n++]);
        }
    }

    return n;
}


/* Removes the ledgers of dead (sorted) and what they held: how many. */
static size_t
shd_sweep_remove_locked(mrb_shdict_zone *z, const mrb_shdict_owner *dead,
    size_t ndead)
{
    size_t             removed;
    shd_off            off, next;
    shd_entry         *l, *p;
    mrb_shdict_owner   o;

    removed = 0;

    for (off = z->ledgers; off != 0; off = next) {
        l = shd_entry_at(z, off);
        next = l->next;
        shd_owner_unpack(l->data + l->klen - SHD_OWNER_LEN, &o);

        if (bsearch(&o, dead, ndead, sizeof(mrb_shdict_owner),
                    shd_owner_cmp) == NULL)
        {
            continue;
        }

        p = shd_ledger_parent(z, l);

        if (p != NULL && p->type == MRB_SHDICT_INTEGER) {
            shd_int_store(p, shd_int_of(p) - shd_int_of(l));
        }

        removed += (shd_int_of(l) != 0);
        shd_ledger_remove(z, l, p);
    }

    return removed;
}


/*
 * Every holder is looked at, however many there are: the owners of all
 * ledgers are collected under the lock (into a malloc'd array when they
 * outnumber the stack's), judged alive or dead without it (/proc), and the
 * ledgers of the dead removed under it again.  Out of memory, a sweep looks
 * at the first SHD_SWEEP_STACK ledgers' owners only; the next one at the
 * same again, so that it is no worse than a partial sweep.
 */
size_t
shd_sweep(mrb_shdict_zone *z, int force)
{
    size_t             n, ndead, i, removed;
    mrb_shdict_owner   stack[SHD_SWEEP_STACK], *owners;

    if (mrb_shdict_zone_lock(z) != 0) {
        return 0;
    }

    n = shd_sweep_collect_locked(z, force, stack, &owners);
    mrb_shdict_zone_unlock(z);

    n = shd_owners_unique(owners, n);

    /* /proc is read without the mutex; a dead owner stays dead; the dead
     * stay sorted */
    ndead = 0;

    for (i = 0; i < n; i++) {
        if (!mrb_shdict_owner_alive(&owners[i])) {
            owners[ndead++] = owners[i];
        }
    }

    removed = 0;

    if (ndead > 0 && mrb_shdict_zone_lock(z) == 0) {
        removed = shd_sweep_remove_locked(z, owners, ndead);
        mrb_shdict_zone_unlock(z);
    }

    if (owners != stack) {
        free(owners);
    }

    return removed;
}


size_t
mrb_shdict_zone_sweep(mrb_shdict_zone *z)
{
    return shd_sweep(z, 1);
}


/* Recovery after a process died holding the mutex mid-update: every list is
 * derived again from the chunks tagged as entries. */

static int
shd_rebuild_keep(mrb_shdict_zone *z, shd_off off, size_t capacity)
{
    size_t             klen;
    uint32_t           hash;
    shd_entry         *e;
    mrb_shdict_owner   o;

    e = shd_entry_at(z, off);

    if (e->type < MRB_SHDICT_STRING || e->type > MRB_SHDICT_FALSE
        || e->klen == 0 || e->klen > capacity || e->vlen > capacity
        || sizeof(shd_entry) + (size_t) e->klen + e->vlen > capacity)
    {
        return 0;
    }

    if (((e->type == MRB_SHDICT_INTEGER || e->type == MRB_SHDICT_FLOAT)
         && e->vlen != 8)
        || ((e->type == MRB_SHDICT_TRUE || e->type == MRB_SHDICT_FALSE)
            && e->vlen != 0))
    {
        return 0;
    }

    if (e->flags & SHD_ENTRY_HELD) {
        /* an idle ledger is dropped: it is only kept for speed */
        if (e->klen <= SHD_OWNER_LEN || e->type != MRB_SHDICT_INTEGER
            || shd_int_of(e) == 0)
        {
            return 0;
        }

        klen = e->klen - SHD_OWNER_LEN;
        shd_owner_unpack(e->data + klen, &o);
        hash = shd_ledger_hash(mrb_shdict_hash(e->data, klen), &o);

        if (hash != e->hash
            || shd_find(z, hash, e->data, klen, e->data + klen) != NULL)
        {
            return 0;
        }

        shd_hash_link(z, e);
        shd_list_push(z, &z->ledgers, NULL, e);
        z->nledgers++;
        return 1;
    }

    hash = mrb_shdict_hash(e->data, e->klen);

    /* a copy made by an interrupted replacement: the first one found wins */
    if (hash != e->hash
        || shd_find(z, hash, e->data, e->klen, NULL) != NULL)
    {
        return 0;
    }

    e->pins = 0;
    shd_hash_link(z, e);
    shd_lru_push(z, e);
    z->nentries++;
    return 1;
}


void
shd_rebuild(mrb_shdict_zone *z)
{
    shd_off     off, next;
    shd_entry  *l, *p;

    shd_lists_clear(z);
    shd_slab_rebuild(z, shd_rebuild_keep);

    /* pins: each ledger pins its parent; a ledger without an Integer parent
     * has nothing left to give back */
    for (off = z->ledgers; off != 0; off = next) {
        l = shd_entry_at(z, off);
        next = l->next;
        p = shd_ledger_parent(z, l);

        if (p == NULL || p->type != MRB_SHDICT_INTEGER) {
            shd_ledger_remove(z, l, NULL);
            continue;
        }

        shd_pin(z, p);
    }
}


/* Holding and releasing. */

/* What hold and release know before the mutex is taken. */
typedef struct {
    int64_t            n;
    int64_t           *total;
    mrb_shdict_owner   self;
    char               owner[SHD_OWNER_LEN];   /* self, packed */
} shd_hold_args;


/* hold and release: op_locked runs on key's entry for this process. */
static mrb_shdict_rc
shd_with_ledger(mrb_shdict_zone *z, const char *key, size_t klen,
    int64_t n, int64_t *total, shd_entry_op op_locked)
{
    shd_hold_args  a;

    shd_sweep_maybe(z);

    a.n = n;
    a.total = total;
    mrb_shdict_owner_self(&a.self);
    shd_owner_pack(&a.self, a.owner);

    return shd_with_entry(z, key, klen, op_locked, &a);
}


/* p: the key's user entry, or NULL. */
static mrb_shdict_rc
shd_hold_locked(mrb_shdict_zone *z, shd_entry *p, shd_key *k, void *arg)
{
    int                created;
    int64_t            pv, lv;
    uint32_t           lhash;
    shd_entry         *l;
    mrb_shdict_rc      rc;
    shd_hold_args     *a = arg;
    mrb_shdict_value   zero = { MRB_SHDICT_INTEGER, 0, 0, NULL, 0 };

    rc = MRB_SHDICT_OK;
    created = 0;

    if (p == NULL) {
        p = shd_entry_alloc(z, sizeof(shd_entry) + k->klen + 8, 1, &rc);
        if (p == NULL) {
            return rc;
        }

        shd_entry_publish(z, p, k->hash, k->key, k->klen, &zero, 0);
        created = 1;

    } else if (p->type != MRB_SHDICT_INTEGER) {
        return MRB_SHDICT_NOT_A_NUMBER;
    }

    lhash = shd_ledger_hash(k->hash, &a->self);
    l = shd_find(z, lhash, k->key, k->klen, a->owner);

    if (__builtin_add_overflow(shd_int_of(p), a->n, &pv)
        || (l != NULL && __builtin_add_overflow(shd_int_of(l), a->n, &lv)))
    {
        return MRB_SHDICT_OVERFLOW;
    }

    if (l == NULL) {
        /* pinned first: the ledger's allocation may evict */
        shd_pin(z, p);

        l = shd_entry_alloc(z, sizeof(shd_entry) + k->klen + SHD_OWNER_LEN
                               + 8, 1, &rc);

        if (l == NULL) {
            shd_unpin(z, p);
            if (created) {
                shd_entry_remove(z, p);
            }
            return rc;
        }

        l->flags = SHD_ENTRY_HELD;
        l->hash = lhash;
        l->klen = (uint32_t) (k->klen + SHD_OWNER_LEN);
        l->pins = 0;
        l->expires = 0;
        memcpy(l->data, k->key, k->klen);
        memcpy(l->data + k->klen, a->owner, SHD_OWNER_LEN);
        shd_value_store(l, &zero);
        l->tag = SHD_TAG_ENTRY;

        shd_hash_link(z, l);
        shd_list_push(z, &z->ledgers, NULL, l);
        z->nledgers++;

    } else if (shd_int_of(l) == 0) {
        /* this process's idle ledger for key: holding again */
        shd_pin(z, p);
        z->nidle--;
    }

    shd_int_store(p, pv);
    shd_int_store(l, shd_int_of(l) + a->n);
    *a->total = pv;

    return MRB_SHDICT_OK;
}


mrb_shdict_rc
mrb_shdict_zone_hold(mrb_shdict_zone *z, const char *key, size_t klen,
    int64_t n, int64_t *total)
{
    return shd_with_ledger(z, key, klen, n, total, shd_hold_locked);
}


/* p: the key's user entry, or NULL. */
static mrb_shdict_rc
shd_release_locked(mrb_shdict_zone *z, shd_entry *p, shd_key *k, void *arg)
{
    int64_t         held, take;
    shd_entry      *l;
    mrb_shdict_rc   rc;
    shd_hold_args  *a = arg;

    rc = MRB_SHDICT_OK;
    l = shd_find(z, shd_ledger_hash(k->hash, &a->self), k->key, k->klen,
                 a->owner);
    take = 0;

    /* an idle ledger holds nothing */
    if (l != NULL && shd_int_of(l) == 0) {
        l = NULL;
    }

    if (l != NULL) {
        held = shd_int_of(l);
        take = (a->n < held) ? a->n : held;
        shd_int_store(l, held - take);

        if (take == held) {
            /* kept, idle, for this process's next hold of key */
            z->nidle++;
            shd_unpin(z, p);
        }
    }

    if (p == NULL) {
        *a->total = 0;

    } else if (p->type != MRB_SHDICT_INTEGER) {
        rc = MRB_SHDICT_NOT_A_NUMBER;

    } else {
        *a->total = shd_int_of(p) - take;
        shd_int_store(p, *a->total);
    }

    if (rc == MRB_SHDICT_OK && l == NULL) {
        rc = MRB_SHDICT_NOT_FOUND;
    }

    return rc;
}


mrb_shdict_rc
mrb_shdict_zone_release(mrb_shdict_zone *z, const char *key, size_t klen,
    int64_t n, int64_t *total)
{
    return shd_with_ledger(z, key, klen, n, total, shd_release_locked);
}
