/*
 * The top-level state a request run must leave as it found it (see
 * mrb_toplevel.h for what is put back and what is not).
 *
 * Most runs change none of it, so the check after a run must cost next to
 * nothing: the sizes of every recorded table and the frozen flags.  The
 * values of the constant and method tables are compared (a memcmp each
 * against a copy, ~830 instructions of nginx's hello world: bench/
 * callgrind.py nginx cache, 2026-11-24) only after a run whose bytecode
 * could change them (mrb_toplevel_scan.c).  Only a
 * run that changed something pays for the names and values to be
 * compared one by one, and that part runs under mrb_protect_error: it
 * may raise (out of memory), and a raise there, with no handler, would
 * abort the process.
 */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/error.h>
#include <mruby/proc.h>
#include <mruby/variable.h>
#include "mrb_errbuf.h"
#include "mrb_interp_core.h"
#include "mrb_mruby_version.h"
#include "mrb_toplevel.h"

/*
 * mruby's instance variable table (src/variable.c: globals, constants
 * and instance variables) and method table (src/class.c) share this head.
 * In 3.1.0 and 3.3.0 both are alloc 8-byte entries (mrb_value; union
 * mt_ptr) followed by alloc keys, hashed: an iv key is a symbol,
 * IV_DELETED when removed; a method key is the symbol shifted left by 2
 * over two flag bits, 0 or 1 when free.  4.0.0 keeps the iv table's
 * layout with its live keys first (MRB_IV_COMPACT), may keep the main
 * object's variables in a shape instead (read through mrb_iv_foreach),
 * and chains method tables (MRB_MT_CHAIN: mrb_mt_tbl, whose entries hold
 * their keys).  Read only here.  Another mruby may lay them out
 * otherwise: check both files before adding a release to
 * mrb_mruby_version.h.
 */

struct tl_tbl {
    int      size;
    int      alloc;
    void    *ptr;
};

#define TL_ENTRY      8
#define IV_DELETED    (1UL << 31)

/* word boxing's 8-byte mrb_value (Debian's mruby); mt_ptr is a pointer */
_Static_assert(sizeof(mrb_value) == TL_ENTRY,
               "an iv table entry is not an 8-byte mrb_value");
_Static_assert(sizeof(void *) == TL_ENTRY,
               "a method table entry (union mt_ptr) is not 8 bytes");
_Static_assert(sizeof(mrb_sym) == sizeof(uint32_t),
               "table keys are not 32-bit symbols");

#ifdef MRB_MT_CHAIN
/* an entry: its function or Proc, key and flags */
#define TL_MT_ENTRY      sizeof(mrb_mt_entry)
#define TL_MT_ALLOC(a)   ((a) & ~(MRB_MT_READONLY_BIT | MRB_MT_FROZEN_BIT))
_Static_assert(offsetof(mrb_mt_tbl, size) == offsetof(struct tl_tbl, size)
               && offsetof(mrb_mt_tbl, alloc) == offsetof(struct tl_tbl, alloc)
               && offsetof(mrb_mt_tbl, ptr) == offsetof(struct tl_tbl, ptr),
               "mrb_mt_tbl does not start as an iv table");
#else
#define TL_MT_ENTRY      TL_ENTRY
#define TL_MT_ALLOC(a)   (a)
#endif

typedef enum {
    TL_GLOBALS,     /* names: added ones removed */
    TL_IVARS,       /* names: added ones removed */
    TL_CONSTANTS,   /* names and values */
    TL_METHODS      /* names and methods */
} tl_kind;

/* One recorded table. */
typedef struct {
    tl_kind          kind;
    void           **head;      /* where the table's head is kept */
    struct RClass   *owner;     /* TL_CONSTANTS, TL_METHODS */
    mrb_value        self;      /* TL_IVARS, TL_CONSTANTS: whose ivs */

    /* the table when last recorded (TL_CONSTANTS, TL_METHODS): the same
     * address, size and values (not keys: a key changes only with the
     * size, or with a value), nothing changed */
    struct tl_tbl   *tbl;
    void            *ptr;
    int              alloc;
    unsigned char   *copy;
    size_t           copy_cap;

    /* what it held, sorted by name */
    int              size;
    int              n;
    mrb_sym         *syms;
    mrb_value       *values;    /* TL_CONSTANTS */
    mrb_method_t    *methods;   /* TL_METHODS */
} tl_table;

#define TL_FROZEN_MAX  10
#define TL_BATCH       64     /* names removed at a time */

struct mrb_toplevel_s {
    tl_table         tables[6];
    int              ntables;
    struct RBasic   *frozen_obj[TL_FROZEN_MAX];  /* unfrozen after a run */
    int              nfrozen;
    mrb_value        keep;        /* the recorded values and procs, for GC */
    unsigned         removed:1;   /* a run removed a global */
    unsigned long    restores;

    /* which runs compare the tables' values (mrb_toplevel_run_begin) */
    mrb_toplevel_names  *names;
    unsigned         always:1;    /* after every run, from now on */
    unsigned         dirty:1;     /* a run that could change them ended */
    unsigned         full:1;      /* this restore compares the values */
    unsigned         changing;    /* such runs begun and not ended */
    unsigned long    compares;    /* restores that compared the values */
};


