/*
 * A shared dictionary zone: hash table, LRU list, held counts and the
 * robust mutex around them (see mrb_shdict_zone.h, mrb_shdict_layout.h).
 *
 * Every operation hashes its key before taking the mutex and reads the clock
 * only when an entry with an expiry is met, so the critical section is a
 * bucket walk, a few stores and the LRU move.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "mrb_shdict_layout.h"
#include "mrb_shdict_owner.h"

/* trylock attempts before sleeping on the mutex: a holder leaves within a
 * few hundred ns, far less than a futex sleep and wake-up cost */
#define SHD_SPINS        100

/* owners a sweep collects on its stack; more take a malloc'd array */
#define SHD_SWEEP_STACK  128

#define shd_entry_at(z, off)  ((shd_entry *) shd_ptr(z, off))
#define shd_buckets(z)        ((shd_off *) shd_ptr(z, (z)->buckets))
#define shd_value_of(e)       ((e)->data + (e)->klen)

static void shd_rebuild(mrb_shdict_zone *z);

/* The time, read at most once per call and only if an expiry needs it. */
typedef struct {
    uint64_t  now;
} shd_clock;


static inline void
shd_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}


static uint64_t
shd_now(shd_clock *clk)
{
    struct timespec  ts;

    if (clk->now == 0) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        clk->now = (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
    }

    return clk->now;
}


/* The last len (< 8) bytes of a key as one word.  Fixed-size reads only: a
 * memcpy of a variable length is a libc call that cost more than the rest
 * of the hash.  With len known (the hash mixes it in), the two overlapping
 * reads, or the first, middle and last byte, cover every byte. */
static inline uint64_t
shd_hash_tail(const char *p, size_t len)
{
    uint32_t  lo, hi;

    if (len >= 4) {
        memcpy(&lo, p, 4);
        memcpy(&hi, p + len - 4, 4);
        return ((uint64_t) hi << 32) | lo;
    }

    if (len > 0) {
        return ((uint64_t) (unsigned char) p[0] << 16)
               | ((uint64_t) (unsigned char) p[len / 2] << 8)
               | (unsigned char) p[len - 1];
    }

    return 0;
}


/* A word-at-a-time multiplicative hash; good enough for a chained table and
 * much cheaper than a byte-at-a-time one on paths and URLs. */
uint32_t
mrb_shdict_hash(const char *p, size_t len)
{
    uint64_t  h, w;

    h = 0x2545f491u ^ ((uint64_t) len * 0x9e3779b97f4a7c15ull);

    while (len >= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        p += 8;
        len -= 8;
    }

    w = shd_hash_tail(p, len);
    h = (h ^ w) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;

    return (uint32_t) (h >> 32);
}


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


/* Locking. */

int
mrb_shdict_zone_lock(mrb_shdict_zone *z)
{
    int  rc, i;

    rc = EBUSY;

    for (i = 0; i < SHD_SPINS && rc == EBUSY; i++) {
        rc = pthread_mutex_trylock(&z->mutex);
        if (rc == EBUSY) {
            shd_cpu_relax();
        }
    }

    if (rc == EBUSY) {
        rc = pthread_mutex_lock(&z->mutex);
    }

    if (rc == EOWNERDEAD) {
        /* the holder died; if it was mid-update its lists may be torn:
         * derive them again from the pages */
        if (z->dirty) {
            shd_rebuild(z);
        }

        z->recoveries++;
        pthread_mutex_consistent(&z->mutex);
        rc = 0;
    }

    if (rc != 0) {
        return -1;
    }

    z->dirty = 1;
    return 0;
}


void
mrb_shdict_zone_unlock(mrb_shdict_zone *z)
{
    z->dirty = 0;
    pthread_mutex_unlock(&z->mutex);
}


/* Lists: the LRU list (head and tail) and the ledger list (head only) share
 * the entries' prev/next links; an entry is on at most one of them. */

static void
shd_list_push(mrb_shdict_zone *z, shd_off *head, shd_off *tail, shd_entry *e)
{
    shd_off  off = shd_offset(z, e);

    e->prev = 0;
    e->next = *head;

    if (*head != 0) {
        shd_entry_at(z, *head)->prev = off;

    } else if (tail != NULL) {
        *tail = off;
    }

    *head = off;
}


