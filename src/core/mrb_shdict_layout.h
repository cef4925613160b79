/*
 * The layout of a shared dictionary zone: what mrb_shdict_zone.c,
 * mrb_shdict_ledger.c and mrb_shdict_slab.c share.  Nothing outside the
 * shdict files (and their unit tests) should need it.
 *
 * A zone is one block of shared memory:
 *
 *   [zone header][page descriptors][hash buckets][pad to a page][pages...]
 *
 * Every reference inside the zone is a 32-bit offset from the zone start
 * (0 = none), so the layout does not depend on where the block is mapped and
 * an entry header stays small.  Zones are therefore smaller than 4 GB.
 */

#ifndef MRB_SHDICT_LAYOUT_H
#define MRB_SHDICT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include "mrb_shdict_zone.h"

#define SHD_MAGIC         0x6d727364u        /* "mrsd" */
#define SHD_VERSION       2u
#define SHD_PAGE_SIZE     4096u
#define SHD_NCLASSES      11
#define SHD_SMALL_MAX     2048u              /* larger entries take pages */

typedef uint32_t  shd_off;

/* Page kinds. */
enum {
    SHD_PAGE_FREE = 0,   /* in a free run */
    SHD_PAGE_SMALL,      /* cut into chunks of one size class */
    SHD_PAGE_LARGE,      /* first page of a run holding one large entry */
    SHD_PAGE_CONT        /* a following page of a large run */
};

typedef struct {
    uint16_t  kind;
    uint16_t  cls;       /* SMALL: size class index */
    uint32_t  used;      /* SMALL: chunks in use */
    uint32_t  npages;    /* first page of a free or LARGE run: its length */
    uint32_t  head;      /* last page of a free run: index of its first */
    uint32_t  prev;      /* first page of a free run: the free-run list, */
    uint32_t  next;      /*   as page index + 1 (0 = none) */
} shd_page;

/* Chunk tags: the first 16 bits of every chunk say what it holds, so that a
 * zone left half-updated by a killed process can be rebuilt from its pages. */
#define SHD_TAG_ENTRY     0xe17au
#define SHD_TAG_FREE      0xf4eeu

/* Entry flags. */
#define SHD_ENTRY_HELD    0x01   /* a per-process held count (a ledger) */

/* A free chunk of a small page, linked in its class's free list. */
typedef struct {
    uint16_t  tag;
    uint16_t  pad;
    shd_off   prev;
    shd_off   next;
} shd_chunk;

/*
 * A key and its value.  The key bytes follow the header, then the value
 * bytes (8 for Integer and Float, none for true and false).  A ledger entry
 * (SHD_ENTRY_HELD) is keyed by its parent's key followed by the owner's
 * identity (SHD_OWNER_LEN bytes); its value is the Integer that owner holds
 * (0: idle, kept for the owner's next hold).
 */
typedef struct {
    uint16_t  tag;       /* SHD_TAG_ENTRY once complete */
    uint8_t   type;      /* mrb_shdict_type */
    uint8_t   flags;
    shd_off   hnext;     /* hash chain */
    shd_off   prev;      /* LRU list (user entries that are not held), */
    shd_off   next;      /*   or the ledger list (ledger entries) */
    uint32_t  hash;
    uint32_t  klen;
    uint32_t  vlen;
    uint32_t  pins;      /* user entry: ledgers that hold it (kept out of
                            the LRU list while > 0) */
    uint64_t  expires;   /* CLOCK_MONOTONIC ms, 0 = never */
    char      data[];
} shd_entry;

#define SHD_OWNER_LEN     12     /* pid (4 bytes) + process start (8) */

struct mrb_shdict_zone_s {
    uint32_t          magic;
    uint32_t          version;
    uint64_t          size;

    pthread_mutex_t   mutex;      /* process-shared, robust */
    uint32_t          dirty;      /* set while the mutex is held: a holder
                                     that died left it set */
    uint32_t          recoveries; /* times a dead holder was recovered from */

    uint32_t          nbuckets;   /* a power of two */
    uint32_t          npages;
    shd_off           buckets;    /* shd_off[nbuckets] */
    shd_off           pagedesc;   /* shd_page[npages] */
    shd_off           pages;      /* the first page, page aligned */

    uint32_t          free_runs;  /* page index + 1 of the first free run */
    uint32_t          empty_small;/* small pages with no chunk in use */
    shd_off           free_chunks[SHD_NCLASSES];

    shd_off           lru_head;   /* most recently used */
    shd_off           lru_tail;   /* least recently used: evicted first */
    shd_off           ledgers;    /* ledger entries */
    uint32_t          nentries;   /* user entries, including expired ones
                                     not yet removed */
    uint32_t          nledgers;   /* ledger entries, idle ones included */
    uint32_t          nidle;      /* idle ledgers (holding 0) */
    uint64_t          next_sweep; /* ms: when dead owners are next looked for */
    uint64_t          evictions;
};

#define shd_ptr(z, off)   ((void *) ((char *) (z) + (off)))
#define shd_offset(z, p)  ((shd_off) ((char *) (p) - (char *) (z)))


/* The allocator (mrb_shdict_slab.c).  All calls with the zone locked. */

/* Makes every page free: a new or flushed zone. */
void shd_slab_init(mrb_shdict_zone *z);

/* A chunk of at least size bytes, or 0 when no free memory is left (the
 * caller may evict and retry). */
shd_off shd_slab_alloc(mrb_shdict_zone *z, size_t size);

void shd_slab_free(mrb_shdict_zone *z, shd_off off);

/* The bytes the chunk at off can hold. */
size_t shd_slab_capacity(mrb_shdict_zone *z, shd_off off);

/* The largest allocation the zone can ever satisfy. */
size_t shd_slab_max(mrb_shdict_zone *z);

/* Pages in free runs (empty small pages not counted). */
size_t shd_slab_free_pages(mrb_shdict_zone *z);

/*
 * Rebuilds the allocator's lists from the page descriptors and chunk tags
 * after a process died mid-update.  keep(z, off, capacity) is called for
 * every chunk tagged as an entry and says whether it is one (1) or garbage
 * to be freed (0).
 */
void shd_slab_rebuild(mrb_shdict_zone *z,
    int (*keep)(mrb_shdict_zone *z, shd_off off, size_t capacity));

#endif /* MRB_SHDICT_LAYOUT_H */
