/*
 * A shared dictionary zone: a hash table with an LRU list and a slab
 * allocator inside one block of shared memory, guarded by one process-shared
 * robust mutex.  Every call below takes the mutex for a few hundred
 * nanoseconds at most and is atomic across the processes that share the
 * block.  No call allocates outside the zone or raises: the Ruby class
 * (mrb_shdict_class.c) turns the status codes into exceptions.
 *
 * A process killed while it holds the mutex does not block the others: the
 * next locker gets EOWNERDEAD, rebuilds the zone's lists from its pages if
 * the dead process was mid-update, and carries on.
 */

#ifndef MRB_SHDICT_ZONE_H
#define MRB_SHDICT_ZONE_H

#include <stddef.h>
#include <stdint.h>

typedef struct mrb_shdict_zone_s  mrb_shdict_zone;

typedef enum {
    MRB_SHDICT_OK = 0,
    MRB_SHDICT_NOT_FOUND,     /* no such key, or it expired */
    MRB_SHDICT_EXISTS,        /* add: the key is already there */
    MRB_SHDICT_NO_MEMORY,     /* full, and evicting was not allowed */
    MRB_SHDICT_TOO_LARGE,     /* the entry cannot fit even an empty zone */
    MRB_SHDICT_NOT_A_NUMBER,  /* incr, hold: the value is not a number */
    MRB_SHDICT_OVERFLOW,      /* the Integer result does not fit 64 bits */
    MRB_SHDICT_TRUNCATED,     /* the caller's buffer was too small */
    MRB_SHDICT_LOCK_FAILED    /* the mutex is unusable */
} mrb_shdict_rc;

typedef enum {
    MRB_SHDICT_STRING = 1,
    MRB_SHDICT_INTEGER,
    MRB_SHDICT_FLOAT,
    MRB_SHDICT_TRUE,
    MRB_SHDICT_FALSE
} mrb_shdict_type;

typedef struct {
    mrb_shdict_type  type;
    int64_t          i;      /* INTEGER */
    double           f;      /* FLOAT */
    const char      *str;    /* STRING: the bytes (get: the caller's buffer) */
    size_t           len;    /* STRING: their length (get: the full length) */
} mrb_shdict_value;

/* Flags of mrb_shdict_zone_set. */
#define MRB_SHDICT_ADD       0x01   /* only if the key is absent */
#define MRB_SHDICT_NO_EVICT  0x02   /* fail with NO_MEMORY rather than evict */

#define MRB_SHDICT_MIN_SIZE  (32 * 1024)
#define MRB_SHDICT_MAX_SIZE  ((size_t) 4095 * 1024 * 1024)

/* How often dead holders are looked for (ms). */
#define MRB_SHDICT_SWEEP_INTERVAL  1000

/* Formats size bytes at mem (zero-filled, e.g. fresh from mmap) as an empty
 * zone.  Returns NULL if size is out of range or the mutex cannot be made. */
mrb_shdict_zone *mrb_shdict_zone_init(void *mem, size_t size);

/* The zone mrb_shdict_zone_init formatted at mem (size bytes), maybe in
 * another process: NULL if mem holds no zone of this layout version and
 * size (a file of something else, or of another build). */
mrb_shdict_zone *mrb_shdict_zone_attach(void *mem, size_t size);

/* The 32-bit hash of a key. */
uint32_t mrb_shdict_hash(const char *key, size_t len);

/*
 * Copies the value of key into *v.  A String's bytes go to buf (cap bytes);
 * v->len is the full length and TRUNCATED says buf was too small.
 */
mrb_shdict_rc mrb_shdict_zone_get(mrb_shdict_zone *z, const char *key,
    size_t klen, mrb_shdict_value *v, char *buf, size_t cap);

/* Stores key = v, expiring after ttl_ms (0: never).  MRB_SHDICT_ADD and
 * MRB_SHDICT_NO_EVICT as above. */
mrb_shdict_rc mrb_shdict_zone_set(mrb_shdict_zone *z, const char *key,
    size_t klen, const mrb_shdict_value *v, uint64_t ttl_ms, unsigned flags);

/*
 * Adds by (INTEGER or FLOAT) to the number at key; the result is in *out.
 * An absent key starts from *init (NOT_FOUND when init is NULL) and then
 * expires after ttl_ms (0: never); an existing key keeps its expiry.
 */
mrb_shdict_rc mrb_shdict_zone_incr(mrb_shdict_zone *z, const char *key,
    size_t klen, const mrb_shdict_value *by, const mrb_shdict_value *init,
    uint64_t ttl_ms, mrb_shdict_value *out);

/* Removes key (and, if it is held, the holds on it). */
mrb_shdict_rc mrb_shdict_zone_delete(mrb_shdict_zone *z, const char *key,
    size_t klen);

