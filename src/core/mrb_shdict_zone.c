/*
 * A shared dictionary zone: hash table, LRU list and the robust mutex
 * around them (see mrb_shdict_zone.h, mrb_shdict_layout.h); the held counts
 * are mrb_shdict_ledger.c's.
 *
 * Every operation hashes its key before taking the mutex and reads the clock
 * only when an entry with an expiry is met, so the critical section is a
 * bucket walk, a few stores and the LRU move.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "mrb_shdict_entry.h"

/* trylock attempts before sleeping on the mutex: a holder leaves within a
 * few hundred ns, far less than a futex sleep and wake-up cost */
#define SHD_SPINS        100


static inline void
shd_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}


uint64_t
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


/* Lists (mrb_shdict_entry.h). */

void
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


void
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


static void
shd_lru_touch(mrb_shdict_zone *z, shd_entry *e)
{
    if (e->pins == 0 && z->lru_head != shd_offset(z, e)) {
        shd_lru_unlink(z, e);
        shd_lru_push(z, e);
    }
}


/* The hash table. */

void
shd_hash_link(mrb_shdict_zone *z, shd_entry *e)
{
    shd_off  *b = &shd_buckets(z)[e->hash & (z->nbuckets - 1)];

    e->hnext = *b;
    *b = shd_offset(z, e);
}


void
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


shd_entry *
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


void
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


shd_entry *
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


shd_entry *
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


void
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


void
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


mrb_shdict_zone *
mrb_shdict_zone_attach(void *mem, size_t size)
{
    mrb_shdict_zone  *z = mem;

    /* what mrb_shdict_zone_init wrote must all lie inside the mapping, so
     * that a damaged file cannot send a lookup outside it */
    if (size < MRB_SHDICT_MIN_SIZE || size > MRB_SHDICT_MAX_SIZE
        || z->magic != SHD_MAGIC || z->version != SHD_VERSION
        || z->size != size
        || z->nbuckets == 0 || (z->nbuckets & (z->nbuckets - 1)) != 0
        || z->pagedesc < sizeof(mrb_shdict_zone)
        || (uint64_t) z->pagedesc + (uint64_t) z->npages * sizeof(shd_page)
           > z->buckets
        || (uint64_t) z->buckets + (uint64_t) z->nbuckets * sizeof(shd_off)
           > z->pages
        || (uint64_t) z->pages + (uint64_t) z->npages * SHD_PAGE_SIZE > size)
    {
        return NULL;
    }

    return z;
}


/* Operations on one key: each a _locked function run by shd_with_entry. */

typedef struct {
    mrb_shdict_value  *v;
    char              *buf;
    size_t             cap;
} shd_get_args;


static mrb_shdict_rc
shd_get_locked(mrb_shdict_zone *z, shd_entry *e, shd_key *k, void *arg)
{
    shd_get_args  *a = arg;

    if (e == NULL) {
        return MRB_SHDICT_NOT_FOUND;
    }

    shd_lru_touch(z, e);
    return shd_value_load(e, a->v, a->buf, a->cap);
}


mrb_shdict_rc
mrb_shdict_zone_get(mrb_shdict_zone *z, const char *key, size_t klen,
    mrb_shdict_value *v, char *buf, size_t cap)
{
    shd_get_args  a = { v, buf, cap };

    shd_sweep_maybe(z);

    return shd_with_entry(z, key, klen, shd_get_locked, &a);
}


typedef struct {
    const mrb_shdict_value  *v;
    uint64_t                 ttl_ms;
    unsigned                 flags;
} shd_set_args;


