/*
 * An interpreter's symbol for a script's file name, in O(1).
 *
 * mruby 3.1.0, 3.3.0 and 4.0.0 keep 256 hash buckets whose entries link
 * to the previous entry of their bucket by an 8-bit offset; past a gap of
 * 254 entries a lookup that does not find its name scans every older
 * entry.  A script's first run in an interpreter names its file there, a
 * name the table does not hold yet: with N scripts run, a scan of N names,
 * so a new worker's first pass over N scripts cost N^2/2 compares (235 s
 * of CPU at 100,000 scripts on nginx with 3.1, docs/benchmarks.md).
 *
 * So each interpreter keeps an index, by name, of its whole symbol table:
 * before a lookup the names added to the table since the last one are
 * indexed (each name once, whoever interned it), so a name the index does
 * not hold is one the table does not hold either, and it is added to the
 * table here as mruby's sym_intern() adds a name after its lookup
 * (src/symbol.c).
 *
 * Linked into mruby's buckets, N file names also make mruby's own lookup
 * of a name interned before them O(N): a bucket's chain from its newest
 * entry back to that name crosses a gap of more than 254 entries, and
 * then scans every entry below.  mruby 4.0's loader looks up every name of
 * a script's bytecode that is not inline (4 characters at most there, 5
 * on 3.x: `Nginx` and `rputs` are looked up on 4.0 only): 630 us a first
 * run at 100,000 scripts on nginx.  So the interpreter's file names are
 * entries of the table (a symbol names them) outside every bucket: mruby
 * never finds them (a script that makes a Symbol of a file's path gets
 * one of its own, equal in name), this index does.  The compiler's are
 * linked: its parser looks the file name up, and it is opened again
 * every 1,024 names.  What differs between the releases: 3.1's bucket hash is its own;
 * 4.0 marks a literal name in the entry's pointer instead of a bit table,
 * copies the other names into 4 kB blocks of its own (sym_pool) instead
 * of one block each, and keeps the links and buckets in a hash table that
 * it makes once the table has 256 names (before, a lookup scans them).
 *
 * A symbol is its table index plus the number of the library's preset
 * symbols (MRB_PRESYM_MAX of its build, not in Debian's headers): learnt
 * from the first name interned the usual way.
 */

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mruby.h>
#include <mruby/error.h>

#include "mrb_file_sym.h"
#include "mrb_mruby_version.h"

#define FILE_SYM_MIN_SLOTS  1024

typedef struct {
    uint32_t  hash;
    mrb_sym   index;        /* in mrb->symtbl; 0: free */
} file_sym_slot;

struct mrb_file_syms_s {
    file_sym_slot  *slots;
    size_t          mask;   /* slots - 1, a power of 2 less one */
    size_t          used;
    mrb_sym         upto;   /* the table's entries indexed: 1..upto */
    int             linked; /* names added go into mruby's buckets */
};

/* the library's preset symbols, + 1 once known (0: not yet) */
static atomic_uint  file_sym_presym;


mrb_file_syms *
mrb_file_syms_new(int linked)
{
    mrb_file_syms  *fs = calloc(1, sizeof(mrb_file_syms));

    if (fs != NULL) {
        fs->linked = linked;
    }

    return fs;
}


void
mrb_file_syms_free(mrb_file_syms *fs)
{
    if (fs != NULL) {
        free(fs->slots);
        free(fs);
    }
}


/* FNV-1a: the index's own hash, not the table's bucket. */
static uint32_t
file_sym_hash(const char *name, size_t len)
{
    uint32_t  h = 2166136261u;
    size_t    i;

    for (i = 0; i < len; i++) {
        h = (h ^ (uint8_t) name[i]) * 16777619u;
    }

    return h;
}


/* An entry's length before its name, 7 bits a byte, low bits first;
 * *p moves past it. */
static size_t
file_sym_len_decode(const uint8_t **p)
{
    const uint8_t  *q = *p;
    size_t          n = 0;
    int             shift = 0;

    do {
        n |= (size_t) (*q & 0x7f) << shift;
        shift += 7;
    } while (*q++ & 0x80);

    *p = q;
    return n;
}


/* The name of the table's entry i (src/symbol.c sym2name_len). */
#ifdef MRB_SYMTBL_LINKED