static struct tl_tbl *
tl_current(mrb_state *mrb, const tl_table *t)
{
    return *t->head;
}


#ifdef MRB_FL_OBJ_SHAPED
static int
tl_count_iv(mrb_state *mrb, mrb_sym sym, mrb_value v, void *arg)
{
    (*(int *) arg)++;
    return 0;
}
#endif


static int
tl_size(mrb_state *mrb, const tl_table *t)
{
    const struct tl_tbl  *h = *t->head;

#ifdef MRB_FL_OBJ_SHAPED
    int                   n = 0;

    /* the main object's variables may be in a shape, not a table */
    if (t->kind == TL_IVARS) {
        mrb_iv_foreach(mrb, t->self, tl_count_iv, &n);
        return n;
    }
#endif

    return h != NULL ? h->size : 0;
}


/* The slots of h, and the bytes of its entries. */
static int
tl_alloc(tl_kind kind, const struct tl_tbl *h)
{
    return kind == TL_METHODS ? TL_MT_ALLOC(h->alloc) : h->alloc;
}


static size_t
tl_entries_len(tl_kind kind, const struct tl_tbl *h)
{
    return (size_t) tl_alloc(kind, h)
           * (kind == TL_METHODS ? TL_MT_ENTRY : TL_ENTRY);
}


/* Where t's table head is kept: the pointer field of mrb or its owner. */
static void **
tl_head(mrb_state *mrb, const tl_table *t)
{
    switch (t->kind) {
    case TL_GLOBALS:
        return (void **) &mrb->globals;
    case TL_IVARS:
        return (void **) &mrb_obj_ptr(t->self)->iv;
    case TL_CONSTANTS:
        return (void **) &t->owner->iv;
    default:
        return (void **) &t->owner->mt;
    }
}


static mrb_sym
tl_key_sym(tl_kind kind, uint32_t key)
{
    if (kind == TL_METHODS) {
        return (mrb_sym) (key >> 2);
    }

    return (key & ~((uint32_t) IV_DELETED)) != 0 ? (mrb_sym) key : 0;
}


static int
sym_cmp(const void *a, const void *b)
{
    mrb_sym  x = *(const mrb_sym *) a, y = *(const mrb_sym *) b;

    return (x > y) - (x < y);
}


/*
 * Calls fn with each name t's table holds now (undefined methods included)
 * until it returns nonzero.  layers: of a method table of mruby 4.0, the
 * names of the read-only tables under the writable one too (what the
 * class has); otherwise those of the writable one (what runs change).
 */
typedef int (*tl_name_fn)(mrb_state *mrb, mrb_sym sym, void *arg);

#ifdef MRB_FL_OBJ_SHAPED
typedef struct {
    tl_name_fn   fn;
    void        *arg;
} tl_iv_walk;


static int
tl_iv_name(mrb_state *mrb, mrb_sym sym, mrb_value v, void *arg)
{
    tl_iv_walk  *w = arg;

    return w->fn(mrb, sym, w->arg);
}
#endif


static void
tl_each_name(mrb_state *mrb, const tl_table *t, int layers, tl_name_fn fn,
    void *arg)
{
    const struct tl_tbl  *h = *t->head;
    const uint32_t       *keys;
    mrb_sym               sym;
    int                   i, n;

#ifdef MRB_FL_OBJ_SHAPED
    tl_iv_walk            w = { fn, arg };

    if (t->kind == TL_IVARS) {
        mrb_iv_foreach(mrb, t->self, tl_iv_name, &w);
        return;
    }
#endif

#ifdef MRB_MT_CHAIN
    const mrb_mt_tbl     *mt;

    if (t->kind == TL_METHODS) {
        for (mt = *t->head; mt != NULL; mt = layers ? mt->next : NULL) {
            for (i = 0; i < mt->size; i++) {
                /* a removed method's entry hides the layers' under it */
                if (!MRB_MT_REMOVED_P(mt->ptr[i])
                    && fn(mrb, mt->ptr[i].key, arg) != 0)
                {
                    return;
                }
            }
        }
        return;
    }
#endif

    if (h == NULL || h->alloc == 0) {
        return;
    }

    keys = (const uint32_t *) ((const char *) h->ptr
                               + (size_t) h->alloc * TL_ENTRY);
#ifdef MRB_IV_COMPACT
    n = t->kind == TL_METHODS ? h->alloc : h->size;
#else
    n = h->alloc;
#endif

    for (i = 0; i < n; i++) {
        sym = tl_key_sym(t->kind, keys[i]);
        if (sym != 0 && fn(mrb, sym, arg) != 0) {
            return;
        }
    }
}


/* Collecting names: into syms, at most max, those pick takes. */
typedef struct {
    const tl_table  *t;
    int            (*pick)(mrb_state *mrb, const tl_table *t, mrb_sym sym);
    mrb_sym         *syms;
    int              n;
    int              max;
} tl_collect;


static int
tl_collect_name(mrb_state *mrb, mrb_sym sym, void *arg)
{
    tl_collect  *c = arg;

    if (c->pick == NULL || c->pick(mrb, c->t, sym)) {
        if (c->syms != NULL) {
            c->syms[c->n] = sym;
        }
        c->n++;
    }

    return c->n == c->max;
}