static mrb_shdict_rc
shd_set_locked(mrb_shdict_zone *z, shd_entry *e, shd_key *k, void *arg)
{
    size_t         size;
    uint32_t       pins;
    uint64_t       expires;
    shd_entry     *n;
    mrb_shdict_rc  rc;
    shd_set_args  *a = arg;

    if (e != NULL && (a->flags & MRB_SHDICT_ADD)) {
        return MRB_SHDICT_EXISTS;
    }

    size = sizeof(shd_entry) + k->klen + shd_value_len(a->v);
    expires = (a->ttl_ms != 0) ? shd_now(&k->clk) + a->ttl_ms : 0;

    if (e != NULL && size <= shd_slab_capacity(z, shd_offset(z, e))) {
        shd_value_store(e, a->v);
        e->expires = (e->pins == 0) ? expires : 0;
        shd_lru_touch(z, e);
        return MRB_SHDICT_OK;
    }

    if (e != NULL && e->pins == 0) {
        /* out of the eviction's reach until it is replaced */
        shd_lru_unlink(z, e);
    }

    rc = MRB_SHDICT_OK;
    n = shd_entry_alloc(z, size, !(a->flags & MRB_SHDICT_NO_EVICT), &rc);

    if (n == NULL) {
        if (e != NULL && e->pins == 0) {
            shd_lru_push(z, e);
        }
        return rc;
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

    shd_entry_publish(z, n, k->hash, k->key, k->klen, a->v,
                      pins ? 0 : expires);

    if (pins != 0) {
        shd_lru_unlink(z, n);
        n->pins = pins;
    }

    return MRB_SHDICT_OK;
}


mrb_shdict_rc
mrb_shdict_zone_set(mrb_shdict_zone *z, const char *key, size_t klen,
    const mrb_shdict_value *v, uint64_t ttl_ms, unsigned flags)
{
    shd_set_args  a = { v, ttl_ms, flags };

    return shd_with_entry(z, key, klen, shd_set_locked, &a);
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


typedef struct {
    const mrb_shdict_value  *by;
    const mrb_shdict_value  *init;
    uint64_t                 ttl_ms;
    mrb_shdict_value        *out;
} shd_incr_args;


static mrb_shdict_rc
shd_incr_locked(mrb_shdict_zone *z, shd_entry *e, shd_key *k, void *arg)
{
    mrb_shdict_rc      rc;
    shd_incr_args     *a = arg;
    mrb_shdict_value   cur;

    if (e == NULL) {
        if (a->init == NULL) {
            return MRB_SHDICT_NOT_FOUND;
        }

        rc = shd_add(a->init, a->by, a->out);
        if (rc != MRB_SHDICT_OK) {
            return rc;
        }

        e = shd_entry_alloc(z, sizeof(shd_entry) + k->klen + 8, 1, &rc);
        if (e == NULL) {
            return rc;
        }

        shd_entry_publish(z, e, k->hash, k->key, k->klen, a->out,
                          (a->ttl_ms != 0) ? shd_now(&k->clk) + a->ttl_ms : 0);
        return MRB_SHDICT_OK;
    }

    if (e->type != MRB_SHDICT_INTEGER && e->type != MRB_SHDICT_FLOAT) {
        return MRB_SHDICT_NOT_A_NUMBER;
    }

    cur.type = (mrb_shdict_type) e->type;

    if (cur.type == MRB_SHDICT_INTEGER) {
        cur.i = shd_int_of(e);

    } else {
        memcpy(&cur.f, shd_value_of(e), 8);
    }

    rc = shd_add(&cur, a->by, a->out);
    if (rc != MRB_SHDICT_OK) {
        return rc;
    }

    /* an Integer and a Float both take 8 bytes: always in place */
    shd_value_store(e, a->out);
    shd_lru_touch(z, e);

    return MRB_SHDICT_OK;
}


mrb_shdict_rc
mrb_shdict_zone_incr(mrb_shdict_zone *z, const char *key, size_t klen,
    const mrb_shdict_value *by, const mrb_shdict_value *init,
    uint64_t ttl_ms, mrb_shdict_value *out)
{
    shd_incr_args  a = { by, init, ttl_ms, out };

    return shd_with_entry(z, key, klen, shd_incr_locked, &a);
}


static mrb_shdict_rc
shd_delete_locked(mrb_shdict_zone *z, shd_entry *e, shd_key *k, void *arg)
{
    if (e == NULL) {
        return MRB_SHDICT_NOT_FOUND;
    }

    shd_entry_remove(z, e);
    return MRB_SHDICT_OK;
}


mrb_shdict_rc
mrb_shdict_zone_delete(mrb_shdict_zone *z, const char *key, size_t klen)
{
    return shd_with_entry(z, key, klen, shd_delete_locked, NULL);
}


static mrb_shdict_rc
shd_ttl_locked(mrb_shdict_zone *z, shd_entry *e, shd_key *k, void *arg)
{
    int64_t  *ms = arg;

    if (e == NULL) {
        return MRB_SHDICT_NOT_FOUND;
    }

    *ms = (e->expires == 0) ? -1 : (int64_t) (e->expires - shd_now(&k->clk));
    return MRB_SHDICT_OK;
}


mrb_shdict_rc
mrb_shdict_zone_ttl(mrb_shdict_zone *z, const char *key, size_t klen,
    int64_t *ms)
{
    return shd_with_entry(z, key, klen, shd_ttl_locked, ms);
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


void
shd_lists_clear(mrb_shdict_zone *z)
{
    memset(shd_buckets(z), 0, (size_t) z->nbuckets * sizeof(shd_off));
    z->lru_head = 0;
    z->lru_tail = 0;
    z->ledgers = 0;
    z->nentries = 0;
    z->nledgers = 0;
    z->nidle = 0;
}


mrb_shdict_rc
mrb_shdict_zone_flush(mrb_shdict_zone *z)
{
    if (mrb_shdict_zone_lock(z) != 0) {
        return MRB_SHDICT_LOCK_FAILED;
    }

    shd_lists_clear(z);
    shd_slab_init(z);

    mrb_shdict_zone_unlock(z);
    return MRB_SHDICT_OK;
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
    st->page_size = SHD_PAGE_SIZE;

    mrb_shdict_zone_unlock(z);
}