static void
shd_list_unlink(mrb_shdict_zone *z, shd_off *head, shd_off *tail,
    shd_entry *e)
{
    if (e->prev != 0) {
        shd_entry_at(z, e->prev)->next = e->next;

    } else {
        *head = e->next;
    }

    if (e->next != 0) {
        shd_entry_at(z, e->next)->prev = e->prev;

    } else if (tail != NULL) {
        *tail = e->prev;
    }

    e->prev = 0;
    e->next = 0;
}


#define shd_lru_push(z, e)    shd_list_push(z, &(z)->lru_head, &(z)->lru_tail, e)
#define shd_lru_unlink(z, e)  shd_list_unlink(z, &(z)->lru_head, &(z)->lru_tail, e)


static void
shd_lru_touch(mrb_shdict_zone *z, shd_entry *e)
{
    if (e->pins == 0 && z->lru_head != shd_offset(z, e)) {
        shd_lru_unlink(z, e);
        shd_lru_push(z, e);
    }
}


/* The hash table. */

static void
shd_hash_link(mrb_shdict_zone *z, shd_entry *e)
{
    shd_off  *b = &shd_buckets(z)[e->hash & (z->nbuckets - 1)];

    e->hnext = *b;
    *b = shd_offset(z, e);
}


static void
shd_hash_unlink(mrb_shdict_zone *z, shd_entry *e)
{
    shd_off  *link, off;

    off = shd_offset(z, e);
    link = &shd_buckets(z)[e->hash & (z->nbuckets - 1)];

    while (*link != 0) {
        if (*link == off) {
            *link = e->hnext;
            return;
        }
        link = &shd_entry_at(z, *link)->hnext;
    }
}


/* A user entry (held == 0), or the ledger entry of owner on key (owner !=
 * NULL, hash covering the key and the owner). */
static shd_entry *
shd_find(mrb_shdict_zone *z, uint32_t hash, const char *key, size_t klen,
    const char *owner)
{
    size_t      len;
    shd_off     off;
    shd_entry  *e;
    uint8_t     held;

    held = (owner != NULL) ? SHD_ENTRY_HELD : 0;
    len = klen + ((owner != NULL) ? SHD_OWNER_LEN : 0);

    for (off = shd_buckets(z)[hash & (z->nbuckets - 1)]; off != 0;
         off = e->hnext)
    {
        e = shd_entry_at(z, off);

        if (e->hash == hash && e->klen == len
            && (e->flags & SHD_ENTRY_HELD) == held
            && memcmp(e->data, key, klen) == 0
            && (owner == NULL
                || memcmp(e->data + klen, owner, SHD_OWNER_LEN) == 0))
        {
            return e;
        }
    }

    return NULL;
}


static int64_t
shd_int_of(shd_entry *e)
{
    int64_t  i;

    memcpy(&i, shd_value_of(e), 8);
    return i;
}


