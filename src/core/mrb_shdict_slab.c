/*
 * The allocator inside a shared dictionary zone.
 *
 * Memory is a row of 4 KB pages.  Entries up to SHD_SMALL_MAX bytes come
 * from small pages, each cut into chunks of one size class and kept on that
 * class's free list; larger entries take a run of whole pages.  Free pages
 * form maximal runs on one list, merged with their neighbours when freed.
 *
 * A small page whose chunks are all free stays with its class (the next
 * entry of that size is then cheap, which matters for entries created and
 * removed per request) until some allocation finds no free page: only then
 * are empty small pages given back (all at once; a count of them spares a
 * full zone the scan when there are none).
 */

#include <string.h>
#include "mrb_shdict_layout.h"

static const uint32_t shd_class_size[SHD_NCLASSES] = {
    64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048
};

#define shd_pages_of(z)     ((shd_page *) shd_ptr(z, (z)->pagedesc))
#define shd_page_off(z, i)  ((z)->pages + (shd_off) (i) * SHD_PAGE_SIZE)
#define shd_page_of(z, off) (((off) - (z)->pages) / SHD_PAGE_SIZE)


static int
shd_class_of(size_t size)
{
    int  i;

    for (i = 0; i < SHD_NCLASSES; i++) {
        if (size <= shd_class_size[i]) {
            return i;
        }
    }

    return -1;
}


/* Free runs: a doubly linked list of their first pages (index + 1). */

static void
shd_run_link(mrb_shdict_zone *z, uint32_t p, uint32_t n)
{
    shd_page  *pg = shd_pages_of(z);

    pg[p].npages = n;
    pg[p + n - 1].head = p;
    pg[p].prev = 0;
    pg[p].next = z->free_runs;

    if (z->free_runs != 0) {
        pg[z->free_runs - 1].prev = p + 1;
    }

    z->free_runs = p + 1;
}


static void
shd_run_unlink(mrb_shdict_zone *z, uint32_t p)
{
    shd_page  *pg = shd_pages_of(z);

    if (pg[p].prev != 0) {
        pg[pg[p].prev - 1].next = pg[p].next;

    } else {
        z->free_runs = pg[p].next;
    }

    if (pg[p].next != 0) {
        pg[pg[p].next - 1].prev = pg[p].prev;
    }
}


/* Takes n pages from the first run long enough; returns the first page's
 * index, or -1. */
static int64_t
shd_pages_alloc(mrb_shdict_zone *z, uint32_t n)
{
    uint32_t   r, p, rest;
    shd_page  *pg = shd_pages_of(z);

    for (r = z->free_runs; r != 0; r = pg[r - 1].next) {
        p = r - 1;

        if (pg[p].npages < n) {
            continue;
        }

        rest = pg[p].npages - n;
        shd_run_unlink(z, p);

        if (rest != 0) {
            shd_run_link(z, p + n, rest);
        }

        return p;
    }

    return -1;
}


/* Frees pages [p, p + n), merging with free runs on either side: runs are
 * maximal, so a free page right after a used one starts a run and a free
 * page right before one ends a run. */
static void
shd_pages_free(mrb_shdict_zone *z, uint32_t p, uint32_t n)
{
    uint32_t   i, r, h;
    shd_page  *pg = shd_pages_of(z);

    for (i = p; i < p + n; i++) {
        pg[i].kind = SHD_PAGE_FREE;
        pg[i].cls = 0;
        pg[i].used = 0;
    }

    r = p + n;

    if (r < z->npages && pg[r].kind == SHD_PAGE_FREE) {
        shd_run_unlink(z, r);
        n += pg[r].npages;
    }

    if (p > 0 && pg[p - 1].kind == SHD_PAGE_FREE) {
        h = pg[p - 1].head;
        shd_run_unlink(z, h);
        n += p - h;
        p = h;
    }

    shd_run_link(z, p, n);
}


/* Chunk free lists, doubly linked so that an empty page's chunks can be
 * taken out when the page is given back. */

