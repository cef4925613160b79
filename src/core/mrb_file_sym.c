/*
 * An interpreter's symbol for a script's file name, in O(1).
 *
 * mruby 3.1.0 and 3.3.0 keep 256 hash buckets whose entries link to the
 * previous entry of their bucket by an 8-bit offset; past a gap of 254
 * entries a lookup that does not find its name scans every older entry.
 * A script's first run in an interpreter names its file there, a name the
 * table does not hold yet: with N scripts run, a scan of N names, so a new
 * worker's first pass over N scripts cost N^2/2 compares (235 s of CPU at
 * 100,000 scripts on nginx, docs/benchmarks.md).
 *
 * So each interpreter keeps an index, by name, of its whole symbol table:
 * before a lookup the names added to the table since the last one are
 * indexed (each name once, whoever interned it), so a name the index does
 * not hold is one the table does not hold either, and it is added to the
 * table here as mruby's sym_intern() adds a name after its lookup
 * (src/symbol.c: the same in both releases but for the bucket's hash).
 * mruby's own lookups find it as they find any other name.
 *
 * A symbol is its table index plus the number of the library's preset
 * symbols (MRB_PRESYM_MAX of its build, not in Debian's headers): learnt
 * from the first name interned the usual way.
 *
 * mruby 4.0 keeps its table otherwise (symhash, a hash table whose layout
 * its headers do not give): there the name is interned as any other, at
 * the library's cost (on 4.0.0 a new name takes time in proportion to the
 * names already interned: 62 us each at 10,000 names, 2.4 ms at 160,000,
 * mrb_intern on this machine, 2026-11-27).
 */

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mruby.h>
#include <mruby/error.h>

#include "mrb_file_sym.h"
#include "mrb_mruby_version.h"

#ifdef MRB_SYMTBL_LINKED

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
};

/* the library's preset symbols, + 1 once known (0: not yet) */
static atomic_uint  file_sym_presym;


mrb_file_syms *
mrb_file_syms_new(void)
{
    return calloc(1, sizeof(mrb_file_syms));
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


/* The name of the table's entry i (src/symbol.c sym2name_len). */
static const char *
file_sym_entry(mrb_state *mrb, mrb_sym i, size_t *len)
{
    const uint8_t  *p = (const uint8_t *) mrb->symtbl[i];
    uint32_t        n = 0;
    int             shift = 0;

    if (mrb->symflags[i >> 3] & (1 << (i & 7))) {
        *len = strlen((const char *) p);
        return (const char *) p;
    }

    /* the length before the name, 7 bits a byte, low bits first */
    do {
        n |= (uint32_t) (*p & 0x7f) << shift;
        shift += 7;
    } while (*p++ & 0x80);

    *len = n;
    return (const char *) p;
}


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


/* The table's bucket of a name (src/symbol.c). */
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


/*
 * Adds name, which the table does not hold, as sym_intern() does after its
 * lookup: the table grown by a fifth when full, the name copied after its
 * length, linked to the previous entry of its bucket.  Returns its index.
 * May raise (out of memory) before it changes anything that counts.
 */
static mrb_sym
file_sym_add(mrb_state *mrb, const char *name, size_t len)
{
    mrb_sym   i = mrb->symidx + 1, prev;
    size_t    capa, n, ilen = 0;
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

    for (n = len; ilen == 0 || n != 0; n >>= 7) {
        ilen++;
    }

    p = mrb_malloc(mrb, ilen + len + 1);

    for (n = len, ilen = 0; ilen == 0 || n != 0; n >>= 7) {
        p[ilen++] = (char) ((n & 0x7f) | (n >> 7 != 0 ? 0x80 : 0));
    }
    memcpy(p + ilen, name, len);
    p[ilen + len] = '\0';

    mrb->symflags[i >> 3] &= ~(1 << (i & 7));   /* not a literal */
    mrb->symtbl[i] = p;

    prev = mrb->symhash[hash];
    mrb->symlink[i] = prev == 0 ? 0 : (i - prev > 0xff ? 0xff : i - prev);
    mrb->symhash[hash] = mrb->symidx = i;

    return i;
}


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
            index = file_sym_add(mrb, name, len);
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

#else

/* mruby 4.0: the library's own lookup (its table is not ours to add to) */

struct mrb_file_syms_s {
    int  unused;
};


mrb_file_syms *
mrb_file_syms_new(void)
{
    return calloc(1, sizeof(mrb_file_syms));
}


void
mrb_file_syms_free(mrb_file_syms *fs)
{
    free(fs);
}


mrb_sym
mrb_file_sym(mrb_state *mrb, mrb_file_syms *fs, const char *name)
{
    return mrb_intern_cstr(mrb, name);
}

#endif

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