static void
shd_int_store(shd_entry *e, int64_t i)
{
    memcpy(shd_value_of(e), &i, 8);
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


/* Removes ledger l; if it held a count, parent (may be NULL) loses its pin. */
static void
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


/* Frees every idle ledger. */
static void
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


static void
shd_entry_remove(mrb_shdict_zone *z, shd_entry *e)
{
    shd_off     off, next;
    shd_entry  *l;

    if (e->pins == 0) {
        shd_lru_unlink(z, e);

    } else {
        /* a held key goes with its holds */
        for (off = z->ledgers; off != 0; off = next) {
            l = shd_entry_at(z, off);
            next = l->next;

            if (l->klen == e->klen + SHD_OWNER_LEN
                && memcmp(l->data, e->data, e->klen) == 0)
            {
                shd_ledger_remove(z, l, NULL);
            }
        }
    }

    shd_hash_unlink(z, e);
    z->nentries--;
    e->tag = 0;
    shd_slab_free(z, shd_offset(z, e));
}


/* The live user entry for key: an expired one is removed on sight. */
static shd_entry *
shd_lookup(mrb_shdict_zone *z, uint32_t hash, const char *key, size_t klen,
    shd_clock *clk)
{
    shd_entry  *e;

    e = shd_find(z, hash, key, klen, NULL);

    if (e != NULL && e->expires != 0 && e->expires <= shd_now(clk)) {
        shd_entry_remove(z, e);
        return NULL;
    }

    return e;
}


/* Memory for a new entry, freeing the idle ledgers and then evicting least
 * recently used entries while evict allows.  An entry the caller still needs
 * must be off the LRU list meanwhile. */
static shd_entry *
shd_entry_alloc(mrb_shdict_zone *z, size_t size, int evict,
    mrb_shdict_rc *rc)
{
    shd_off  off;

    if (size > shd_slab_max(z)) {
        *rc = MRB_SHDICT_TOO_LARGE;
        return NULL;
    }

    for ( ;; ) {
        off = shd_slab_alloc(z, size);

        if (off != 0) {
            return shd_entry_at(z, off);
        }

        /* idle ledgers are nobody's data: they go first, evict or not */
        if (z->nidle != 0) {
            shd_idle_free(z);
            continue;
        }

        if (!evict || z->lru_tail == 0) {
            *rc = MRB_SHDICT_NO_MEMORY;
            return NULL;
        }

        shd_entry_remove(z, shd_entry_at(z, z->lru_tail));
        z->evictions++;
    }
}


static size_t
shd_value_len(const mrb_shdict_value *v)
{
    switch (v->type) {
    case MRB_SHDICT_STRING:
        return v->len;
    case MRB_SHDICT_INTEGER:
    case MRB_SHDICT_FLOAT:
        return 8;
    default:
        return 0;
    }
}


static void
shd_value_store(shd_entry *e, const mrb_shdict_value *v)
{
    e->type = (uint8_t) v->type;
    e->vlen = (uint32_t) shd_value_len(v);

    switch (v->type) {
    case MRB_SHDICT_STRING:
        memcpy(shd_value_of(e), v->str, v->len);
        break;
    case MRB_SHDICT_INTEGER:
        memcpy(shd_value_of(e), &v->i, 8);
        break;
    case MRB_SHDICT_FLOAT:
        memcpy(shd_value_of(e), &v->f, 8);
        break;
    default:
        break;
    }
}


static mrb_shdict_rc
shd_value_load(shd_entry *e, mrb_shdict_value *v, char *buf, size_t cap)
{
    v->type = (mrb_shdict_type) e->type;

    switch (v->type) {
    case MRB_SHDICT_STRING:
        v->str = buf;
        v->len = e->vlen;
        if (e->vlen > cap) {
            return MRB_SHDICT_TRUNCATED;
        }
        memcpy(buf, shd_value_of(e), e->vlen);
        break;
    case MRB_SHDICT_INTEGER:
        memcpy(&v->i, shd_value_of(e), 8);
        break;
    case MRB_SHDICT_FLOAT:
        memcpy(&v->f, shd_value_of(e), 8);
        break;
    default:
        break;
    }

    return MRB_SHDICT_OK;
}


/* Completes a new user entry and makes it visible. */
static void
shd_entry_publish(mrb_shdict_zone *z, shd_entry *e, uint32_t hash,
    const char *key, size_t klen, const mrb_shdict_value *v, uint64_t expires)
{
    e->flags = 0;
    e->hash = hash;
    e->klen = (uint32_t) klen;
    e->pins = 0;
    e->expires = expires;
    memcpy(e->data, key, klen);
    shd_value_store(e, v);
    e->tag = SHD_TAG_ENTRY;

    shd_hash_link(z, e);
    shd_lru_push(z, e);
    z->nentries++;
}


/* Held counts: dead owners are looked for at most once per interval, by
 * whichever call comes first.  Every hold and release asks, so the question
 * is answered here, inline: a call into shd_sweep, whose frame holds its
 * table of owners, cost more than the answer. */

static size_t shd_sweep(mrb_shdict_zone *z, int force);

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
static size_t
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


static void
shd_rebuild(mrb_shdict_zone *z)
{
    shd_off     off, next;
    shd_entry  *l, *p;

    memset(shd_buckets(z), 0, (size_t) z->nbuckets * sizeof(shd_off));
    z->lru_head = 0;
    z->lru_tail = 0;
    z->ledgers = 0;
    z->nentries = 0;
    z->nledgers = 0;
    z->nidle = 0;

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


/* Zones. */

mrb_shdict_zone *
mrb_shdict_zone_init(void *mem, size_t size)
{
    size_t                hdr, buckets, n, pages;
    mrb_shdict_zone      *z = mem;
    pthread_mutexattr_t   attr;

    if (size < MRB_SHDICT_MIN_SIZE || size > MRB_SHDICT_MAX_SIZE) {
        return NULL;
    }

    hdr = (sizeof(mrb_shdict_zone) + 63) & ~(size_t) 63;

    /* about one bucket per 128 bytes: chains stay short for small entries */
    n = 64;
    while (n * 2 <= size / 128) {
        n *= 2;
    }

    /* descriptors, then buckets, then the pages, page aligned */
    pages = size / SHD_PAGE_SIZE;

    for ( ;; ) {
        buckets = hdr + pages * sizeof(shd_page);
        z->pages = (shd_off) ((buckets + n * sizeof(shd_off) + SHD_PAGE_SIZE - 1)
                              & ~(size_t) (SHD_PAGE_SIZE - 1));

        if ((size_t) z->pages + pages * SHD_PAGE_SIZE <= size) {
            break;
        }

        pages--;
    }

    z->magic = SHD_MAGIC;
    z->version = SHD_VERSION;
    z->size = size;
    z->nbuckets = (uint32_t) n;
    z->npages = (uint32_t) pages;
    z->pagedesc = (shd_off) hdr;
    z->buckets = (shd_off) buckets;

    if (pthread_mutexattr_init(&attr) != 0) {
        return NULL;
    }

    if (pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED) != 0
        || pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST) != 0
        || pthread_mutex_init(&z->mutex, &attr) != 0)
    {
        pthread_mutexattr_destroy(&attr);
        return NULL;
    }

    pthread_mutexattr_destroy(&attr);

    memset(shd_buckets(z), 0, n * sizeof(shd_off));
    shd_slab_init(z);

    return z;
}