/* The names of t that pick takes (all: pick NULL), at most max, into
 * syms (or only counted: syms NULL); returns how many. */
static int
tl_names(mrb_state *mrb, const tl_table *t, int layers,
    int (*pick)(mrb_state *mrb, const tl_table *t, mrb_sym sym),
    mrb_sym *syms, int max)
{
    tl_collect  c = { t, pick, syms, 0, max };

    tl_each_name(mrb, t, layers, tl_collect_name, &c);
    return c.n;
}


static int
tl_has(const tl_table *t, mrb_sym sym)
{
    return t->n > 0
           && bsearch(&sym, t->syms, (size_t) t->n, sizeof(mrb_sym),
                      sym_cmp) != NULL;
}


/* Copies the bytes of t's table as they are now; -1 when out of memory
 * (then the table never looks unchanged: every run compares it by name). */
static int
tl_copy_bytes(mrb_state *mrb, tl_table *t)
{
    struct tl_tbl  *h = tl_current(mrb, t);
    size_t          len;
    unsigned char  *copy;

    t->tbl = h;
    t->ptr = h != NULL ? h->ptr : NULL;
    t->alloc = h != NULL ? h->alloc : 0;

    t->size = h != NULL ? h->size : 0;
    len = h != NULL ? tl_entries_len(t->kind, h) : 0;

    if (len > t->copy_cap) {
        copy = realloc(t->copy, len);
        if (copy == NULL) {
            t->tbl = (struct tl_tbl *) &t->tbl;   /* matches no table */
            return -1;
        }
        t->copy = copy;
        t->copy_cap = len;
    }

    if (len != 0) {
        memcpy(t->copy, t->ptr, len);
    }

    return 0;
}


static int
tl_bytes_unchanged(mrb_state *mrb, const tl_table *t)
{
    struct tl_tbl  *h = tl_current(mrb, t);

    if (h != t->tbl) {
        return 0;
    }

    /* a name added or removed changes the size; a value reassigned (or a
     * name replaced by another in the same run) changes the values */
    return h == NULL
           || (h->ptr == t->ptr && h->alloc == t->alloc && h->size == t->size
               && memcmp(h->ptr, t->copy, tl_entries_len(t->kind, h)) == 0);
}


static int
tl_table_record(mrb_state *mrb, mrb_toplevel *tl, tl_table *t)
{
    struct RClass  *c;
    int             i, n, count;

    t->size = tl_size(mrb, t);
    t->n = 0;

    count = tl_names(mrb, t, 1, NULL, NULL, -1);
    if (count == 0) {
        return t->kind >= TL_CONSTANTS ? tl_copy_bytes(mrb, t) : 0;
    }

    t->syms = malloc(sizeof(mrb_sym) * (size_t) count);
    if (t->syms == NULL) {
        return -1;
    }

    n = tl_names(mrb, t, 1, NULL, t->syms, count);
    qsort(t->syms, (size_t) n, sizeof(mrb_sym), sym_cmp);

    /* once each (mruby 4.0: a method of a read-only table and the
     * writable one's that overrides it) */
    for (i = 0; i < n; i++) {
        if (t->n == 0 || t->syms[t->n - 1] != t->syms[i]) {
            t->syms[t->n++] = t->syms[i];
        }
    }

    if (t->kind == TL_CONSTANTS) {
        t->values = malloc(sizeof(mrb_value) * (size_t) t->n);
        if (t->values == NULL) {
            return -1;
        }

        for (i = 0; i < t->n; i++) {
            t->values[i] = mrb_iv_get(mrb, t->self, t->syms[i]);
            mrb_ary_push(mrb, tl->keep, t->values[i]);
        }

    } else if (t->kind == TL_METHODS) {
        t->methods = malloc(sizeof(mrb_method_t) * (size_t) t->n);
        if (t->methods == NULL) {
            return -1;
        }

        for (i = 0; i < t->n; i++) {
            c = t->owner;
            t->methods[i] = mrb_method_search_vm(mrb, &c, t->syms[i]);
            if (!MRB_METHOD_FUNC_P(t->methods[i])
                && MRB_METHOD_PROC(t->methods[i]) != NULL)
            {
                mrb_ary_push(mrb, tl->keep,
                             mrb_obj_value((struct RProc *)
                                           MRB_METHOD_PROC(t->methods[i])));
            }
        }
    }

    return t->kind >= TL_CONSTANTS ? tl_copy_bytes(mrb, t) : 0;
}


/*
 * Whether sym names a match global: $~ and what is read from it ($&, $`,
 * $', $+, $1, $2, ...).  mruby reads them as plain globals (OP_GETGV), so
 * the library's Regexp sets them in the global table (mrb_regexp.c); they
 * belong to the run that matched all the same.
 */
static int
tl_sym_is_match_global(mrb_state *mrb, mrb_sym sym)
{
    mrb_int      len, i;
    const char  *name = mrb_sym_name_len(mrb, sym, &len);

    if (name == NULL || len < 2 || name[0] != '$') {
        return 0;
    }

    if (len == 2 && memchr("~&`'+", name[1], 5) != NULL) {
        return 1;
    }

    for (i = 1; i < len; i++) {
        if (name[i] < '0' || name[i] > '9') {
            return 0;
        }
    }

    return name[1] != '0';
}