static const char *
file_sym_entry(mrb_state *mrb, mrb_sym i, size_t *len)
{
    const uint8_t  *p = (const uint8_t *) mrb->symtbl[i];

    if (mrb->symflags[i >> 3] & (1 << (i & 7))) {
        *len = strlen((const char *) p);
        return (const char *) p;
    }

    *len = file_sym_len_decode(&p);
    return (const char *) p;
}

#else

/* a block of sym_pool: the names follow the header */
typedef struct file_sym_pool_s  file_sym_pool;

struct file_sym_pool_s {
    file_sym_pool  *next;
    size_t          used;
};

#define FILE_SYM_POOL_SIZE  4096
#define FILE_SYM_LITERAL    ((uintptr_t) 1)

static const char *
file_sym_entry(mrb_state *mrb, mrb_sym i, size_t *len)
{
    uintptr_t       tagged = (uintptr_t) mrb->symtbl[i];
    const uint8_t  *p = (const uint8_t *) (tagged & ~FILE_SYM_LITERAL);

    if (tagged & FILE_SYM_LITERAL) {
        *len = strlen((const char *) p);
        return (const char *) p;
    }

    *len = file_sym_len_decode(&p);
    return (const char *) p;
}

#endif


static void
file_sym_put(mrb_file_syms *fs, uint32_t hash, mrb_sym index)
{
    size_t  i = hash & fs->mask;

    while (fs->slots[i].index != 0) {
        i = (i + 1) & fs->mask;
    }

    fs->slots[i].hash = hash;
    fs->slots[i].index = index;
    fs->used++;
}


/* Room for n more names, at most half full; -1 when out of memory. */
static int
file_sym_room(mrb_file_syms *fs, size_t n)
{
    file_sym_slot  *old = fs->slots;
    size_t          i, cap = old != NULL ? fs->mask + 1 : 0;
    size_t          want = FILE_SYM_MIN_SLOTS;

    if ((fs->used + n) * 2 <= cap) {
        return 0;
    }

    while (want < (fs->used + n) * 2) {
        want *= 2;
    }

    fs->slots = calloc(want, sizeof(file_sym_slot));
    if (fs->slots == NULL) {
        fs->slots = old;
        return -1;
    }

    fs->mask = want - 1;
    fs->used = 0;

    for (i = 0; i < cap; i++) {
        if (old[i].index != 0) {
            file_sym_put(fs, old[i].hash, old[i].index);
        }
    }

    free(old);
    return 0;
}


/* Indexes what the table gained since the last call; -1: out of memory. */
static int
file_sym_catch_up(mrb_state *mrb, mrb_file_syms *fs)
{
    const char  *name;
    size_t       len;
    mrb_sym      i;

    if (fs->upto == mrb->symidx) {
        return 0;
    }

    if (file_sym_room(fs, mrb->symidx - fs->upto) != 0) {
        return -1;
    }

    for (i = fs->upto + 1; i <= mrb->symidx; i++) {
        name = file_sym_entry(mrb, i, &len);
        file_sym_put(fs, file_sym_hash(name, len), i);
    }

    fs->upto = mrb->symidx;
    return 0;
}


static mrb_sym
file_sym_find(mrb_state *mrb, mrb_file_syms *fs, const char *name,
    size_t len, uint32_t hash)
{
    const char  *entry;
    size_t       i, elen;

    for (i = hash & fs->mask; fs->slots[i].index != 0;
         i = (i + 1) & fs->mask)
    {
        if (fs->slots[i].hash != hash) {
            continue;
        }

        entry = file_sym_entry(mrb, fs->slots[i].index, &elen);
        if (elen == len && memcmp(entry, name, len) == 0) {
            return fs->slots[i].index;
        }
    }

    return 0;
}


/* The table's bucket of a name. */
static uint8_t
file_sym_bucket(const char *name, size_t len)
{
#if MRUBY_RELEASE_NO == 30100
    uint32_t  h = 0;
    size_t    i;

    /* symhash(): static in 3.1.0's symbol.c */
    for (i = 0; i < len; i++) {
        h += (uint8_t) name[i];
        h += h << 10;
        h ^= h >> 6;
    }
    h += h << 3;
    h ^= h >> 11;
    h += h << 15;
    return (uint8_t) h;
#else
    return (uint8_t) mrb_byte_hash((const uint8_t *) name, (mrb_int) len);
#endif
}