mrb_shdict_rc
mrb_shdict_zone_get(mrb_shdict_zone *z, const char *key, size_t klen,
    mrb_shdict_value *v, char *buf, size_t cap)
{
    uint32_t        hash;
    shd_clock       clk = { 0 };
    shd_entry      *e;
    mrb_shdict_rc   rc;

    shd_sweep_maybe(z);
    hash = mrb_shdict_hash(key, klen);

    if (mrb_shdict_zone_lock(z) != 0) {
        return MRB_SHDICT_LOCK_FAILED;
    }

    e = shd_lookup(z, hash, key, klen, &clk);

    if (e == NULL) {
        rc = MRB_SHDICT_NOT_FOUND;

    } else {
        shd_lru_touch(z, e);
        rc = shd_value_load(e, v, buf, cap);
    }

    mrb_shdict_zone_unlock(z);
    return rc;
}


mrb_shdict_rc
mrb_shdict_zone_set(mrb_shdict_zone *z, const char *key, size_t klen,
    const mrb_shdict_value *v, uint64_t ttl_ms, unsigned flags)
{
    size_t          size;
    uint32_t        hash, pins;
    uint64_t        expires;
    shd_clock       clk = { 0 };
    shd_entry      *e, *n;
    mrb_shdict_rc   rc;

    hash = mrb_shdict_hash(key, klen);
    size = sizeof(shd_entry) + klen + shd_value_len(v);

    if (mrb_shdict_zone_lock(z) != 0) {
        return MRB_SHDICT_LOCK_FAILED;
    }

    rc = MRB_SHDICT_OK;
    e = shd_lookup(z, hash, key, klen, &clk);
    expires = (ttl_ms != 0) ? shd_now(&clk) + ttl_ms : 0;

    if (e != NULL && (flags & MRB_SHDICT_ADD)) {
        rc = MRB_SHDICT_EXISTS;
        goto done;
    }

    if (e != NULL && size <= shd_slab_capacity(z, shd_offset(z, e))) {
        shd_value_store(e, v);
        e->expires = (e->pins == 0) ? expires : 0;
        shd_lru_touch(z, e);
        goto done;
    }

    if (e != NULL && e->pins == 0) {
        /* out of the eviction's reach until it is replaced */
        shd_lru_unlink(z, e);
    }

    n = shd_entry_alloc(z, size, !(flags & MRB_SHDICT_NO_EVICT), &rc);

    if (n == NULL) {
        if (e != NULL && e->pins == 0) {
            shd_lru_push(z, e);
        }
        goto done;
    }

    pins = 0;

    if (e != NULL) {
        /* the ledgers name their parent by key: they now hold n */
        pins = e->pins;
        shd_hash_unlink(z, e);
        z->nentries--;
        e->tag = 0;
        shd_slab_free(z, shd_offset(z, e));
    }

    shd_entry_publish(z, n, hash, key, klen, v, pins ? 0 : expires);

    if (pins != 0) {
        shd_lru_unlink(z, n);
        n->pins = pins;
    }

done:
    mrb_shdict_zone_unlock(z);
    return rc;
}