/*
 * Removes the match globals before the globals are recorded, so that none
 * is ever a sealed global whose new value would stay: whatever a startup
 * script matched or assigned, a run that sets one adds it, and like every
 * added global it is removed when the run ends and taken aside while the
 * run waits.  Collected first, removed after, a batch at a time.
 */
static int
tl_pick_match_global(mrb_state *mrb, const tl_table *t, mrb_sym sym)
{
    return tl_sym_is_match_global(mrb, sym);
}


static void
tl_drop_match_globals(mrb_state *mrb)
{
    tl_table  globals = { .kind = TL_GLOBALS, .head = (void **) &mrb->globals };
    mrb_sym   found[TL_BATCH];
    int       i, n;

    do {
        n = tl_names(mrb, &globals, 0, tl_pick_match_global, found, TL_BATCH);

        for (i = 0; i < n; i++) {
            mrb_gv_remove(mrb, found[i]);
        }
    } while (n == TL_BATCH);
}


static void
tl_add_frozen(mrb_toplevel *tl, struct RBasic *obj)
{
    struct RBasic  *sclass = (struct RBasic *) obj->c;

    /* only what is not frozen now gets unfrozen later */
    if (!MRB_FROZEN_P(obj) && tl->nfrozen < TL_FROZEN_MAX) {
        tl->frozen_obj[tl->nfrozen++] = obj;
    }

    /* freeze also freezes an object's singleton class */
    if (sclass != NULL && sclass->tt == MRB_TT_SCLASS && !MRB_FROZEN_P(sclass)
        && tl->nfrozen < TL_FROZEN_MAX)
    {
        tl->frozen_obj[tl->nfrozen++] = sclass;
    }
}


static tl_table *
tl_add(mrb_state *mrb, mrb_toplevel *tl, tl_kind kind, struct RClass *owner,
    mrb_value self)
{
    tl_table  *t = &tl->tables[tl->ntables++];

    t->kind = kind;
    t->owner = owner;
    t->self = self;
    t->head = tl_head(mrb, t);
    return t;
}


#ifndef MRB_IV_COMPACT
/*
 * Object's constants spread over twice the slots.  3.1 and 3.3 find a
 * constant by linear probing from a weak hash of its symbol, and grow the
 * table only when it is full: Object's, with the library loaded, held 104
 * names in 128 slots, and each lookup of Regexp (every regexp literal
 * asks for it) probed ~40 slots, ~400 instructions (bench/callgrind_lib.py
 * router-mruby, 2026-11-27: 144,119 instructions a request, 140,758 with
 * the table at 256).  Placeholder constants fill every free slot, so that
 * the next one doubles the table (mruby rehashes only the live names),
 * then go: their removed slots and the names leave half of it free.
 */
#define TL_SPREAD_NAME  "MrbConstantsSpread%d"

static mrb_value
tl_constants_spread_body(mrb_state *mrb, void *arg)
{
    mrb_value  object = mrb_obj_value(mrb->object_class);
    int        i, n = *(int *) arg;
    char       name[sizeof(TL_SPREAD_NAME) + 12];

    for (i = 0; i < n; i++) {
        snprintf(name, sizeof(name), TL_SPREAD_NAME, i);
        mrb_define_const(mrb, mrb->object_class, name, mrb_nil_value());
    }

    for (i = 0; i < n; i++) {
        snprintf(name, sizeof(name), TL_SPREAD_NAME, i);
        mrb_const_remove(mrb, object, mrb_intern_cstr(mrb, name));
    }

    return mrb_nil_value();
}


/* When more than three quarters of its slots are taken (a live or a
 * removed name); out of memory leaves it as it is. */
static void
tl_constants_spread(mrb_state *mrb)
{
    const struct tl_tbl  *h = (const struct tl_tbl *) mrb->object_class->iv;
    const uint32_t       *keys;
    int                   i, taken, n;
    mrb_bool              failed;

    if (h == NULL || h->alloc == 0) {
        return;
    }

    keys = (const uint32_t *) ((const char *) h->ptr
                               + (size_t) h->alloc * TL_ENTRY);
    for (i = 0, taken = 0; i < h->alloc; i++) {
        taken += keys[i] != 0;
    }

    if (taken * 4 <= h->alloc * 3) {
        return;
    }

    n = h->alloc - h->size + 1;
    (void) mrb_protect_error(mrb, tl_constants_spread_body, &n, &failed);
    mrb->exc = NULL;
}
#endif