static void
shd_chunk_push(mrb_shdict_zone *z, int cls, shd_off off)
{
    shd_chunk  *c = shd_ptr(z, off);

    c->tag = SHD_TAG_FREE;
    c->prev = 0;
    c->next = z->free_chunks[cls];

    if (c->next != 0) {
        ((shd_chunk *) shd_ptr(z, c->next))->prev = off;
    }

    z->free_chunks[cls] = off;
}


static void
shd_chunk_unlink(mrb_shdict_zone *z, int cls, shd_off off)
{
    shd_chunk  *c = shd_ptr(z, off);

    if (c->prev != 0) {
        ((shd_chunk *) shd_ptr(z, c->prev))->next = c->next;

    } else {
        z->free_chunks[cls] = c->next;
    }

    if (c->next != 0) {
        ((shd_chunk *) shd_ptr(z, c->next))->prev = c->prev;
    }
}


/* Gives the empty small pages back to the free runs; returns how many. */
static uint32_t
shd_reclaim_small(mrb_shdict_zone *z)
{
    int        cls;
    uint32_t   i, k, per, found;
    shd_off    base;
    shd_page  *pg = shd_pages_of(z);

    found = 0;

    for (i = 0; i < z->npages && z->empty_small != 0; i++) {
        if (pg[i].kind != SHD_PAGE_SMALL || pg[i].used != 0) {
            continue;
        }

        cls = pg[i].cls;
        per = SHD_PAGE_SIZE / shd_class_size[cls];
        base = shd_page_off(z, i);

        for (k = 0; k < per; k++) {
            shd_chunk_unlink(z, cls, base + k * shd_class_size[cls]);
        }

        shd_pages_free(z, i, 1);
        z->empty_small--;
        found++;
    }

    return found;
}


static int64_t
shd_pages_get(mrb_shdict_zone *z, uint32_t n)
{
    int64_t  p;

    p = shd_pages_alloc(z, n);

    if (p < 0 && z->empty_small != 0 && shd_reclaim_small(z) != 0) {
        p = shd_pages_alloc(z, n);
    }

    return p;
}


static void
shd_small_carve(mrb_shdict_zone *z, uint32_t p, int cls)
{
    uint32_t   k, per, csize;
    shd_off    base;
    shd_page  *pg = shd_pages_of(z);

    csize = shd_class_size[cls];
    per = SHD_PAGE_SIZE / csize;
    base = shd_page_off(z, p);

    pg[p].kind = SHD_PAGE_SMALL;
    pg[p].cls = (uint16_t) cls;
    pg[p].used = 0;
    z->empty_small++;

    /* pushed last to first, so the page is used from its start */
    for (k = per; k-- > 0; ) {
        shd_chunk_push(z, cls, base + k * csize);
    }
}


void
shd_slab_init(mrb_shdict_zone *z)
{
    memset(shd_pages_of(z), 0, (size_t) z->npages * sizeof(shd_page));
    memset(z->free_chunks, 0, sizeof(z->free_chunks));
    z->free_runs = 0;
    z->empty_small = 0;
    shd_run_link(z, 0, z->npages);
}


shd_off
shd_slab_alloc(mrb_shdict_zone *z, size_t size)
{
    int        cls;
    int64_t    p;
    uint32_t   i, n;
    shd_off    off;
    shd_page  *pg = shd_pages_of(z);

    if (size <= SHD_SMALL_MAX) {
        cls = shd_class_of(size);

        if (z->free_chunks[cls] == 0) {
            p = shd_pages_get(z, 1);

            if (p < 0) {
                return 0;
            }

            shd_small_carve(z, (uint32_t) p, cls);
        }

        off = z->free_chunks[cls];
        shd_chunk_unlink(z, cls, off);

        if (pg[shd_page_of(z, off)].used++ == 0) {
            z->empty_small--;
        }

    } else {
        if (size > shd_slab_max(z)) {
            return 0;
        }

        n = (uint32_t) ((size + SHD_PAGE_SIZE - 1) / SHD_PAGE_SIZE);
        p = shd_pages_get(z, n);

        if (p < 0) {
            return 0;
        }

        pg[p].kind = SHD_PAGE_LARGE;
        pg[p].npages = n;

        for (i = 1; i < n; i++) {
            pg[p + i].kind = SHD_PAGE_CONT;
        }

        off = shd_page_off(z, p);
    }

    /* neither free nor an entry until the caller completes it */
    ((shd_chunk *) shd_ptr(z, off))->tag = 0;

    return off;
}