/* *r = a + b for numbers; OVERFLOW when an Integer sum does not fit. */
static mrb_shdict_rc
shd_add(const mrb_shdict_value *a, const mrb_shdict_value *b,
    mrb_shdict_value *r)
{
    if (a->type == MRB_SHDICT_INTEGER && b->type == MRB_SHDICT_INTEGER) {
        r->type = MRB_SHDICT_INTEGER;
        return __builtin_add_overflow(a->i, b->i, &r->i)
               ? MRB_SHDICT_OVERFLOW : MRB_SHDICT_OK;
    }

    r->type = MRB_SHDICT_FLOAT;
    r->f = ((a->type == MRB_SHDICT_INTEGER) ? (double) a->i : a->f)
           + ((b->type == MRB_SHDICT_INTEGER) ? (double) b->i : b->f);

    return MRB_SHDICT_OK;
}


mrb_shdict_rc
mrb_shdict_zone_incr(mrb_shdict_zone *z, const char *key, size_t klen,
    const mrb_shdict_value *by, const mrb_shdict_value *init,
    uint64_t ttl_ms, mrb_shdict_value *out)
{
    uint32_t          hash;
    shd_clock         clk = { 0 };
    shd_entry        *e;
    mrb_shdict_rc     rc;
    mrb_shdict_value  cur;

    hash = mrb_shdict_hash(key, klen);

    if (mrb_shdict_zone_lock(z) != 0) {
        return MRB_SHDICT_LOCK_FAILED;
    }

    e = shd_lookup(z, hash, key, klen, &clk);

    if (e == NULL) {
        if (init == NULL) {
            rc = MRB_SHDICT_NOT_FOUND;
            goto done;
        }

        rc = shd_add(init, by, out);
        if (rc != MRB_SHDICT_OK) {
            goto done;
        }

        e = shd_entry_alloc(z, sizeof(shd_entry) + klen + 8, 1, &rc);
        if (e == NULL) {
            goto done;
        }

        shd_entry_publish(z, e, hash, key, klen, out,
                          (ttl_ms != 0) ? shd_now(&clk) + ttl_ms : 0);
        goto done;
    }

    if (e->type != MRB_SHDICT_INTEGER && e->type != MRB_SHDICT_FLOAT) {
        rc = MRB_SHDICT_NOT_A_NUMBER;
        goto done;
    }

    shd_value_load(e, &cur, NULL, 0);

    rc = shd_add(&cur, by, out);
    if (rc != MRB_SHDICT_OK) {
        goto done;
    }

    /* an Integer and a Float both take 8 bytes: always in place */
    shd_value_store(e, out);
    shd_lru_touch(z, e);

done:
    mrb_shdict_zone_unlock(z);
    return rc;
}


mrb_shdict_rc
mrb_shdict_zone_delete(mrb_shdict_zone *z, const char *key, size_t klen)
{
    uint32_t        hash;
    shd_clock       clk = { 0 };
    shd_entry      *e;
    mrb_shdict_rc   rc;

    hash = mrb_shdict_hash(key, klen);

    if (mrb_shdict_zone_lock(z) != 0) {
        return MRB_SHDICT_LOCK_FAILED;
    }

    e = shd_lookup(z, hash, key, klen, &clk);

    if (e == NULL) {
        rc = MRB_SHDICT_NOT_FOUND;

    } else {
        shd_entry_remove(z, e);
        rc = MRB_SHDICT_OK;
    }

    mrb_shdict_zone_unlock(z);
    return rc;
}


mrb_shdict_rc
mrb_shdict_zone_ttl(mrb_shdict_zone *z, const char *key, size_t klen,
    int64_t *ms)
{
    uint32_t        hash;
    shd_clock       clk = { 0 };
    shd_entry      *e;
    mrb_shdict_rc   rc;

    hash = mrb_shdict_hash(key, klen);

    if (mrb_shdict_zone_lock(z) != 0) {
        return MRB_SHDICT_LOCK_FAILED;
    }

    e = shd_lookup(z, hash, key, klen, &clk);

    if (e == NULL) {
        rc = MRB_SHDICT_NOT_FOUND;

    } else {
        *ms = (e->expires == 0) ? -1 : (int64_t) (e->expires - shd_now(&clk));
        rc = MRB_SHDICT_OK;
    }

    mrb_shdict_zone_unlock(z);
    return rc;
}