mrb_toplevel *
mrb_toplevel_record(mrb_state *mrb, struct RClass *server_class, int always)
{
    mrb_toplevel   *tl;
    struct RClass  *server_meta;
    int             i, ai;

    tl = calloc(1, sizeof(mrb_toplevel));
    if (tl == NULL) {
        return NULL;
    }

#ifndef MRB_IV_COMPACT
    tl_constants_spread(mrb);
#endif

    tl->always = always != 0;
    tl->names = mrb_toplevel_names_new(mrb, 0);
    if (tl->names == NULL) {
        free(tl);
        return NULL;
    }

    ai = mrb_gc_arena_save(mrb);
    tl->keep = mrb_ary_new(mrb);
    mrb_gc_register(mrb, tl->keep);

    server_meta = mrb_class_ptr(mrb_singleton_class(mrb,
                                    mrb_obj_value(server_class)));

    tl_drop_match_globals(mrb);

    tl_add(mrb, tl, TL_GLOBALS, NULL, mrb_nil_value());
    tl_add(mrb, tl, TL_IVARS, NULL, mrb_obj_value(mrb->top_self));
    tl_add(mrb, tl, TL_CONSTANTS, mrb->object_class,
           mrb_obj_value(mrb->object_class));
    tl_add(mrb, tl, TL_CONSTANTS, server_class, mrb_obj_value(server_class));
    tl_add(mrb, tl, TL_METHODS, mrb->kernel_module, mrb_nil_value());
    tl_add(mrb, tl, TL_METHODS, server_meta, mrb_nil_value());

    for (i = 0; i < tl->ntables; i++) {
        if (tl_table_record(mrb, tl, &tl->tables[i]) != 0) {
            mrb_gc_arena_restore(mrb, ai);
            mrb_toplevel_free(mrb, tl);
            return NULL;
        }
    }

    tl_add_frozen(tl, (struct RBasic *) mrb->top_self);
    tl_add_frozen(tl, (struct RBasic *) mrb->object_class);
    tl_add_frozen(tl, (struct RBasic *) mrb->kernel_module);
    tl_add_frozen(tl, (struct RBasic *) server_class);

    mrb_gc_arena_restore(mrb, ai);
    return tl;
}


void
mrb_toplevel_free(mrb_state *mrb, mrb_toplevel *tl)
{
    int  i;

    if (tl == NULL) {
        return;
    }

    if (mrb_array_p(tl->keep)) {
        mrb_gc_unregister(mrb, tl->keep);
    }

    mrb_toplevel_names_free(tl->names);

    for (i = 0; i < tl->ntables; i++) {
        free(tl->tables[i].copy);
        free(tl->tables[i].syms);
        free(tl->tables[i].values);
        free(tl->tables[i].methods);
    }

    free(tl);
}


/* What every run's end checks: every table's size. */
static int
tl_sizes_unchanged(mrb_state *mrb, const mrb_toplevel *tl)
{
    const tl_table  *t, *end = tl->tables + tl->ntables;

    for (t = tl->tables; t < end; t++) {
        if (tl_size(mrb, t) != t->size) {
            return 0;
        }
    }

    return !tl->removed;
}


/* ... and after a run that could change them, the frozen flags and the
 * values of the constant and method tables. */
static int
tl_values_unchanged(mrb_state *mrb, const mrb_toplevel *tl)
{
    const tl_table  *t, *end = tl->tables + tl->ntables;
    int              i;

    for (i = 0; i < tl->nfrozen; i++) {
        if (MRB_FROZEN_P(tl->frozen_obj[i])) {
            return 0;
        }
    }

    for (t = tl->tables; t < end; t++) {
        if (t->kind >= TL_CONSTANTS && !tl_bytes_unchanged(mrb, t)) {
            return 0;
        }
    }

    return 1;
}


static int
tl_pick_added(mrb_state *mrb, const tl_table *t, mrb_sym sym)
{
    return !tl_has(t, sym);
}


/* The names of t's table that were not there when it was recorded. */
static int
tl_added(mrb_state *mrb, const tl_table *t, mrb_sym *added, int max)
{
    return tl_names(mrb, t, 0, tl_pick_added, added, max);
}


/* Removes what was added; collected first, removed after, so that the
 * table does not change under the walk; a batch at a time. */
static void
tl_remove_added(mrb_state *mrb, tl_table *t)
{
    mrb_sym  added[TL_BATCH];
    int      i, n;

    do {
        n = tl_added(mrb, t, added, TL_BATCH);

        for (i = 0; i < n; i++) {
            switch (t->kind) {
            case TL_GLOBALS:
                mrb_gv_remove(mrb, added[i]);
                break;
            case TL_METHODS:
                mrb_remove_method(mrb, t->owner, added[i]);
                break;
            default:
                mrb_iv_remove(mrb, t->self, added[i]);
            }
        }
    } while (n == TL_BATCH);
}


/* Whether two methods are the same (4.0's mrb_method_t is a struct whose
 * padding is not ours to compare). */
static int
tl_method_eq(mrb_method_t a, mrb_method_t b)
{
#ifdef MRB_MT_CHAIN
    return a.flags == b.flags && a.as.proc == b.as.proc;
#else
    return memcmp(&a, &b, sizeof(mrb_method_t)) == 0;
#endif
}


static int
tl_sym_is_variable(mrb_state *mrb, mrb_sym sym)
{
    mrb_int      len;
    const char  *name = mrb_sym_name_len(mrb, sym, &len);

    return name != NULL && len > 0 && name[0] == '@';
}