/* The ms key has left to live in *ms, or -1 if it never expires. */
mrb_shdict_rc mrb_shdict_zone_ttl(mrb_shdict_zone *z, const char *key,
    size_t klen, int64_t *ms);

/*
 * Writes the live keys to buf as (uint32_t length, bytes) records and their
 * number to *count; *need is the buffer size all of them take.  TRUNCATED
 * when cap < *need (nothing useful is in buf then).
 */
mrb_shdict_rc mrb_shdict_zone_keys(mrb_shdict_zone *z, char *buf,
    size_t cap, size_t *need, size_t *count);

/* The number of live keys. */
size_t mrb_shdict_zone_count(mrb_shdict_zone *z);

/* Removes every entry. */
mrb_shdict_rc mrb_shdict_zone_flush(mrb_shdict_zone *z);

/*
 * Held counts: adds n (> 0) to the Integer at key (created as 0) on behalf
 * of the calling process, which records what it holds in a ledger entry.
 * release gives back up to n of what this process holds (never more, so a
 * release without a hold, or after flush_all, changes nothing and returns
 * NOT_FOUND).  When a
 * process dies, what it held is withdrawn from the key by the next call on
 * the zone after the sweep interval.  A held key is kept out of the LRU list
 * (never evicted) and does not expire.  *total is the key's value after.
 * A ledger that release brings to 0 stays, idle, for the process's next hold
 * of the key (which then allocates nothing) until the next sweep or until
 * an allocation finds the zone full.
 */
mrb_shdict_rc mrb_shdict_zone_hold(mrb_shdict_zone *z, const char *key,
    size_t klen, int64_t n, int64_t *total);
mrb_shdict_rc mrb_shdict_zone_release(mrb_shdict_zone *z, const char *key,
    size_t klen, int64_t n, int64_t *total);

/* Withdraws the holds of dead processes now, whatever the interval; returns
 * how many holds (ledger entries with a count) it withdrew. */
size_t mrb_shdict_zone_sweep(mrb_shdict_zone *z);

/*
 * Takes and releases the zone mutex around a caller's own sequence (tests).
 * lock returns 0, or -1 if the mutex is unusable.
 */
int mrb_shdict_zone_lock(mrb_shdict_zone *z);
void mrb_shdict_zone_unlock(mrb_shdict_zone *z);

/* Counters for tests and diagnostics. */
typedef struct {
    uint64_t  evictions;
    uint32_t  recoveries;
    uint32_t  ledgers;        /* ledger entries holding a count */
    uint32_t  idle_ledgers;   /* ledger entries kept at 0 for the next hold */
    size_t    free_pages;
    size_t    page_size;      /* bytes in a page */
} mrb_shdict_stats;

void mrb_shdict_zone_stats(mrb_shdict_zone *z, mrb_shdict_stats *st);

/*
 * The registry of declared dictionaries (mrb_shdict.c).  A reference stays
 * allocated for the life of the process, so a Ruby object may keep one
 * across reloads; its zone is NULL once a reload dropped the dictionary.
 */
typedef struct mrb_shdict_ref_s  mrb_shdict_ref;

mrb_shdict_ref *mrb_shdict_find(const char *name, size_t len);

/* The size of a dictionary nobody declared (mrb_shdict_open_default). */
#define MRB_SHDICT_DEFAULT_SIZE  (1024 * 1024)
#define MRB_SHDICT_DEFAULT_SIZE_TEXT  "1m"

/*
 * Makes the dictionary name, which no configuration declared, with
 * MRB_SHDICT_DEFAULT_SIZE, in use at once and kept across reloads (as a
 * declared one of that size).  Only in the process that read the
 * configuration (a post_config or mruby_init script): workers forked after
 * it share the zone.  NULL with a message in err elsewhere or on failure.
 */
mrb_shdict_ref *mrb_shdict_open_default(const char *name, size_t len,
    char *err, size_t errlen);
mrb_shdict_zone *mrb_shdict_ref_zone(const mrb_shdict_ref *ref);

/* The registry's dictionary after prev (NULL: the first), or NULL. */
mrb_shdict_ref *mrb_shdict_ref_next(const mrb_shdict_ref *prev);
const char *mrb_shdict_ref_name(const mrb_shdict_ref *ref);
size_t mrb_shdict_ref_size(const mrb_shdict_ref *ref);

/*
 * A reference to zone z (size bytes) that no configuration declared: a
 * store in a file (mrb_shdict_file.c).  It is in no registry, so that
 * SharedDict.new never finds it and a reload never unmaps it; it lives as
 * long as the process.  name (cut to 63 bytes) is what errors call it.
 * NULL when out of memory.
 */
mrb_shdict_ref *mrb_shdict_ref_new(const char *name, mrb_shdict_zone *z,
    size_t size);

#endif /* MRB_SHDICT_ZONE_H */