/* Calls visit for each live user entry: the held ones are on no list, so
 * this walks the buckets. */
static void
shd_each_live(mrb_shdict_zone *z, shd_clock *clk,
    void (*visit)(shd_entry *e, void *ctx), void *ctx)
{
    uint32_t    b;
    shd_off     off;
    shd_entry  *e;

    for (b = 0; b < z->nbuckets; b++) {
        for (off = shd_buckets(z)[b]; off != 0; off = e->hnext) {
            e = shd_entry_at(z, off);

            if ((e->flags & SHD_ENTRY_HELD)
                || (e->expires != 0 && e->expires <= shd_now(clk)))
            {
                continue;
            }

            visit(e, ctx);
        }
    }
}


typedef struct {
    char    *buf;
    size_t   cap;
    size_t   need;
    size_t   count;
} shd_keys_ctx;


static void
shd_keys_visit(shd_entry *e, void *arg)
{
    uint32_t       len;
    shd_keys_ctx  *ctx = arg;

    len = e->klen;

    if (ctx->need + 4 + len <= ctx->cap) {
        memcpy(ctx->buf + ctx->need, &len, 4);
        memcpy(ctx->buf + ctx->need + 4, e->data, len);
    }

    ctx->need += 4 + len;
    ctx->count++;
}


mrb_shdict_rc
mrb_shdict_zone_keys(mrb_shdict_zone *z, char *buf, size_t cap,
    size_t *need, size_t *count)
{
    shd_clock     clk = { 0 };
    shd_keys_ctx  ctx = { buf, cap, 0, 0 };

    shd_sweep_maybe(z);

    if (mrb_shdict_zone_lock(z) != 0) {
        return MRB_SHDICT_LOCK_FAILED;
    }

    shd_each_live(z, &clk, shd_keys_visit, &ctx);

    mrb_shdict_zone_unlock(z);

    *need = ctx.need;
    *count = ctx.count;

    return (ctx.need > cap) ? MRB_SHDICT_TRUNCATED : MRB_SHDICT_OK;
}


static void
shd_count_visit(shd_entry *e, void *arg)
{
    (*(size_t *) arg)++;
}


size_t
mrb_shdict_zone_count(mrb_shdict_zone *z)
{
    size_t     n;
    shd_clock  clk = { 0 };

    shd_sweep_maybe(z);

    if (mrb_shdict_zone_lock(z) != 0) {
        return 0;
    }

    n = 0;
    shd_each_live(z, &clk, shd_count_visit, &n);

    mrb_shdict_zone_unlock(z);
    return n;
}


mrb_shdict_rc
mrb_shdict_zone_flush(mrb_shdict_zone *z)
{
    if (mrb_shdict_zone_lock(z) != 0) {
        return MRB_SHDICT_LOCK_FAILED;
    }

    memset(shd_buckets(z), 0, (size_t) z->nbuckets * sizeof(shd_off));
    shd_slab_init(z);
    z->lru_head = 0;
    z->lru_tail = 0;
    z->ledgers = 0;
    z->nentries = 0;
    z->nledgers = 0;
    z->nidle = 0;

    mrb_shdict_zone_unlock(z);
    return MRB_SHDICT_OK;
}