static void
tl_restore_recorded(mrb_state *mrb, tl_table *t)
{
    struct RClass  *c;
    mrb_method_t    m;
    int             i;

    for (i = 0; i < t->n; i++) {
        if (t->kind == TL_CONSTANTS) {
            /* an instance or class variable keeps its new value, as a
             * global does: only a run that could change constants has
             * its values compared */
            if (tl_sym_is_variable(mrb, t->syms[i])) {
                continue;
            }

            if (!mrb_iv_defined(mrb, t->self, t->syms[i])
                || !mrb_obj_eq(mrb, mrb_iv_get(mrb, t->self, t->syms[i]),
                               t->values[i]))
            {
                mrb_iv_set(mrb, t->self, t->syms[i], t->values[i]);
            }

        } else {
            c = t->owner;
            m = mrb_method_search_vm(mrb, &c, t->syms[i]);

            if (c != t->owner || !tl_method_eq(m, t->methods[i])) {
                mrb_define_method_raw(mrb, t->owner, t->syms[i],
                                      t->methods[i]);
            }
        }
    }
}


/* Whether a restore leaves the values of t (TL_CONSTANTS, TL_METHODS)
 * alone: after a run that could not change them, only the size says (the
 * globals a regexp match sets bring every such run to the restore). */
static int
tl_values_untouched(mrb_state *mrb, const mrb_toplevel *tl, const tl_table *t)
{
    return (!tl->full && tl_size(mrb, t) == t->size)
           || tl_bytes_unchanged(mrb, t);
}


static mrb_value
tl_restore_body(mrb_state *mrb, void *arg)
{
    mrb_toplevel  *tl = arg;
    tl_table      *t;
    int            i;

    for (i = 0; i < tl->nfrozen; i++) {
        MRB_UNSET_FROZEN_FLAG(tl->frozen_obj[i]);
    }

    for (i = 0; i < tl->ntables; i++) {
        t = &tl->tables[i];

        if (t->kind >= TL_CONSTANTS && tl_values_untouched(mrb, tl, t)) {
            continue;
        }

        tl_remove_added(mrb, t);

        if (t->kind >= TL_CONSTANTS) {
            tl_restore_recorded(mrb, t);
            tl_copy_bytes(mrb, t);
        }
    }

    tl->removed = 0;
    return mrb_nil_value();
}


static MRB_NOINLINE int
tl_restore(mrb_state *mrb, mrb_toplevel *tl, char *err, size_t errlen)
{
    mrb_bool   failed;
    mrb_value  exc;

    tl->restores++;

    exc = mrb_protect_error(mrb, tl_restore_body, tl, &failed);
    if (failed) {
        mrb_error_format(mrb, exc, err, errlen);
        mrb->exc = NULL;
        return -1;
    }

    return 0;
}


int
mrb_toplevel_restore(mrb_state *mrb, mrb_toplevel *tl, char *err,
    size_t errlen)
{
    if (tl == NULL) {
        return 0;
    }

    tl->full = tl->always || tl->dirty || tl->changing != 0;
    tl->dirty = 0;

    if (tl->full) {
        tl->compares++;
        if (tl_sizes_unchanged(mrb, tl) && tl_values_unchanged(mrb, tl)) {
            return 0;
        }

    } else if (tl_sizes_unchanged(mrb, tl)) {
        return 0;
    }

    return tl_restore(mrb, tl, err, errlen);
}


int
mrb_toplevel_run_begin(mrb_toplevel *tl, const struct RProc *proc)
{
    int  what;

    if (tl == NULL) {
        return 0;
    }

    what = mrb_toplevel_scan(tl->names, proc);
    if (what != 0) {
        tl->changing++;
    }

    return what;
}


/*
 * A run that waits is counted from its beginning to its end: taking its
 * changes aside when another run starts compares the values, and so do
 * the ends of the runs meanwhile and its own end.
 */
void
mrb_toplevel_run_end(mrb_toplevel *tl, int what)
{
    if (tl == NULL || what == 0) {
        return;
    }

    tl->changing--;
    tl->dirty = 1;

    if (what & MRB_TOPLEVEL_LEAVES) {
        tl->always = 1;
    }
}


/*
 * Runs that wait (mrb_wait.c).  While one is suspended others run in the
 * interpreter, and each of their ends puts the tables back as recorded:
 * what the waiting run set would be gone when it resumes, and seen by
 * the others meanwhile.  So when another run starts, the waiting run's
 * changes (what a restore would undo) are taken into an Array and the
 * tables put back; before it resumes they are set again.  The Array,
 * kept by the caller, holds the values for the GC:
 *
 *   [frozen, code, name, value, code, name, value, ...]
 *
 * frozen: a bit per tl->frozen_obj that was frozen; code: the table's
 * index << 3 | TL_TAKE_* (with mruby 4.0 a method's flags from bit
 * TL_TAKE_FLAGS); name: a Symbol; value: the global, instance
 * variable or constant, or the method (its Proc; a C function's address
 * as a cptr; nil: undefined), or nil with TL_TAKE_REMOVED (a recorded
 * constant or method the run removed).
 */
#define TL_TAKE_REMOVED  1
#define TL_TAKE_FUNC     2
#define TL_TAKE_NOARG    4
#define TL_TAKE_SHIFT    3
#define TL_TAKE_TABLES   0xff        /* the index, after TL_TAKE_SHIFT */
#define TL_TAKE_FLAGS    16          /* 4.0: the method's flags, from bit 16 */


static void
tl_take_push(mrb_state *mrb, mrb_value aside, mrb_int code, mrb_sym sym,
    mrb_value value)
{
    mrb_ary_push(mrb, aside, mrb_fixnum_value(code));
    mrb_ary_push(mrb, aside, mrb_symbol_value(sym));
    mrb_ary_push(mrb, aside, value);
}