void
shd_slab_free(mrb_shdict_zone *z, shd_off off)
{
    uint32_t   p;
    shd_page  *pg = shd_pages_of(z);

    p = shd_page_of(z, off);

    if (pg[p].kind == SHD_PAGE_SMALL) {
        if (--pg[p].used == 0) {
            z->empty_small++;
        }
        shd_chunk_push(z, pg[p].cls, off);
        return;
    }

    ((shd_chunk *) shd_ptr(z, off))->tag = SHD_TAG_FREE;
    shd_pages_free(z, p, pg[p].npages);
}


size_t
shd_slab_capacity(mrb_shdict_zone *z, shd_off off)
{
    shd_page  *pg = &shd_pages_of(z)[shd_page_of(z, off)];

    if (pg->kind == SHD_PAGE_SMALL) {
        return shd_class_size[pg->cls];
    }

    return (size_t) pg->npages * SHD_PAGE_SIZE;
}


size_t
shd_slab_max(mrb_shdict_zone *z)
{
    return (size_t) z->npages * SHD_PAGE_SIZE;
}


size_t
shd_slab_free_pages(mrb_shdict_zone *z)
{
    size_t     n;
    uint32_t   r;
    shd_page  *pg = shd_pages_of(z);

    n = 0;

    for (r = z->free_runs; r != 0; r = pg[r - 1].next) {
        n += pg[r - 1].npages;
    }

    return n;
}


void
shd_slab_rebuild(mrb_shdict_zone *z,
    int (*keep)(mrb_shdict_zone *z, shd_off off, size_t capacity))
{
    int        cls;
    uint32_t   p, i, k, n, per, csize, used;
    shd_off    off;
    shd_page  *pg = shd_pages_of(z);

    memset(z->free_chunks, 0, sizeof(z->free_chunks));
    z->free_runs = 0;
    z->empty_small = 0;

    /* what each page holds: the descriptors' kinds are written before any
     * chunk of the page is used, so they can be trusted; the chunks are
     * checked one by one */

    p = 0;

    while (p < z->npages) {

        if (pg[p].kind == SHD_PAGE_SMALL && pg[p].cls < SHD_NCLASSES) {
            cls = pg[p].cls;
            csize = shd_class_size[cls];
            per = SHD_PAGE_SIZE / csize;
            used = 0;

            for (k = 0; k < per; k++) {
                off = shd_page_off(z, p) + k * csize;

                if (((shd_chunk *) shd_ptr(z, off))->tag == SHD_TAG_ENTRY
                    && keep(z, off, csize))
                {
                    used++;

                } else {
                    shd_chunk_push(z, cls, off);
                }
            }

            pg[p].used = used;
            z->empty_small += (used == 0);
            p++;
            continue;
        }

        if (pg[p].kind == SHD_PAGE_LARGE && pg[p].npages != 0
            && pg[p].npages <= z->npages - p)
        {
            n = pg[p].npages;
            off = shd_page_off(z, p);

            if (((shd_chunk *) shd_ptr(z, off))->tag == SHD_TAG_ENTRY
                && keep(z, off, (size_t) n * SHD_PAGE_SIZE))
            {
                for (i = 1; i < n; i++) {
                    pg[p + i].kind = SHD_PAGE_CONT;
                }

            } else {
                for (i = 0; i < n; i++) {
                    pg[p + i].kind = SHD_PAGE_FREE;
                }
            }

            p += n;
            continue;
        }

        /* free, or a page of a run that no longer has a head */
        pg[p].kind = SHD_PAGE_FREE;
        p++;
    }

    /* the free runs again, maximal */

    p = 0;

    while (p < z->npages) {
        if (pg[p].kind != SHD_PAGE_FREE) {
            p++;
            continue;
        }

        for (n = 1; p + n < z->npages && pg[p + n].kind == SHD_PAGE_FREE;
             n++)
        {
            /* void */
        }

        for (i = 0; i < n; i++) {
            pg[p + i].cls = 0;
            pg[p + i].used = 0;
        }

        shd_run_link(z, p, n);
        p += n;
    }
}