mrb_shdict_rc
mrb_shdict_zone_hold(mrb_shdict_zone *z, const char *key, size_t klen,
    int64_t n, int64_t *total)
{
    int                created;
    char               owner[SHD_OWNER_LEN];
    int64_t            pv, lv;
    uint32_t           hash, lhash;
    shd_clock          clk = { 0 };
    shd_entry         *p, *l;
    mrb_shdict_rc      rc;
    mrb_shdict_owner   self;
    mrb_shdict_value   zero = { MRB_SHDICT_INTEGER, 0, 0, NULL, 0 };

    shd_sweep_maybe(z);

    mrb_shdict_owner_self(&self);
    shd_owner_pack(&self, owner);
    hash = mrb_shdict_hash(key, klen);
    lhash = shd_ledger_hash(hash, &self);

    if (mrb_shdict_zone_lock(z) != 0) {
        return MRB_SHDICT_LOCK_FAILED;
    }

    rc = MRB_SHDICT_OK;
    created = 0;
    p = shd_lookup(z, hash, key, klen, &clk);

    if (p == NULL) {
        p = shd_entry_alloc(z, sizeof(shd_entry) + klen + 8, 1, &rc);
        if (p == NULL) {
            goto done;
        }

        shd_entry_publish(z, p, hash, key, klen, &zero, 0);
        created = 1;

    } else if (p->type != MRB_SHDICT_INTEGER) {
        rc = MRB_SHDICT_NOT_A_NUMBER;
        goto done;
    }

    l = shd_find(z, lhash, key, klen, owner);

    if (__builtin_add_overflow(shd_int_of(p), n, &pv)
        || (l != NULL && __builtin_add_overflow(shd_int_of(l), n, &lv)))
    {
        rc = MRB_SHDICT_OVERFLOW;
        goto done;
    }

    if (l == NULL) {
        /* pinned first: the ledger's allocation may evict */
        shd_pin(z, p);

        l = shd_entry_alloc(z, sizeof(shd_entry) + klen + SHD_OWNER_LEN + 8, 1,
                            &rc);

        if (l == NULL) {
            shd_unpin(z, p);
            if (created) {
                shd_entry_remove(z, p);
            }
            goto done;
        }

        l->flags = SHD_ENTRY_HELD;
        l->hash = lhash;
        l->klen = (uint32_t) (klen + SHD_OWNER_LEN);
        l->pins = 0;
        l->expires = 0;
        memcpy(l->data, key, klen);
        memcpy(l->data + klen, owner, SHD_OWNER_LEN);
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
    shd_int_store(l, shd_int_of(l) + n);
    *total = pv;

done:
    mrb_shdict_zone_unlock(z);
    return rc;
}


mrb_shdict_rc
mrb_shdict_zone_release(mrb_shdict_zone *z, const char *key, size_t klen,
    int64_t n, int64_t *total)
{
    char               owner[SHD_OWNER_LEN];
    int64_t            held, take;
    uint32_t           hash, lhash;
    shd_clock          clk = { 0 };
    shd_entry         *p, *l;
    mrb_shdict_rc      rc;
    mrb_shdict_owner   self;

    shd_sweep_maybe(z);

    mrb_shdict_owner_self(&self);
    shd_owner_pack(&self, owner);
    hash = mrb_shdict_hash(key, klen);
    lhash = shd_ledger_hash(hash, &self);

    if (mrb_shdict_zone_lock(z) != 0) {
        return MRB_SHDICT_LOCK_FAILED;
    }

    rc = MRB_SHDICT_OK;
    p = shd_lookup(z, hash, key, klen, &clk);
    l = shd_find(z, lhash, key, klen, owner);
    take = 0;

    /* an idle ledger holds nothing */
    if (l != NULL && shd_int_of(l) == 0) {
        l = NULL;
    }

    if (l != NULL) {
        held = shd_int_of(l);
        take = (n < held) ? n : held;
        shd_int_store(l, held - take);

        if (take == held) {
            /* kept, idle, for this process's next hold of key */
            z->nidle++;
            shd_unpin(z, p);
        }
    }

    if (p == NULL) {
        *total = 0;

    } else if (p->type != MRB_SHDICT_INTEGER) {
        rc = MRB_SHDICT_NOT_A_NUMBER;

    } else {
        *total = shd_int_of(p) - take;
        shd_int_store(p, *total);
    }

    if (rc == MRB_SHDICT_OK && l == NULL) {
        rc = MRB_SHDICT_NOT_FOUND;
    }

    mrb_shdict_zone_unlock(z);
    return rc;
}


void
mrb_shdict_zone_stats(mrb_shdict_zone *z, mrb_shdict_stats *st)
{
    memset(st, 0, sizeof(*st));

    if (mrb_shdict_zone_lock(z) != 0) {
        return;
    }

    st->evictions = z->evictions;
    st->recoveries = z->recoveries;
    st->ledgers = z->nledgers - z->nidle;
    st->idle_ledgers = z->nidle;
    st->free_pages = shd_slab_free_pages(z);

    mrb_shdict_zone_unlock(z);
}