typedef struct {
    mrb_sym  sym;
    int      found;
} tl_find;


static int
tl_find_sym(mrb_state *mrb, mrb_sym sym, void *arg)
{
    tl_find  *f = arg;

    f->found = sym == f->sym;
    return f->found;
}


/* Whether t's own table holds sym now (undefined methods included). */
static int
tl_holds(mrb_state *mrb, const tl_table *t, mrb_sym sym)
{
    tl_find  f = { sym, 0 };

    tl_each_name(mrb, t, 1, tl_find_sym, &f);
    return f.found;
}


/* The method sym of t's class as it is now: into aside, or removed. */
static void
tl_take_method(mrb_state *mrb, mrb_value aside, mrb_int code,
    const tl_table *t,
    mrb_sym sym)
{
    struct RClass  *c = t->owner;
    mrb_method_t    m = mrb_method_search_vm(mrb, &c, sym);
    mrb_value       value;

    if (c != t->owner || (MRB_METHOD_UNDEF_P(m) && !tl_holds(mrb, t, sym))) {
        tl_take_push(mrb, aside, code | TL_TAKE_REMOVED, sym,
                     mrb_nil_value());
        return;
    }

#ifdef MRB_MT_CHAIN
    code |= (mrb_int) m.flags << TL_TAKE_FLAGS;
#else
    if (MRB_METHOD_NOARG_P(m)) {
        code |= TL_TAKE_NOARG;
    }
#endif

    if (MRB_METHOD_FUNC_P(m)) {
        code |= TL_TAKE_FUNC;
        value = mrb_cptr_value(mrb, (void *) MRB_METHOD_FUNC(m));

    } else if (MRB_METHOD_PROC(m) != NULL) {
        value = mrb_obj_value((struct RProc *) MRB_METHOD_PROC(m));

    } else {
        value = mrb_nil_value();
    }

    tl_take_push(mrb, aside, code, sym, value);
}


typedef struct {
    mrb_value        aside;
    mrb_int          code;
    const tl_table  *t;
} tl_take_walk;


static int
tl_take_name(mrb_state *mrb, mrb_sym sym, void *arg)
{
    tl_take_walk    *w = arg;
    const tl_table  *t = w->t;

    if (tl_has(t, sym)) {
        return 0;
    }

    switch (t->kind) {
    case TL_GLOBALS:
        tl_take_push(mrb, w->aside, w->code, sym, mrb_gv_get(mrb, sym));
        break;
    case TL_METHODS:
        tl_take_method(mrb, w->aside, w->code, t, sym);
        break;
    default:
        tl_take_push(mrb, w->aside, w->code, sym,
                     mrb_iv_get(mrb, t->self, sym));
    }

    return 0;
}


/* The names of t added since it was recorded, with their values (pushing
 * allocates, and the GC may run: it never moves a table). */
static void
tl_take_added(mrb_state *mrb, mrb_value aside, mrb_int code,
    const tl_table *t)
{
    tl_take_walk  w = { aside, code, t };

    tl_each_name(mrb, t, 0, tl_take_name, &w);
}


/* The recorded constants and methods of t the run reassigned or removed
 * (instance and class variables keep their new values, as globals do). */
static void
tl_take_recorded(mrb_state *mrb, mrb_value aside, mrb_int code,
    const tl_table *t)
{
    struct RClass  *c;
    mrb_method_t    m;
    int             i;

    for (i = 0; i < t->n; i++) {
        if (t->kind == TL_METHODS) {
            c = t->owner;
            m = mrb_method_search_vm(mrb, &c, t->syms[i]);
            if (c != t->owner || !tl_method_eq(m, t->methods[i])) {
                tl_take_method(mrb, aside, code, t, t->syms[i]);
            }

        } else if (tl_sym_is_variable(mrb, t->syms[i])) {
            continue;

        } else if (!mrb_iv_defined(mrb, t->self, t->syms[i])) {
            tl_take_push(mrb, aside, code | TL_TAKE_REMOVED, t->syms[i],
                         mrb_nil_value());

        } else if (!mrb_obj_eq(mrb, mrb_iv_get(mrb, t->self, t->syms[i]),
                               t->values[i]))
        {
            tl_take_push(mrb, aside, code, t->syms[i],
                         mrb_iv_get(mrb, t->self, t->syms[i]));
        }
    }
}


/* What a restore now would undo, as an Array (it changes nothing). */
static mrb_value
tl_take_body(mrb_state *mrb, void *arg)
{
    mrb_toplevel  *tl = arg;
    tl_table      *t;
    mrb_value      aside = mrb_ary_new(mrb);
    mrb_int        frozen = 0;
    int            i;

    for (i = 0; i < tl->nfrozen; i++) {
        if (MRB_FROZEN_P(tl->frozen_obj[i])) {
            frozen |= (mrb_int) 1 << i;
        }
    }

    mrb_ary_push(mrb, aside, mrb_fixnum_value(frozen));

    for (i = 0; i < tl->ntables; i++) {
        t = &tl->tables[i];

        if (t->kind < TL_CONSTANTS) {
            tl_take_added(mrb, aside, i << TL_TAKE_SHIFT, t);

        } else if (!tl_values_untouched(mrb, tl, t)) {
            tl_take_added(mrb, aside, i << TL_TAKE_SHIFT, t);
            tl_take_recorded(mrb, aside, i << TL_TAKE_SHIFT, t);
        }
    }

    return aside;
}