/* The link of entry i to prev, the previous one of its bucket (0: none). */
static uint8_t
file_sym_link(mrb_sym i, mrb_sym prev)
{
    return prev == 0 ? 0 : (i - prev > 0xff ? 0xff : (uint8_t) (i - prev));
}


/* The bytes of name's entry: its length, 7 bits a byte, low bits first,
 * then the name and a NUL. */
static size_t
file_sym_len_size(size_t len)
{
    size_t  n = 0;

    do {
        n++;
        len >>= 7;
    } while (len != 0);

    return n;
}


static void
file_sym_entry_write(char *p, const char *name, size_t len)
{
    size_t  n, i = 0;

    for (n = len; i == 0 || n != 0; n >>= 7) {
        p[i++] = (char) ((n & 0x7f) | (n >> 7 != 0 ? 0x80 : 0));
    }
    memcpy(p + i, name, len);
    p[i + len] = '\0';
}


#ifdef MRB_SYMTBL_LINKED

/*
 * Adds name, which the table does not hold, as sym_intern() does after its
 * lookup: the table grown by a fifth when full, the name copied after its
 * length, and if linked, linked to the previous entry of its bucket.
 * Returns its index.  May raise (out of memory) before it changes anything
 * that counts.
 */
static mrb_sym
file_sym_add(mrb_state *mrb, const char *name, size_t len, int linked)
{
    mrb_sym   i = mrb->symidx + 1;
    size_t    capa;
    uint8_t   hash = file_sym_bucket(name, len);
    char     *p;

    if (mrb->symcapa <= i) {
        capa = mrb->symcapa == 0 ? 100 : mrb->symcapa * 6 / 5;
        mrb->symtbl = mrb_realloc(mrb, (void *) mrb->symtbl,
                                  sizeof(char *) * capa);
        mrb->symflags = mrb_realloc(mrb, mrb->symflags, capa / 8 + 1);
        memset(mrb->symflags + mrb->symcapa / 8 + 1, 0,
               (capa - mrb->symcapa) / 8);
        mrb->symlink = mrb_realloc(mrb, mrb->symlink, capa);
        mrb->symcapa = capa;
    }

    p = mrb_malloc(mrb, file_sym_len_size(len) + len + 1);
    file_sym_entry_write(p, name, len);

    mrb->symflags[i >> 3] &= ~(1 << (i & 7));   /* not a literal */
    mrb->symtbl[i] = p;
    mrb->symidx = i;
    mrb->symlink[i] = 0;

    if (linked) {
        mrb->symlink[i] = file_sym_link(i, mrb->symhash[hash]);
        mrb->symhash[hash] = i;
    }

    return i;
}

#else

/*
 * 4.0.0's migrate_to_hash_table(), which its sym_intern() calls before it
 * adds a name to a table of MRB_SYMBOL_LINEAR_THRESHOLD names or more:
 * the hash table of every name so far.  Done here too, so that file names
 * added here never leave mruby looking names up by a scan of the table.
 * May raise (out of memory) before it changes anything.
 */
static void
file_sym_hash_all(mrb_state *mrb)
{
    struct mrb_sym_hash_table  *ht;
    uint8_t                    *link, hash;
    const char                 *name;
    size_t                      len;
    mrb_sym                     i;

    link = mrb_calloc(mrb, mrb->symcapa, 1);
    ht = mrb_malloc_simple(mrb, sizeof(struct mrb_sym_hash_table));
    if (ht == NULL) {
        mrb_free(mrb, link);
        mrb_exc_raise(mrb, mrb_obj_value(mrb->nomem_err));
    }

    memset(ht->buckets, 0, sizeof(ht->buckets));
    for (i = 1; i <= mrb->symidx; i++) {
        name = file_sym_entry(mrb, i, &len);
        hash = file_sym_bucket(name, len);
        link[i] = file_sym_link(i, ht->buckets[hash]);
        ht->buckets[hash] = i;
    }

    ht->symlink = link;
    mrb->symhash = ht;
}


/*
 * 4.0.0's sym_intern() after its lookup: the table grown by a fifth when
 * full, the name copied after its length into the current 4 kB block of
 * sym_pool (an entry's size even, so that bit 0 of its address, the
 * literal mark, is clear), or into a new block that mrb_close frees with
 * the others, and if linked, once the table has its hash table, linked to
 * the previous entry of its bucket.  Returns its index.  May raise
 * (out of memory) before it changes anything that counts.
 */