/* mrb_toplevel_take once something changed: out of the hot path. */
static MRB_NOINLINE int
tl_take(mrb_state *mrb, mrb_toplevel *tl, mrb_value *aside, char *err,
    size_t errlen)
{
    char      restore_err[MRB_ERR_MSG_LEN];
    mrb_bool  failed;
    int       rc = 0;

    /* the message names the class only: formatting more allocates, and
     * this runs where nothing may raise (mrb_wait.c) */
    *aside = mrb_protect_error(mrb, tl_take_body, tl, &failed);
    if (failed) {
        snprintf(err, errlen, "%s taking aside what the run set",
                 mrb_obj_classname(mrb, *aside));
        rc = -1;
    }

    /* also when the take failed: the other runs must not see what the
     * run set (it is lost; the run is told when it resumes) */
    if (tl_restore(mrb, tl, restore_err, sizeof(restore_err)) != 0
        && rc == 0)
    {
        snprintf(err, errlen, "restoring the top-level state: %s",
                 restore_err);
    }

    return rc;
}


int
mrb_toplevel_take(mrb_state *mrb, mrb_toplevel *tl, mrb_value *aside,
    char *err, size_t errlen)
{
    err[0] = '\0';
    *aside = mrb_nil_value();

    if (tl == NULL) {
        return 0;
    }

    tl->full = tl->always || tl->dirty || tl->changing != 0;
    tl->dirty = 0;

    if (tl_sizes_unchanged(mrb, tl)
        && (!tl->full || tl_values_unchanged(mrb, tl)))
    {
        return 0;
    }

    return tl_take(mrb, tl, aside, err, errlen);
}


typedef struct {
    mrb_toplevel  *tl;
    mrb_value      aside;
} tl_put_back_args;


static mrb_value
tl_put_back_body(mrb_state *mrb, void *arg)
{
    tl_put_back_args  *a = arg;
    mrb_toplevel      *tl = a->tl;
    mrb_value          aside = a->aside;
    const tl_table    *t;
    mrb_method_t       m;
    mrb_value          value;
    mrb_sym            sym;
    mrb_int            i, code, frozen;

    for (i = 1; i + 2 < RARRAY_LEN(aside); i += 3) {
        code = mrb_fixnum(RARRAY_PTR(aside)[i]);
        sym = mrb_symbol(RARRAY_PTR(aside)[i + 1]);
        value = RARRAY_PTR(aside)[i + 2];
        t = &tl->tables[(code >> TL_TAKE_SHIFT) & TL_TAKE_TABLES];

        if (code & TL_TAKE_REMOVED) {
            if (!tl_holds(mrb, t, sym)) {
                continue;
            }
            if (t->kind == TL_METHODS) {
                mrb_remove_method(mrb, t->owner, sym);
            } else {
                mrb_iv_remove(mrb, t->self, sym);
            }
            continue;
        }

        switch (t->kind) {
        case TL_GLOBALS:
            mrb_gv_set(mrb, sym, value);
            break;

        case TL_METHODS:
            if (code & TL_TAKE_FUNC) {
                MRB_METHOD_FROM_FUNC(m, (mrb_func_t) mrb_cptr(value));
            } else {
                MRB_METHOD_FROM_PROC(m, mrb_nil_p(value)
                                        ? NULL : mrb_proc_ptr(value));
            }
#ifdef MRB_MT_CHAIN
            m.flags = (uint32_t) (code >> TL_TAKE_FLAGS);
#else
            if (code & TL_TAKE_NOARG) {
                MRB_METHOD_NOARG_SET(m);
            }
#endif
            mrb_define_method_raw(mrb, t->owner, sym, m);
            break;

        default:
            mrb_iv_set(mrb, t->self, sym, value);
        }
    }

    frozen = mrb_fixnum(RARRAY_PTR(aside)[0]);
    for (i = 0; i < tl->nfrozen; i++) {
        if (frozen & ((mrb_int) 1 << i)) {
            MRB_SET_FROZEN_FLAG(tl->frozen_obj[i]);
        }
    }

    return mrb_nil_value();
}


int
mrb_toplevel_put_back(mrb_state *mrb, mrb_toplevel *tl, mrb_value aside,
    mrb_value *exc)
{
    tl_put_back_args  a;
    mrb_bool          failed;

    if (tl == NULL || !mrb_array_p(aside)) {
        return 0;
    }

    a.tl = tl;
    a.aside = aside;
    *exc = mrb_protect_error(mrb, tl_put_back_body, &a, &failed);
    if (failed) {
        mrb->exc = NULL;
        return -1;
    }

    return 0;
}


void
mrb_toplevel_global_removed(mrb_toplevel *tl)
{
    if (tl != NULL) {
        tl->removed = 1;
    }
}


unsigned long
mrb_toplevel_restores(const mrb_toplevel *tl)
{
    return tl != NULL ? tl->restores : 0;
}


unsigned long
mrb_toplevel_compares(const mrb_toplevel *tl)
{
    return tl != NULL ? tl->compares : 0;
}