static mrb_sym
file_sym_add(mrb_state *mrb, const char *name, size_t len, int linked)
{
    struct mrb_sym_hash_table  *ht;
    file_sym_pool              *pool;
    mrb_sym                     i = mrb->symidx + 1;
    size_t                      capa, size;
    uint8_t                     hash;
    char                       *p;

    if (mrb->symhash == NULL && mrb->symidx >= MRB_SYMBOL_LINEAR_THRESHOLD) {
        file_sym_hash_all(mrb);
    }

    ht = mrb->symhash;
    pool = mrb->sym_pool;

    if (mrb->symcapa <= i) {
        capa = mrb->symcapa == 0 ? 100 : mrb->symcapa * 6 / 5;
        mrb->symtbl = mrb_realloc(mrb, (void *) mrb->symtbl,
                                  sizeof(char *) * capa);
        if (ht != NULL) {
            ht->symlink = mrb_realloc(mrb, ht->symlink, capa);
        }
        mrb->symcapa = capa;
    }

    size = (file_sym_len_size(len) + len + 2) & ~(size_t) 1;

    if (pool != NULL && pool->used + size <= FILE_SYM_POOL_SIZE) {
        p = (char *) (pool + 1) + pool->used;
        pool->used += size;

    } else {
        pool = mrb_malloc(mrb, sizeof(file_sym_pool)
                          + (size > FILE_SYM_POOL_SIZE
                             ? size : FILE_SYM_POOL_SIZE));
        pool->next = mrb->sym_pool;
        pool->used = size;
        mrb->sym_pool = pool;
        p = (char *) (pool + 1);
    }

    file_sym_entry_write(p, name, len);
    mrb->symtbl[i] = p;
    mrb->symidx = i;

    if (ht != NULL) {
        ht->symlink[i] = 0;
        if (linked) {
            hash = file_sym_bucket(name, len);
            ht->symlink[i] = file_sym_link(i, ht->buckets[hash]);
            ht->buckets[hash] = i;
        }
    }

    return i;
}

#endif


mrb_sym
mrb_file_sym(mrb_state *mrb, mrb_file_syms *fs, const char *name)
{
    size_t    len = strlen(name);
    unsigned  presym = atomic_load_explicit(&file_sym_presym,
                                            memory_order_relaxed);
    mrb_sym   index, sym, before;
    uint32_t  hash;

    /* mruby refuses longer names (sym_validate_len): its message */
    if (presym != 0 && len < 0xffff && file_sym_catch_up(mrb, fs) == 0) {
        hash = file_sym_hash(name, len);
        index = file_sym_find(mrb, fs, name, len, hash);

        if (index == 0) {
            if (file_sym_room(fs, 1) != 0) {
                goto usual;
            }
            index = file_sym_add(mrb, name, len, fs->linked);
            file_sym_put(fs, hash, index);
            fs->upto = index;
        }

        return index + (presym - 1);
    }

usual:

    before = mrb->symidx;
    sym = mrb_intern(mrb, name, len);

    if (presym == 0 && mrb->symidx == before + 1) {
        atomic_store_explicit(&file_sym_presym, sym - mrb->symidx + 1,
                              memory_order_relaxed);
    }

    return sym;
}

typedef struct {
    mrb_file_syms  *fs;
    const char     *name;
} file_sym_job;


static mrb_value
file_sym_body(mrb_state *mrb, void *arg)
{
    file_sym_job  *job = arg;

    return mrb_symbol_value(job->fs != NULL
                            ? mrb_file_sym(mrb, job->fs, job->name)
                            : mrb_intern_cstr(mrb, job->name));
}


int
mrb_file_sym_protected(mrb_state *mrb, mrb_file_syms *fs, const char *name,
    mrb_sym *sym)
{
    file_sym_job  job = { fs, name };
    mrb_value     v;
    mrb_bool      failed;

    v = mrb_protect_error(mrb, file_sym_body, &job, &failed);
    if (failed) {
        mrb->exc = NULL;
        return -1;
    }

    *sym = mrb_symbol(v);
    return 0;
}
