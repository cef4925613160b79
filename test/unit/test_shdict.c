/*
 * Unit tests of the shared dictionary: the zone (operations, TTL, LRU
 * eviction, the allocator, held counts), atomicity across forked processes,
 * recovery from a process killed while holding the lock, the registry, and
 * the Ruby class.  Benchmarks: incr with one and two processes.
 */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <mruby.h>
#include <mruby/compile.h>
#include <mruby/string.h>
#include <mruby/variable.h>
#include "mrb_shdict.h"
#include "mrb_shdict_layout.h"
#include "mrb_shdict_owner.h"
#include "unit.h"


static mrb_shdict_zone *
zone_new(size_t size)
{
    void  *mem;

    mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
               -1, 0);
    if (mem == MAP_FAILED) {
        return NULL;
    }

    return mrb_shdict_zone_init(mem, size);
}


static void
zone_free(mrb_shdict_zone *z)
{
    munmap(z, z->size);
}


static mrb_shdict_rc
set_str(mrb_shdict_zone *z, const char *key, const char *val, size_t vlen,
    uint64_t ttl, unsigned flags)
{
    mrb_shdict_value  v = { MRB_SHDICT_STRING, 0, 0, val, vlen };

    return mrb_shdict_zone_set(z, key, strlen(key), &v, ttl, flags);
}


static mrb_shdict_rc
set_int(mrb_shdict_zone *z, const char *key, int64_t i, uint64_t ttl)
{
    mrb_shdict_value  v = { MRB_SHDICT_INTEGER, i, 0, NULL, 0 };

    return mrb_shdict_zone_set(z, key, strlen(key), &v, ttl, 0);
}


static int
has(mrb_shdict_zone *z, const char *key)
{
    char              buf[8];
    mrb_shdict_value  v;
    mrb_shdict_rc     rc;

    rc = mrb_shdict_zone_get(z, key, strlen(key), &v, buf, sizeof(buf));
    return rc == MRB_SHDICT_OK || rc == MRB_SHDICT_TRUNCATED;
}


static int64_t
get_int(mrb_shdict_zone *z, const char *key)
{
    mrb_shdict_value  v;

    if (mrb_shdict_zone_get(z, key, strlen(key), &v, NULL, 0) != MRB_SHDICT_OK
        || v.type != MRB_SHDICT_INTEGER)
    {
        return -999999;
    }

    return v.i;
}


static int64_t
incr(mrb_shdict_zone *z, const char *key, int64_t by)
{
    mrb_shdict_value  vby = { MRB_SHDICT_INTEGER, by, 0, NULL, 0 };
    mrb_shdict_value  init = { MRB_SHDICT_INTEGER, 0, 0, NULL, 0 };
    mrb_shdict_value  out;

    if (mrb_shdict_zone_incr(z, key, strlen(key), &vby, &init, 0, &out)
        != MRB_SHDICT_OK)
    {
        return -999999;
    }

    return out.i;
}


static void
sleep_ms(unsigned ms)
{
    struct timespec  ts = { ms / 1000, (long) (ms % 1000) * 1000000 };

    nanosleep(&ts, NULL);
}


TEST(zone_sizes)
{
    mrb_shdict_zone  *z;
    void             *mem;

    mem = calloc(1, MRB_SHDICT_MIN_SIZE);
    REQUIRE(mem != NULL);
    CHECK(mrb_shdict_zone_init(mem, MRB_SHDICT_MIN_SIZE - 1) == NULL);
    free(mem);

    z = zone_new(MRB_SHDICT_MIN_SIZE);
    REQUIRE(z != NULL);
    CHECK(z->npages >= 4);
    CHECK(z->pages % SHD_PAGE_SIZE == 0);
    CHECK((size_t) z->pages + (size_t) z->npages * SHD_PAGE_SIZE <= z->size);
    CHECK(z->buckets + z->nbuckets * sizeof(shd_off) <= z->pages);
    zone_free(z);

    /* a 1 MB zone: most of it pages, a power-of-two bucket array */
    z = zone_new(1024 * 1024);
    REQUIRE(z != NULL);
    CHECK(z->nbuckets > 0 && (z->nbuckets & (z->nbuckets - 1)) == 0);
    CHECK(z->npages > 240);
    zone_free(z);
}


TEST(set_get_each_type)
{
    char               buf[64];
    mrb_shdict_zone   *z;
    mrb_shdict_value   v, in;

    z = zone_new(64 * 1024);
    REQUIRE(z != NULL);

    CHECK_EQ(set_str(z, "s", "hello", 5, 0, 0), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_get(z, "s", 1, &v, buf, sizeof(buf)),
             MRB_SHDICT_OK);
    CHECK_EQ(v.type, MRB_SHDICT_STRING);
    CHECK(v.len == 5 && memcmp(buf, "hello", 5) == 0);

    CHECK_EQ(set_int(z, "i", -42, 0), MRB_SHDICT_OK);
    CHECK_EQ(get_int(z, "i"), -42);

    in = (mrb_shdict_value) { MRB_SHDICT_FLOAT, 0, 2.5, NULL, 0 };
    CHECK_EQ(mrb_shdict_zone_set(z, "f", 1, &in, 0, 0), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_get(z, "f", 1, &v, buf, sizeof(buf)),
             MRB_SHDICT_OK);
    CHECK(v.type == MRB_SHDICT_FLOAT && v.f == 2.5);

    in = (mrb_shdict_value) { MRB_SHDICT_TRUE, 0, 0, NULL, 0 };
    CHECK_EQ(mrb_shdict_zone_set(z, "t", 1, &in, 0, 0), MRB_SHDICT_OK);
    in.type = MRB_SHDICT_FALSE;
    CHECK_EQ(mrb_shdict_zone_set(z, "F", 1, &in, 0, 0), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_get(z, "t", 1, &v, buf, sizeof(buf)),
             MRB_SHDICT_OK);
    CHECK_EQ(v.type, MRB_SHDICT_TRUE);
    CHECK_EQ(mrb_shdict_zone_get(z, "F", 1, &v, buf, sizeof(buf)),
             MRB_SHDICT_OK);
    CHECK_EQ(v.type, MRB_SHDICT_FALSE);

    /* a new type replaces the old one in place */
    CHECK_EQ(set_str(z, "i", "now a string", 12, 0, 0), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_get(z, "i", 1, &v, buf, sizeof(buf)),
             MRB_SHDICT_OK);
    CHECK(v.type == MRB_SHDICT_STRING && v.len == 12);

    CHECK_EQ(mrb_shdict_zone_get(z, "nope", 4, &v, buf, sizeof(buf)),
             MRB_SHDICT_NOT_FOUND);
    CHECK_EQ(mrb_shdict_zone_count(z), 5);

    CHECK_EQ(mrb_shdict_zone_delete(z, "s", 1), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_delete(z, "s", 1), MRB_SHDICT_NOT_FOUND);
    CHECK(!has(z, "s"));
    CHECK_EQ(mrb_shdict_zone_count(z), 4);

    zone_free(z);
}


TEST(binary_keys_and_values)
{
    char               buf[16];
    mrb_shdict_zone   *z;
    mrb_shdict_value   v, in;
    static const char  k1[] = "a\0b", k2[] = "a\0c", val[] = "\0\xff\0x";

    z = zone_new(64 * 1024);
    REQUIRE(z != NULL);

    in = (mrb_shdict_value) { MRB_SHDICT_STRING, 0, 0, val, 4 };
    CHECK_EQ(mrb_shdict_zone_set(z, k1, 3, &in, 0, 0), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_get(z, k2, 3, &v, buf, sizeof(buf)),
             MRB_SHDICT_NOT_FOUND);
    CHECK_EQ(mrb_shdict_zone_get(z, k1, 1, &v, buf, sizeof(buf)),
             MRB_SHDICT_NOT_FOUND);
    CHECK_EQ(mrb_shdict_zone_get(z, k1, 3, &v, buf, sizeof(buf)),
             MRB_SHDICT_OK);
    CHECK(v.len == 4 && memcmp(buf, val, 4) == 0);

    zone_free(z);
}


TEST(large_values_and_truncation)
{
    char              *big, *buf;
    size_t             len;
    mrb_shdict_zone   *z;
    mrb_shdict_value   v, in;
    mrb_shdict_stats   st;

    z = zone_new(256 * 1024);
    REQUIRE(z != NULL);

    len = 100 * 1000;
    big = malloc(len);
    buf = malloc(len);
    REQUIRE(big != NULL && buf != NULL);
    for (size_t i = 0; i < len; i++) {
        big[i] = (char) (i * 7);
    }

    in = (mrb_shdict_value) { MRB_SHDICT_STRING, 0, 0, big, len };
    CHECK_EQ(mrb_shdict_zone_set(z, "big", 3, &in, 0, 0), MRB_SHDICT_OK);

    CHECK_EQ(mrb_shdict_zone_get(z, "big", 3, &v, buf, 100), MRB_SHDICT_TRUNCATED);
    CHECK(v.len == len);
    CHECK_EQ(mrb_shdict_zone_get(z, "big", 3, &v, buf, len), MRB_SHDICT_OK);
    CHECK(memcmp(buf, big, len) == 0);

    /* bigger than the zone: refused without evicting anything */
    CHECK_EQ(set_int(z, "small", 1, 0), MRB_SHDICT_OK);
    in.len = 300 * 1000;
    big = realloc(big, in.len);
    REQUIRE(big != NULL);
    in.str = big;
    CHECK_EQ(mrb_shdict_zone_set(z, "huge", 4, &in, 0, 0),
             MRB_SHDICT_TOO_LARGE);
    CHECK(has(z, "small") && has(z, "big"));

    /* freeing the big one gives its pages back, merged */
    CHECK_EQ(mrb_shdict_zone_delete(z, "big", 3), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_flush(z), MRB_SHDICT_OK);
    mrb_shdict_zone_stats(z, &st);
    CHECK_EQ(st.free_pages, z->npages);
    CHECK_EQ(z->free_runs, 1);

    free(big);
    free(buf);
    zone_free(z);
}


TEST(add_only_if_absent)
{
    mrb_shdict_zone  *z;

    z = zone_new(64 * 1024);
    REQUIRE(z != NULL);

    CHECK_EQ(set_str(z, "k", "one", 3, 0, MRB_SHDICT_ADD), MRB_SHDICT_OK);
    CHECK_EQ(set_str(z, "k", "two", 3, 0, MRB_SHDICT_ADD), MRB_SHDICT_EXISTS);
    CHECK_EQ(set_str(z, "k", "three", 5, 0, 0), MRB_SHDICT_OK);

    /* an expired key counts as absent */
    CHECK_EQ(set_str(z, "e", "x", 1, 1, 0), MRB_SHDICT_OK);
    sleep_ms(20);
    CHECK_EQ(set_str(z, "e", "y", 1, 0, MRB_SHDICT_ADD), MRB_SHDICT_OK);

    zone_free(z);
}


TEST(incr_numbers)
{
    mrb_shdict_zone   *z;
    mrb_shdict_value   one = { MRB_SHDICT_INTEGER, 1, 0, NULL, 0 };
    mrb_shdict_value   half = { MRB_SHDICT_FLOAT, 0, 0.5, NULL, 0 };
    mrb_shdict_value   ten = { MRB_SHDICT_INTEGER, 10, 0, NULL, 0 };
    mrb_shdict_value   max = { MRB_SHDICT_INTEGER, INT64_MAX, 0, NULL, 0 };
    mrb_shdict_value   out;
    int64_t            ms;

    z = zone_new(64 * 1024);
    REQUIRE(z != NULL);

    /* absent without init: not found, nothing created */
    CHECK_EQ(mrb_shdict_zone_incr(z, "n", 1, &one, NULL, 0, &out),
             MRB_SHDICT_NOT_FOUND);
    CHECK(!has(z, "n"));

    CHECK_EQ(mrb_shdict_zone_incr(z, "n", 1, &one, &ten, 0, &out),
             MRB_SHDICT_OK);
    CHECK(out.type == MRB_SHDICT_INTEGER && out.i == 11);
    CHECK_EQ(mrb_shdict_zone_incr(z, "n", 1, &one, &ten, 0, &out),
             MRB_SHDICT_OK);
    CHECK_EQ(out.i, 12);

    CHECK_EQ(mrb_shdict_zone_incr(z, "n", 1, &half, NULL, 0, &out),
             MRB_SHDICT_OK);
    CHECK(out.type == MRB_SHDICT_FLOAT && out.f == 12.5);

    CHECK_EQ(set_int(z, "m", INT64_MAX, 0), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_incr(z, "m", 1, &one, NULL, 0, &out),
             MRB_SHDICT_OVERFLOW);
    CHECK_EQ(get_int(z, "m"), INT64_MAX);
    CHECK_EQ(mrb_shdict_zone_incr(z, "o", 1, &one, &max, 0, &out),
             MRB_SHDICT_OVERFLOW);
    CHECK(!has(z, "o"));

    CHECK_EQ(set_str(z, "s", "x", 1, 0, 0), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_incr(z, "s", 1, &one, &ten, 0, &out),
             MRB_SHDICT_NOT_A_NUMBER);

    /* ttl applies to the entry incr creates; later incrs keep it */
    CHECK_EQ(mrb_shdict_zone_incr(z, "t", 1, &one, &ten, 60000, &out),
             MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_incr(z, "t", 1, &one, NULL, 0, &out),
             MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_ttl(z, "t", 1, &ms), MRB_SHDICT_OK);
    CHECK(ms > 50000 && ms <= 60000);

    zone_free(z);
}


TEST(ttl_expiry)
{
    int64_t           ms;
    mrb_shdict_zone  *z;

    z = zone_new(64 * 1024);
    REQUIRE(z != NULL);

    /* times with room for a loaded machine to pause this process */
    CHECK_EQ(set_str(z, "short", "x", 1, 1000, 0), MRB_SHDICT_OK);
    CHECK_EQ(set_str(z, "long", "x", 1, 0, 0), MRB_SHDICT_OK);

    CHECK_EQ(mrb_shdict_zone_ttl(z, "short", 5, &ms), MRB_SHDICT_OK);
    CHECK(ms > 0 && ms <= 1000);
    CHECK_EQ(mrb_shdict_zone_ttl(z, "long", 4, &ms), MRB_SHDICT_OK);
    CHECK_EQ(ms, -1);
    CHECK_EQ(mrb_shdict_zone_ttl(z, "none", 4, &ms), MRB_SHDICT_NOT_FOUND);
    CHECK_EQ(mrb_shdict_zone_count(z), 2);

    sleep_ms(1100);

    CHECK(!has(z, "short"));
    CHECK(has(z, "long"));
    CHECK_EQ(mrb_shdict_zone_ttl(z, "short", 5, &ms), MRB_SHDICT_NOT_FOUND);
    CHECK_EQ(mrb_shdict_zone_count(z), 1);

    /* set without ttl makes a key permanent again */
    CHECK_EQ(set_str(z, "k", "x", 1, 1000, 0), MRB_SHDICT_OK);
    CHECK_EQ(set_str(z, "k", "y", 1, 0, 0), MRB_SHDICT_OK);
    sleep_ms(1100);
    CHECK(has(z, "k"));

    zone_free(z);
}


TEST(keys_and_flush)
{
    char              buf[256], *p, seen[4] = { 0 };
    size_t            need, count, i;
    uint32_t          len;
    mrb_shdict_zone  *z;

    z = zone_new(64 * 1024);
    REQUIRE(z != NULL);

    CHECK_EQ(set_int(z, "k0", 0, 0), MRB_SHDICT_OK);
    CHECK_EQ(set_int(z, "k1", 1, 0), MRB_SHDICT_OK);
    CHECK_EQ(set_int(z, "k2", 2, 0), MRB_SHDICT_OK);
    CHECK_EQ(set_int(z, "gone", 3, 1), MRB_SHDICT_OK);
    sleep_ms(20);

    CHECK_EQ(mrb_shdict_zone_keys(z, buf, 4, &need, &count),
             MRB_SHDICT_TRUNCATED);
    CHECK_EQ(need, 3 * (4 + 2));
    CHECK_EQ(mrb_shdict_zone_keys(z, buf, sizeof(buf), &need, &count),
             MRB_SHDICT_OK);
    REQUIRE(count == 3);

    for (i = 0, p = buf; i < count; i++) {
        memcpy(&len, p, 4);
        CHECK(len == 2 && p[4] == 'k');
        if (len == 2 && p[5] >= '0' && p[5] <= '2') {
            seen[p[5] - '0'] = 1;
        }
        p += 4 + len;
    }
    CHECK(seen[0] && seen[1] && seen[2]);

    CHECK_EQ(mrb_shdict_zone_flush(z), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_count(z), 0);
    CHECK(!has(z, "k1"));
    CHECK_EQ(set_int(z, "after", 1, 0), MRB_SHDICT_OK);
    CHECK_EQ(get_int(z, "after"), 1);

    zone_free(z);
}


TEST(lru_eviction)
{
    int                i, n;
    char               key[32], val[100];
    mrb_shdict_zone   *z;
    mrb_shdict_stats   st;

    z = zone_new(MRB_SHDICT_MIN_SIZE);
    REQUIRE(z != NULL);
    memset(val, 'v', sizeof(val));

    /* far more entries than fit; "hot" is read between sets */
    CHECK_EQ(set_str(z, "hot", val, 10, 0, 0), MRB_SHDICT_OK);
    n = 2000;

    for (i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "key%d", i);
        CHECK_EQ(set_str(z, key, val, sizeof(val), 0, 0), MRB_SHDICT_OK);
        CHECK(has(z, "hot"));
    }

    mrb_shdict_zone_stats(z, &st);
    CHECK(st.evictions > 0);
    CHECK(has(z, "hot"));
    CHECK(!has(z, "key0"));
    snprintf(key, sizeof(key), "key%d", n - 1);
    CHECK(has(z, key));

    /* the oldest went first: what is left is a run of the newest */
    for (i = n - 1; i >= 0; i--) {
        snprintf(key, sizeof(key), "key%d", i);
        if (!has(z, key)) {
            break;
        }
    }
    CHECK_EQ((int64_t) mrb_shdict_zone_count(z), 1 + (n - 1 - i));

    /* without eviction, a full zone refuses and loses nothing */
    CHECK_EQ(set_str(z, "extra", val, sizeof(val), 0, MRB_SHDICT_NO_EVICT),
             MRB_SHDICT_NO_MEMORY);
    CHECK(!has(z, "extra"));
    snprintf(key, sizeof(key), "key%d", n - 1);
    CHECK(has(z, key));
    CHECK_EQ(set_str(z, "hot", val, sizeof(val), 0, MRB_SHDICT_ADD),
             MRB_SHDICT_EXISTS);

    zone_free(z);
}


TEST(eviction_across_size_classes)
{
    int                i;
    char               key[32], *big;
    mrb_shdict_zone   *z;
    mrb_shdict_value   in;

    z = zone_new(MRB_SHDICT_MIN_SIZE);
    REQUIRE(z != NULL);

    /* small pages everywhere, then entries that need whole pages: the
     * emptied small pages must be given back */
    for (i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "small%d", i);
        CHECK_EQ(set_int(z, key, i, 0), MRB_SHDICT_OK);
    }

    big = calloc(1, 3 * SHD_PAGE_SIZE);
    REQUIRE(big != NULL);
    in = (mrb_shdict_value) { MRB_SHDICT_STRING, 0, 0, big, 2 * SHD_PAGE_SIZE };

    for (i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "big%d", i);
        CHECK_EQ(mrb_shdict_zone_set(z, key, strlen(key), &in, 0, 0),
                 MRB_SHDICT_OK);
        CHECK(has(z, key));
    }

    /* and back to small ones */
    for (i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "again%d", i);
        CHECK_EQ(set_int(z, key, i, 0), MRB_SHDICT_OK);
    }
    CHECK_EQ(get_int(z, "again999"), 999);

    /* emptied pages all come back */
    CHECK_EQ(mrb_shdict_zone_flush(z), MRB_SHDICT_OK);
    CHECK_EQ(z->empty_small, 0);
    for (i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "small%d", i);
        CHECK_EQ(set_int(z, key, i, 0), MRB_SHDICT_OK);
    }
    for (i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "small%d", i);
        mrb_shdict_zone_delete(z, key, strlen(key));
    }
    CHECK(z->empty_small > 0);
    in.len = (z->npages - 1) * SHD_PAGE_SIZE;
    big = realloc(big, in.len);
    REQUIRE(big != NULL);
    in.str = big;
    CHECK_EQ(mrb_shdict_zone_set(z, "all", 3, &in, 0, MRB_SHDICT_NO_EVICT),
             MRB_SHDICT_OK);
    CHECK_EQ(z->empty_small, 0);

    free(big);
    zone_free(z);
}


TEST(replace_keeps_value_when_full)
{
    char              *big;
    mrb_shdict_zone   *z;
    mrb_shdict_value   in;

    z = zone_new(MRB_SHDICT_MIN_SIZE);
    REQUIRE(z != NULL);

    big = calloc(1, z->npages * SHD_PAGE_SIZE);
    REQUIRE(big != NULL);

    CHECK_EQ(set_str(z, "k", "small", 5, 0, 0), MRB_SHDICT_OK);

    /* k's small page, the filler's run, one page free */
    in = (mrb_shdict_value) { MRB_SHDICT_STRING, 0, 0, big,
                              (z->npages - 2) * SHD_PAGE_SIZE - 100 };
    CHECK_EQ(mrb_shdict_zone_set(z, "filler", 6, &in, 0, 0), MRB_SHDICT_OK);
    CHECK(has(z, "k"));

    /* growing k past what is free, without eviction: k keeps its value */
    in.len = 3 * SHD_PAGE_SIZE;
    CHECK_EQ(mrb_shdict_zone_set(z, "k", 1, &in, 0, MRB_SHDICT_NO_EVICT),
             MRB_SHDICT_NO_MEMORY);
    CHECK(has(z, "k"));

    /* with eviction it replaces k, evicting the filler, never k itself */
    CHECK_EQ(mrb_shdict_zone_set(z, "k", 1, &in, 0, 0), MRB_SHDICT_OK);
    CHECK(has(z, "k"));
    CHECK(!has(z, "filler"));

    free(big);
    zone_free(z);
}


TEST(hold_and_release)
{
    int64_t            total;
    mrb_shdict_zone   *z;
    mrb_shdict_stats   st;

    z = zone_new(64 * 1024);
    REQUIRE(z != NULL);

    CHECK_EQ(mrb_shdict_zone_hold(z, "f", 1, 1, &total), MRB_SHDICT_OK);
    CHECK_EQ(total, 1);
    CHECK_EQ(mrb_shdict_zone_hold(z, "f", 1, 2, &total), MRB_SHDICT_OK);
    CHECK_EQ(total, 3);
    CHECK_EQ(get_int(z, "f"), 3);

    /* the ledger is internal: one key seen */
    CHECK_EQ(mrb_shdict_zone_count(z), 1);
    mrb_shdict_zone_stats(z, &st);
    CHECK_EQ(st.ledgers, 1);

    CHECK_EQ(mrb_shdict_zone_release(z, "f", 1, 1, &total), MRB_SHDICT_OK);
    CHECK_EQ(total, 2);

    /* never more than this process holds */
    CHECK_EQ(mrb_shdict_zone_release(z, "f", 1, 5, &total), MRB_SHDICT_OK);
    CHECK_EQ(total, 0);
    CHECK_EQ(mrb_shdict_zone_release(z, "f", 1, 1, &total),
             MRB_SHDICT_NOT_FOUND);
    CHECK_EQ(total, 0);
    mrb_shdict_zone_stats(z, &st);
    CHECK_EQ(st.ledgers, 0);

    /* holds add to what others set; a string cannot be held */
    CHECK_EQ(set_int(z, "g", 10, 0), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_hold(z, "g", 1, 1, &total), MRB_SHDICT_OK);
    CHECK_EQ(total, 11);
    CHECK_EQ(set_str(z, "s", "x", 1, 0, 0), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_hold(z, "s", 1, 1, &total),
             MRB_SHDICT_NOT_A_NUMBER);

    /* an overflowing hold changes nothing, and leaves no ledger behind */
    CHECK_EQ(set_int(z, "max", INT64_MAX, 0), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_hold(z, "max", 3, 1, &total),
             MRB_SHDICT_OVERFLOW);
    CHECK_EQ(get_int(z, "max"), INT64_MAX);
    mrb_shdict_zone_stats(z, &st);
    CHECK_EQ(st.ledgers, 1);

    /* deleting a held key drops its holds; a later release is a no-op */
    CHECK_EQ(mrb_shdict_zone_delete(z, "g", 1), MRB_SHDICT_OK);
    mrb_shdict_zone_stats(z, &st);
    CHECK_EQ(st.ledgers, 0);
    CHECK_EQ(mrb_shdict_zone_release(z, "g", 1, 1, &total),
             MRB_SHDICT_NOT_FOUND);
    CHECK_EQ(total, 0);
    CHECK(!has(z, "g"));

    /* so does flush_all */
    CHECK_EQ(mrb_shdict_zone_hold(z, "h", 1, 1, &total), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_flush(z), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_release(z, "h", 1, 1, &total),
             MRB_SHDICT_NOT_FOUND);
    CHECK(!has(z, "h"));

    zone_free(z);
}


TEST(held_keys_are_never_evicted)
{
    int               i;
    char              key[32], val[200];
    int64_t           total;
    mrb_shdict_zone  *z;

    z = zone_new(MRB_SHDICT_MIN_SIZE);
    REQUIRE(z != NULL);
    memset(val, 'v', sizeof(val));

    CHECK_EQ(mrb_shdict_zone_set(z, "held", 4,
             &(mrb_shdict_value) { MRB_SHDICT_INTEGER, 0, 0, NULL, 0 }, 50, 0),
             MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_hold(z, "held", 4, 1, &total), MRB_SHDICT_OK);

    for (i = 0; i < 2000; i++) {
        snprintf(key, sizeof(key), "key%d", i);
        CHECK_EQ(set_str(z, key, val, sizeof(val), 0, 0), MRB_SHDICT_OK);
    }

    /* not evicted, and no longer expiring */
    sleep_ms(100);
    CHECK_EQ(get_int(z, "held"), 1);
    CHECK_EQ(mrb_shdict_zone_release(z, "held", 4, 1, &total), MRB_SHDICT_OK);
    CHECK_EQ(total, 0);

    zone_free(z);
}


TEST(idle_ledgers)
{
    int                i;
    char               key[64], val[200];
    int64_t            total;
    mrb_shdict_zone   *z;
    mrb_shdict_stats   st;

    z = zone_new(MRB_SHDICT_MIN_SIZE);
    REQUIRE(z != NULL);

    /* released to 0, the ledger stays, idle; it holds nothing */
    CHECK_EQ(mrb_shdict_zone_hold(z, "f", 1, 1, &total), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_release(z, "f", 1, 1, &total), MRB_SHDICT_OK);
    mrb_shdict_zone_stats(z, &st);
    CHECK_EQ(st.ledgers, 0);
    CHECK_EQ(st.idle_ledgers, 1);
    CHECK_EQ(mrb_shdict_zone_release(z, "f", 1, 1, &total),
             MRB_SHDICT_NOT_FOUND);
    CHECK_EQ(get_int(z, "f"), 0);

    /* held again through it */
    CHECK_EQ(mrb_shdict_zone_hold(z, "f", 1, 2, &total), MRB_SHDICT_OK);
    CHECK_EQ(total, 2);
    mrb_shdict_zone_stats(z, &st);
    CHECK_EQ(st.ledgers, 1);
    CHECK_EQ(st.idle_ledgers, 0);
    CHECK_EQ(mrb_shdict_zone_release(z, "f", 1, 2, &total), MRB_SHDICT_OK);
    CHECK_EQ(total, 0);

    /* the sweep frees it, and counts no hold withdrawn */
    CHECK_EQ(mrb_shdict_zone_sweep(z), 0);
    mrb_shdict_zone_stats(z, &st);
    CHECK_EQ(st.idle_ledgers, 0);

    /* an idle ledger pins nothing: its key is evicted like any other */
    CHECK_EQ(mrb_shdict_zone_hold(z, "f", 1, 1, &total), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_release(z, "f", 1, 1, &total), MRB_SHDICT_OK);
    memset(val, 'v', sizeof(val));
    for (i = 0; i < 2000; i++) {
        snprintf(key, sizeof(key), "key%d", i);
        CHECK_EQ(set_str(z, key, val, sizeof(val), 0, 0), MRB_SHDICT_OK);
    }
    CHECK(!has(z, "f"));

    /* a full zone frees the idle ledgers rather than fail: many files
     * counted in and out, as a busy limiter does */
    for (i = 0; i < 2000; i++) {
        snprintf(key, sizeof(key), "/var/www/html/some/longer/path/%d.php", i);
        CHECK_EQ(mrb_shdict_zone_hold(z, key, strlen(key), 1, &total),
                 MRB_SHDICT_OK);
        CHECK_EQ(mrb_shdict_zone_release(z, key, strlen(key), 1, &total),
                 MRB_SHDICT_OK);
    }

    zone_free(z);
}


/* Forks a child that holds key n times and then either exits, dies by
 * SIGKILL, or waits; returns its pid once the holds are made. */
static pid_t
child_holding(mrb_shdict_zone *z, const char *key, int n, int how)
{
    int      fds[2];
    char     c;
    pid_t    pid;
    int64_t  total;

    if (pipe(fds) != 0) {
        return -1;
    }

    pid = fork();

    if (pid == 0) {
        close(fds[0]);
        for (int i = 0; i < n; i++) {
            if (mrb_shdict_zone_hold(z, key, strlen(key), 1, &total)
                != MRB_SHDICT_OK)
            {
                _exit(1);
            }
        }
        if (write(fds[1], "x", 1) != 1) {
            _exit(1);
        }
        if (how == 0) {
            _exit(0);
        }
        pause();
        _exit(0);
    }

    close(fds[1]);
    if (pid < 0 || read(fds[0], &c, 1) != 1) {
        pid = -1;
    }
    close(fds[0]);

    return pid;
}


TEST(holds_of_dead_processes_are_withdrawn)
{
    pid_t              a, b;
    int64_t            total;
    mrb_shdict_zone   *z;
    mrb_shdict_stats   st;

    z = zone_new(64 * 1024);
    REQUIRE(z != NULL);

    /* this process is a running request: its hold must survive */
    CHECK_EQ(mrb_shdict_zone_hold(z, "f", 1, 1, &total), MRB_SHDICT_OK);

    a = child_holding(z, "f", 2, 1);
    b = child_holding(z, "f", 3, 0);
    REQUIRE(a > 0 && b > 0);
    CHECK_EQ(unit_child_status(b), 0);
    CHECK_EQ(get_int(z, "f"), 6);

    /* b exited (and was reaped); a still runs */
    CHECK_EQ(mrb_shdict_zone_sweep(z), 1);
    CHECK_EQ(get_int(z, "f"), 3);

    kill(a, SIGKILL);
    CHECK_EQ(unit_child_status(a), -1);
    CHECK_EQ(mrb_shdict_zone_sweep(z), 1);
    CHECK_EQ(get_int(z, "f"), 1);

    mrb_shdict_zone_stats(z, &st);
    CHECK_EQ(st.ledgers, 1);
    CHECK_EQ(mrb_shdict_zone_release(z, "f", 1, 1, &total), MRB_SHDICT_OK);
    CHECK_EQ(total, 0);

    zone_free(z);
}


TEST(sweep_runs_by_itself_within_the_interval)
{
    pid_t             a;
    int64_t           total;
    uint64_t          start;
    mrb_shdict_zone  *z;

    z = zone_new(64 * 1024);
    REQUIRE(z != NULL);

    CHECK_EQ(mrb_shdict_zone_hold(z, "f", 1, 1, &total), MRB_SHDICT_OK);
    a = child_holding(z, "f", 4, 1);
    REQUIRE(a > 0);
    kill(a, SIGKILL);

    /* not reaped yet: a zombie is dead too */
    sleep_ms(50);
    start = unit_now_ns();

    while (get_int(z, "f") != 1
           && unit_now_ns() - start < 10000 * 1000000ull)
    {
        sleep_ms(10);
    }

    /* one sweep interval, with room for a loaded machine */
    CHECK_EQ(get_int(z, "f"), 1);
    CHECK(unit_now_ns() - start < (MRB_SHDICT_SWEEP_INTERVAL + 3000)
                                  * 1000000ull);
    CHECK_EQ(unit_child_status(a), -1);

    zone_free(z);
}


TEST(owner_identity)
{
    pid_t             pid;
    mrb_shdict_owner  self, o;

    mrb_shdict_owner_self(&self);
    CHECK_EQ(self.pid, getpid());
    CHECK(self.start != 0);
    CHECK(mrb_shdict_owner_alive(&self));

    /* our pid with another start time: an earlier process, now dead */
    o = self;
    o.start++;
    CHECK(!mrb_shdict_owner_alive(&o));

    pid = fork();
    if (pid == 0) {
        mrb_shdict_owner_self(&o);
        _exit(o.pid == (uint32_t) getpid() ? 0 : 1);
    }
    REQUIRE(pid > 0);
    CHECK_EQ(unit_child_status(pid), 0);

    o.pid = (uint32_t) pid;
    o.start = 0;
    CHECK(!mrb_shdict_owner_alive(&o));
}


/*
 * A process that cannot read /proc the first time it asks who it is (no
 * file descriptor left) gets its start time when it asks again: a start of
 * 0, remembered, made its holds look alive for as long as any process had
 * its pid.
 */
TEST(owner_start_read_again_after_proc_was_unreadable)
{
    pid_t  pid;

    pid = fork();
    if (pid == 0) {
        struct rlimit     lim, none;
        mrb_shdict_owner  first, again;

        if (getrlimit(RLIMIT_NOFILE, &lim) != 0) {
            _exit(2);
        }

        /* no descriptor can be opened: fopen("/proc/...") fails */
        none = lim;
        none.rlim_cur = 0;
        if (setrlimit(RLIMIT_NOFILE, &none) != 0) {
            _exit(3);
        }

        mrb_shdict_owner_self(&first);

        if (setrlimit(RLIMIT_NOFILE, &lim) != 0) {
            _exit(4);
        }

        mrb_shdict_owner_self(&again);
        _exit(first.start == 0 && again.start != 0 ? 0 : 1);
    }
    REQUIRE(pid > 0);
    CHECK_EQ(unit_child_status(pid), 0);
}


/*
 * A sweep looks at every holder: one dead among more than 128 live ones
 * (the old limit of owners looked at) is found.  The dead one holds first,
 * so that its ledger is the last the sweep walks to.
 */
TEST(sweep_finds_the_dead_among_many_holders)
{
    enum { NLIVE = 140 };
    pid_t              dead, live[NLIVE];
    int                i, started = 0;
    mrb_shdict_zone   *z;

    z = zone_new(256 * 1024);
    REQUIRE(z != NULL);

    /* no sweep by itself meanwhile: forking them all takes a while */
    z->next_sweep = UINT64_MAX;

    dead = child_holding(z, "f", 1, 0);
    REQUIRE(dead > 0);
    CHECK_EQ(unit_child_status(dead), 0);

    for (i = 0; i < NLIVE; i++) {
        live[i] = child_holding(z, "f", 1, 1);
        if (live[i] <= 0) {
            break;
        }
        started++;
    }

    CHECK_EQ(started, NLIVE);
    CHECK_EQ(get_int(z, "f"), started + 1);
    CHECK_EQ(mrb_shdict_zone_sweep(z), 1);
    CHECK_EQ(get_int(z, "f"), started);

    for (i = 0; i < started; i++) {
        kill(live[i], SIGKILL);
        unit_child_status(live[i]);
    }

    CHECK_EQ(mrb_shdict_zone_sweep(z), started);
    CHECK_EQ(get_int(z, "f"), 0);
    zone_free(z);
}


TEST(no_lost_updates_across_processes)
{
    int               i, nproc, per;
    pid_t             pids[4];
    mrb_shdict_zone  *z;

    z = zone_new(64 * 1024);
    REQUIRE(z != NULL);

    nproc = 4;
    per = 25000;

    for (i = 0; i < nproc; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            for (int k = 0; k < per; k++) {
                if (incr(z, "n", 1) < 0) {
                    _exit(1);
                }
                /* churn the allocator and the lists too */
                if (k % 100 == 0) {
                    char  key[32];
                    snprintf(key, sizeof(key), "p%d-%d", i, k);
                    set_int(z, key, k, 0);
                }
            }
            _exit(0);
        }
        REQUIRE(pids[i] > 0);
    }

    for (i = 0; i < nproc; i++) {
        CHECK_EQ(unit_child_status(pids[i]), 0);
    }

    CHECK_EQ(get_int(z, "n"), (int64_t) nproc * per);
    zone_free(z);
}


TEST(no_lost_holds_across_processes)
{
    int               i, nproc;
    pid_t             pids[4];
    int64_t           total;
    mrb_shdict_zone  *z;

    z = zone_new(64 * 1024);
    REQUIRE(z != NULL);

    nproc = 4;

    for (i = 0; i < nproc; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            for (int k = 0; k < 20000; k++) {
                if (mrb_shdict_zone_hold(z, "f", 1, 1, &total) != 0
                    || total < 1
                    || mrb_shdict_zone_release(z, "f", 1, 1, &total) != 0
                    || total < 0)
                {
                    _exit(1);
                }
            }
            /* one left standing by each: exit holds it until swept */
            mrb_shdict_zone_hold(z, "f", 1, 1, &total);
            _exit(0);
        }
        REQUIRE(pids[i] > 0);
    }

    for (i = 0; i < nproc; i++) {
        CHECK_EQ(unit_child_status(pids[i]), 0);
    }

    CHECK_EQ(get_int(z, "f"), nproc);
    CHECK_EQ(mrb_shdict_zone_sweep(z), nproc);
    CHECK_EQ(get_int(z, "f"), 0);

    zone_free(z);
}


/* Forks a child that takes the zone lock, optionally tears the lists,
 * reports, and waits to be killed. */
static pid_t
child_locking(mrb_shdict_zone *z, int tear)
{
    int    fds[2];
    char   c;
    pid_t  pid;

    if (pipe(fds) != 0) {
        return -1;
    }

    pid = fork();

    if (pid == 0) {
        close(fds[0]);
        if (mrb_shdict_zone_lock(z) != 0) {
            _exit(1);
        }
        if (tear) {
            /* what a crash in the middle of an update may leave */
            memset(shd_ptr(z, z->buckets), 0xff,
                   z->nbuckets * sizeof(shd_off));
            z->lru_head = 12345;
            z->lru_tail = 0;
            z->free_chunks[0] = 7;
        }
        if (write(fds[1], "x", 1) != 1) {
            _exit(1);
        }
        pause();
        _exit(0);
    }

    close(fds[1]);
    if (pid < 0 || read(fds[0], &c, 1) != 1) {
        pid = -1;
    }
    close(fds[0]);

    return pid;
}


TEST(robust_mutex_after_holder_killed)
{
    pid_t              pid;
    int64_t            total;
    mrb_shdict_zone   *z;
    mrb_shdict_stats   st;

    z = zone_new(64 * 1024);
    REQUIRE(z != NULL);

    CHECK_EQ(set_int(z, "k", 7, 0), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_hold(z, "h", 1, 2, &total), MRB_SHDICT_OK);

    pid = child_locking(z, 0);
    REQUIRE(pid > 0);
    kill(pid, SIGKILL);
    CHECK_EQ(unit_child_status(pid), -1);

    /* no deadlock (the runner's time limit would fail the test), and the
     * contents are intact */
    CHECK_EQ(get_int(z, "k"), 7);
    CHECK_EQ(get_int(z, "h"), 2);
    mrb_shdict_zone_stats(z, &st);
    CHECK_EQ(st.recoveries, 1);
    CHECK_EQ(incr(z, "k", 1), 8);

    zone_free(z);
}


TEST(zone_rebuilt_after_holder_killed_mid_update)
{
    int                i;
    char               key[32], big[6000];
    pid_t              pid;
    int64_t            total;
    mrb_shdict_zone   *z;
    mrb_shdict_stats   st;
    mrb_shdict_value   in;

    z = zone_new(256 * 1024);
    REQUIRE(z != NULL);

    for (i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "key%d", i);
        CHECK_EQ(set_int(z, key, i, 0), MRB_SHDICT_OK);
    }
    memset(big, 'b', sizeof(big));
    in = (mrb_shdict_value) { MRB_SHDICT_STRING, 0, 0, big, sizeof(big) };
    CHECK_EQ(mrb_shdict_zone_set(z, "big", 3, &in, 0, 0), MRB_SHDICT_OK);
    CHECK_EQ(mrb_shdict_zone_hold(z, "h", 1, 2, &total), MRB_SHDICT_OK);

    pid = child_locking(z, 1);
    REQUIRE(pid > 0);
    kill(pid, SIGKILL);
    CHECK_EQ(unit_child_status(pid), -1);

    for (i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "key%d", i);
        CHECK_EQ(get_int(z, key), i);
    }
    CHECK(has(z, "big"));
    CHECK_EQ(get_int(z, "h"), 2);
    CHECK_EQ(mrb_shdict_zone_count(z), 302);

    mrb_shdict_zone_stats(z, &st);
    CHECK_EQ(st.recoveries, 1);
    CHECK_EQ(st.ledgers, 1);

    /* and it keeps working: allocation, holds, eviction */
    CHECK_EQ(mrb_shdict_zone_release(z, "h", 1, 2, &total), MRB_SHDICT_OK);
    CHECK_EQ(total, 0);
    for (i = 0; i < 3000; i++) {
        snprintf(key, sizeof(key), "new%d", i);
        CHECK_EQ(set_int(z, key, i, 0), MRB_SHDICT_OK);
    }
    CHECK_EQ(get_int(z, "new2999"), 2999);

    zone_free(z);
}


TEST(registry_reload)
{
    char              err[256];
    size_t            size;
    mrb_shdict_ref   *ref;
    mrb_shdict_zone  *z1, *z2;

    CHECK_EQ(mrb_shdict_parse_size("65536", &size), 0);
    CHECK_EQ(size, 65536);
    CHECK_EQ(mrb_shdict_parse_size("512k", &size), 0);
    CHECK_EQ(size, 512 * 1024);
    CHECK_EQ(mrb_shdict_parse_size("2M", &size), 0);
    CHECK_EQ(size, 2 * 1024 * 1024);
    CHECK_EQ(mrb_shdict_parse_size("1g", &size), 0);
    CHECK_EQ(mrb_shdict_parse_size("", &size), -1);
    CHECK_EQ(mrb_shdict_parse_size("1x", &size), -1);
    CHECK_EQ(mrb_shdict_parse_size("-1", &size), -1);
    CHECK_EQ(mrb_shdict_parse_size("99999999999999999999", &size), -1);

    mrb_shdict_config_begin();
    CHECK_EQ(mrb_shdict_zone_add("reg", 64 * 1024, err, sizeof(err)), 0);
    CHECK_EQ(mrb_shdict_zone_add("reg", 64 * 1024, err, sizeof(err)), 0);
    CHECK_EQ(mrb_shdict_zone_add("reg", 128 * 1024, err, sizeof(err)), -1);
    CHECK(strstr(err, "twice") != NULL);
    CHECK_EQ(mrb_shdict_zone_add("bad name", 64 * 1024, err, sizeof(err)), -1);
    CHECK(strstr(err, "invalid") != NULL);
    CHECK_EQ(mrb_shdict_zone_add("tiny", 1024, err, sizeof(err)), -1);
    CHECK(strstr(err, "out of range") != NULL);
    CHECK_EQ(mrb_shdict_zone_add("other", 64 * 1024, err, sizeof(err)), 0);
    mrb_shdict_config_end();

    ref = mrb_shdict_find("reg", 3);
    REQUIRE(ref != NULL);
    z1 = mrb_shdict_ref_zone(ref);
    REQUIRE(z1 != NULL);
    CHECK_EQ(set_int(z1, "kept", 1, 0), MRB_SHDICT_OK);

    /* reload, same size: same zone, same contents; "other" dropped */
    mrb_shdict_config_begin();
    CHECK_EQ(mrb_shdict_zone_add("reg", 64 * 1024, err, sizeof(err)), 0);
    mrb_shdict_config_end();
    CHECK(mrb_shdict_ref_zone(ref) == z1);
    CHECK_EQ(get_int(z1, "kept"), 1);
    CHECK(mrb_shdict_ref_zone(mrb_shdict_find("other", 5)) == NULL);

    /* reload, new size: a new empty zone */
    mrb_shdict_config_begin();
    CHECK_EQ(mrb_shdict_zone_add("reg", 128 * 1024, err, sizeof(err)), 0);
    mrb_shdict_config_end();
    z2 = mrb_shdict_ref_zone(ref);
    REQUIRE(z2 != NULL);
    CHECK_EQ(z2->size, 128 * 1024);
    CHECK(!has(z2, "kept"));

    /* a dropped name can come back */
    mrb_shdict_config_begin();
    CHECK_EQ(mrb_shdict_zone_add("other", 64 * 1024, err, sizeof(err)), 0);
    mrb_shdict_config_end();
    CHECK(mrb_shdict_ref_zone(ref) == NULL);
    CHECK(mrb_shdict_ref_zone(mrb_shdict_find("other", 5)) != NULL);
}


/*
 * A configuration read and never put in use (nginx refusing a reload after
 * reading it): the zones in use stay as they were, contents and all, until
 * a configuration is committed.
 */
TEST(shdict_registry_refused_reload_changes_nothing)
{
    char              err[256];
    mrb_shdict_ref   *kept, *resized;
    mrb_shdict_zone  *zk, *zr;

    mrb_shdict_config_begin();
    CHECK_EQ(mrb_shdict_zone_add("keep", 64 * 1024, err, sizeof(err)), 0);
    CHECK_EQ(mrb_shdict_zone_add("resize", 64 * 1024, err, sizeof(err)), 0);
    mrb_shdict_config_end();

    kept = mrb_shdict_find("keep", 4);
    resized = mrb_shdict_find("resize", 6);
    REQUIRE(kept != NULL && resized != NULL);
    zk = mrb_shdict_ref_zone(kept);
    zr = mrb_shdict_ref_zone(resized);
    REQUIRE(zk != NULL && zr != NULL);
    CHECK_EQ(set_int(zk, "k", 1, 0), MRB_SHDICT_OK);
    CHECK_EQ(set_int(zr, "r", 2, 0), MRB_SHDICT_OK);

    /* read: "keep" dropped, "resize" resized, "new" declared; refused */
    mrb_shdict_config_begin();
    CHECK_EQ(mrb_shdict_zone_add("resize", 128 * 1024, err, sizeof(err)), 0);
    CHECK_EQ(mrb_shdict_zone_add("new", 64 * 1024, err, sizeof(err)), 0);

    CHECK(mrb_shdict_ref_zone(kept) == zk);
    CHECK(mrb_shdict_ref_zone(resized) == zr);
    CHECK_EQ(get_int(zk, "k"), 1);
    CHECK_EQ(get_int(zr, "r"), 2);
    CHECK(mrb_shdict_ref_zone(mrb_shdict_find("new", 3)) == NULL);

    /* the next reload, put in use, starts from what is in use */
    mrb_shdict_config_begin();
    CHECK_EQ(mrb_shdict_zone_add("keep", 64 * 1024, err, sizeof(err)), 0);
    CHECK_EQ(mrb_shdict_zone_add("resize", 64 * 1024, err, sizeof(err)), 0);
    mrb_shdict_config_end();

    CHECK(mrb_shdict_ref_zone(kept) == zk);
    CHECK(mrb_shdict_ref_zone(resized) == zr);
    CHECK_EQ(get_int(zr, "r"), 2);
    CHECK(mrb_shdict_ref_zone(mrb_shdict_find("new", 3)) == NULL);
}


/* A configuration that declares name (64k) alone, put in use; returns what
 * declaring it did. */
static int
declare_only(const char *name)
{
    int   rc;
    char  err[256];

    mrb_shdict_config_begin();
    rc = mrb_shdict_zone_add(name, 64 * 1024, err, sizeof(err));
    mrb_shdict_config_end();
    return rc;
}


/*
 * Apache unloads the module on a restart and loads it again, maybe a newer
 * build: the registry lives in a block Apache keeps, and the next load
 * finds the zones in use there.  One of another layout is not kept.
 */
TEST(shdict_registry_kept_across_module_loads)
{
    /* static: the references of a registry live as long as the process,
     * as the blocks Apache keeps do */
    static mrb_shdict_keep  *kept, *other;
    mrb_shdict_ref          *ref;
    mrb_shdict_zone         *z1, *z2;

    kept = calloc(1, mrb_shdict_keep_size());
    other = calloc(1, mrb_shdict_keep_size());
    REQUIRE(kept != NULL && other != NULL);

    mrb_shdict_keep_in(kept);
    CHECK_EQ(declare_only("loads"), 0);
    ref = mrb_shdict_find("loads", 5);
    REQUIRE(ref != NULL);
    z1 = mrb_shdict_ref_zone(ref);
    REQUIRE(z1 != NULL);
    CHECK_EQ(set_int(z1, "n", 7, 0), MRB_SHDICT_OK);

    /* a build with another block (a registry of another layout) sees none
     * of it */
    mrb_shdict_keep_in(other);
    CHECK(mrb_shdict_find("loads", 5) == NULL);

    /* the next load of this layout: same zone, same contents */
    mrb_shdict_keep_in(kept);
    CHECK_EQ(declare_only("loads"), 0);
    CHECK(mrb_shdict_find("loads", 5) == ref);
    CHECK(mrb_shdict_ref_zone(ref) == z1);
    CHECK_EQ(get_int(z1, "n"), 7);

    /* a zone laid out by a build of another zone layout: a new, empty one,
     * and the old one unmapped once the configuration is in use */
    z1->version = SHD_VERSION + 1;
    CHECK_EQ(declare_only("loads"), 0);
    z2 = mrb_shdict_ref_zone(ref);
    REQUIRE(z2 != NULL);
    CHECK(z2 != z1);
    CHECK(!has(z2, "n"));
    CHECK(msync(z1, 64 * 1024, MS_ASYNC) == -1 && errno == ENOMEM);

    mrb_shdict_config_begin();
    mrb_shdict_config_end();
    CHECK(mrb_shdict_ref_zone(ref) == NULL);

    mrb_shdict_keep_in(NULL);
}


/* The Ruby class, in a bare interpreter. */

static mrb_state *
ruby_open(void)
{
    char        err[256];
    mrb_state  *mrb;

    mrb_shdict_config_begin();
    if (mrb_shdict_zone_add("ruby", 64 * 1024, err, sizeof(err)) != 0
        || mrb_shdict_zone_add("rsmall", MRB_SHDICT_MIN_SIZE, err,
                               sizeof(err)) != 0)
    {
        return NULL;
    }
    mrb_shdict_config_end();

    mrb = mrb_open();
    if (mrb != NULL) {
        mrb_shdict_define(mrb, mrb->object_class);
    }

    return mrb;
}


/* Runs code; returns its inspect(), or "!Class: message" if it raised. */
static const char *
ruby(mrb_state *mrb, const char *code)
{
    static char  out[512];
    mrb_value    v;

    v = mrb_load_string(mrb, code);

    /* "message (Class)", as mruby 3.x inspects an exception (4.0:
     * #<Class: message>) */
    if (mrb->exc != NULL) {
        v = mrb_format(mrb, "%v (%C)",
                       mrb_funcall(mrb, mrb_obj_value(mrb->exc), "message", 0),
                       mrb_obj_class(mrb, mrb_obj_value(mrb->exc)));
        mrb->exc = NULL;
        snprintf(out, sizeof(out), "!%s", mrb_str_to_cstr(mrb, v));
        return out;
    }

    v = mrb_inspect(mrb, v);
    snprintf(out, sizeof(out), "%s", mrb_str_to_cstr(mrb, v));
    return out;
}


#define CHECK_RUBY(mrb, code, expect)                                       \
    do {                                                                    \
        const char *unit_r_ = ruby(mrb, code);                              \
        if (strcmp(unit_r_, expect) != 0) {                                 \
            unit_fail(__FILE__, __LINE__, "%s => %s (expected %s)", code,   \
                      unit_r_, expect);                                     \
        }                                                                   \
    } while (0)

#define CHECK_RAISES(mrb, code, prefix)                                     \
    do {                                                                    \
        const char *unit_r_ = ruby(mrb, code);                              \
        if (strncmp(unit_r_, "!" prefix, strlen(prefix) + 1) != 0) {        \
            unit_fail(__FILE__, __LINE__, "%s => %s (expected !%s...)",     \
                      code, unit_r_, prefix);                               \
        }                                                                   \
    } while (0)


TEST(ruby_api)
{
    mrb_state  *mrb;

    mrb = ruby_open();
    REQUIRE(mrb != NULL);

    CHECK_RUBY(mrb, "$d = SharedDict.new('ruby'); $d.flush_all", "nil");
    CHECK_RUBY(mrb, "$d.name", "\"ruby\"");
    CHECK_RUBY(mrb, "$d['a'] = 'x'; $d['a']", "\"x\"");
    CHECK_RUBY(mrb, "$d.get('a')", "\"x\"");
    CHECK_RUBY(mrb, "$d.get('nope')", "nil");
    CHECK_RUBY(mrb, "$d.set('i', 5)", "5");
    CHECK_RUBY(mrb, "$d['i']", "5");
    CHECK_RUBY(mrb, "$d.set('f', 1.5); $d['f']", "1.5");
    CHECK_RUBY(mrb, "$d['t'] = true; $d['t']", "true");
    CHECK_RUBY(mrb, "$d['F'] = false; $d['F']", "false");
    CHECK_RUBY(mrb, "$d['F'] = nil; $d['F']", "nil");
    CHECK_RUBY(mrb, "$d.size", "4");
    CHECK_RUBY(mrb, "$d.keys.sort", "[\"a\", \"f\", \"i\", \"t\"]");

    /* binary safe, and longer than the stack buffer */
    CHECK_RUBY(mrb, "$d[\"b\\0k\"] = \"v\\0\\xff\"; $d[\"b\\0k\"]",
               "\"v\\x00\\xff\"");
    CHECK_RUBY(mrb, "$d['b'] = nil; $d[\"b\"]", "nil");
    CHECK_RUBY(mrb, "s = 'x' * 20000; $d['long'] = s; $d['long'] == s",
               "true");
    CHECK_RUBY(mrb, "$d['long'].size", "20000");

    /* add */
    CHECK_RUBY(mrb, "$d.add('a', 'y')", "false");
    CHECK_RUBY(mrb, "$d.add('new', 'y')", "true");
    CHECK_RUBY(mrb, "$d.safe_add('new2', 1, ttl: 10)", "true");
    CHECK_RAISES(mrb, "$d.add('n', nil)", "cannot add nil (ArgumentError)");

    /* incr */
    CHECK_RUBY(mrb, "$d.incr('c')", "nil");
    CHECK_RUBY(mrb, "$d.incr('c', 1, init: 0)", "1");
    CHECK_RUBY(mrb, "$d.incr('c', 5)", "6");
    CHECK_RUBY(mrb, "$d.incr('c', -7)", "-1");
    CHECK_RUBY(mrb, "$d.incr('c', 0.5)", "-0.5");
    CHECK_RUBY(mrb, "$d.incr('c2', 2, init: 10, ttl: 60)", "12");
    CHECK_RUBY(mrb, "t = $d.ttl('c2'); t > 50 && t <= 60", "true");
    CHECK_RAISES(mrb, "$d.incr('a')", "shared dictionary \"ruby\": the value "
                 "is not a number (TypeError)");
    CHECK_RAISES(mrb, "$d.incr('c', 'x')", "expected an Integer");
    CHECK_RAISES(mrb, "$d.set('m', 9223372036854775807); $d.incr('m')",
                 "shared dictionary \"ruby\": integer overflow (RangeError)");

    /* ttl, delete */
    CHECK_RUBY(mrb, "$d.ttl('a')", "-1");
    CHECK_RUBY(mrb, "$d.ttl('nope')", "nil");
    CHECK_RUBY(mrb, "$d.set('e', 1, ttl: 0.05); $d.ttl('e') <= 0.05", "true");
    sleep_ms(100);
    CHECK_RUBY(mrb, "$d['e']", "nil");
    CHECK_RAISES(mrb, "$d.set('e', 1, ttl: 0)", "ttl must be a positive");
    CHECK_RAISES(mrb, "$d.set('e', 1, ttl: 'x')", "ttl must be a number");
    CHECK_RAISES(mrb, "$d.set('e', 1, tll: 1)", "unknown keyword");
    CHECK_RUBY(mrb, "$d.delete('a')", "true");
    CHECK_RUBY(mrb, "$d.delete('a')", "false");

    /* hold, release */
    CHECK_RUBY(mrb, "$d.hold('/x.php')", "1");
    CHECK_RUBY(mrb, "$d.hold('/x.php', 2)", "3");
    CHECK_RUBY(mrb, "$d.release('/x.php')", "2");
    CHECK_RUBY(mrb, "$d.release('/x.php', 10)", "0");
    CHECK_RUBY(mrb, "$d.release('/x.php')", "nil");
    CHECK_RUBY(mrb, "$d['/x.php']", "0");
    CHECK_RAISES(mrb, "$d.hold('/x.php', 0)", "the count must be positive");

    /* values and keys it refuses */
    CHECK_RAISES(mrb, "$d['s'] = :sym", "SharedDict values are String, "
                 "Integer, Float, true or false, not Symbol");
    CHECK_RAISES(mrb, "$d[''] = 1", "SharedDict keys cannot be empty");
    CHECK_RAISES(mrb, "$d[1] = 1",
                 "Integer cannot be converted to String (TypeError)");

    /* errors */
    CHECK_RAISES(mrb, "SharedDict.new('missing')",
                 "no shared dictionary named \"missing\"");
    CHECK_RUBY(mrb, "begin; SharedDict.new('missing'); rescue "
               "SharedDict::Error; :ok; end", ":ok");
    CHECK_RUBY(mrb, "SharedDict::FullError.superclass", "SharedDict::Error");
    CHECK_RUBY(mrb, "SharedDict::Error.superclass", "StandardError");

    /* flush_all */
    CHECK_RUBY(mrb, "$d.flush_all; [$d.size, $d.keys]", "[0, []]");

    mrb_close(mrb);
}


TEST(ruby_full_dictionary)
{
    mrb_state  *mrb;

    mrb = ruby_open();
    REQUIRE(mrb != NULL);

    /* set evicts; safe_set and add refuse */
    CHECK_RUBY(mrb, "$s = SharedDict.new('rsmall'); $s.flush_all; "
               "500.times { |i| $s[\"k#{i}\"] = 'v' * 100 }; "
               "[$s['k0'], $s['k499'].size]", "[nil, 100]");
    CHECK_RAISES(mrb, "$s.safe_set('more', 'v' * 100)",
                 "shared dictionary \"rsmall\" is full "
                 "(SharedDict::FullError)");
    CHECK_RAISES(mrb, "$s.add('more', 'v' * 100)",
                 "shared dictionary \"rsmall\" is full");
    CHECK_RAISES(mrb, "$s.safe_add('more', 'v' * 100)",
                 "shared dictionary \"rsmall\" is full");
    CHECK_RAISES(mrb, "$s['huge'] = 'v' * 100_000",
                 "entry too large for shared dictionary \"rsmall\"");
    CHECK_RUBY(mrb, "$s['k499'].size", "100");

    mrb_close(mrb);
}


/* Benchmarks. */

static double
bench_incr(mrb_shdict_zone *z, int nproc, int per)
{
    int       i;
    pid_t     pids[8];
    uint64_t  start;

    start = unit_now_ns();

    for (i = 0; i < nproc; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            for (int k = 0; k < per; k++) {
                incr(z, "n", 1);
            }
            _exit(0);
        }
    }

    for (i = 0; i < nproc; i++) {
        unit_child_status(pids[i]);
    }

    /* wall time per call as each process saw it */
    return (unit_now_ns() - start) / 1e3 / per;
}


BENCH(shdict_incr)
{
    int               per;
    char              label[96];
    mrb_shdict_zone  *z;

    z = zone_new(1024 * 1024);
    REQUIRE(z != NULL);

    per = 2000000;
    unit_report("incr, 1 process (us per call)", bench_incr(z, 1, per), "us");
    unit_report("incr, 2 processes contending (us per call)",
                bench_incr(z, 2, per), "us");
    CHECK_EQ(get_int(z, "n"), 3 * per);

    snprintf(label, sizeof(label), "calls per process: %d", per);
    unit_report(label, 0, "");
    zone_free(z);
}


static double
bench_ruby(const char *code, int nproc, int per)
{
    int         i;
    pid_t       pids[8];
    uint64_t    start;
    mrb_state  *mrb;

    start = unit_now_ns();

    for (i = 0; i < nproc; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            mrb = mrb_open();
            mrb_shdict_define(mrb, mrb->object_class);
            mrb_load_string(mrb, code);
            _exit(mrb->exc != NULL);
        }
    }

    for (i = 0; i < nproc; i++) {
        CHECK_EQ(unit_child_status(pids[i]), 0);
    }

    return (unit_now_ns() - start) / 1e3 / per;
}


BENCH(shdict_ruby)
{
    mrb_state  *mrb;

    mrb = ruby_open();
    REQUIRE(mrb != NULL);
    mrb_close(mrb);

    unit_report("Ruby d.incr('n'), 2 processes (us per call)",
        bench_ruby("d = SharedDict.new('ruby'); i = 0; "
                   "while i < 1000000; d.incr('n', 1, init: 0); i += 1; end",
                   2, 1000000), "us");
    unit_report("Ruby d.hold(f); d.release(f), 2 processes (us per pair)",
        bench_ruby("d = SharedDict.new('ruby'); i = 0; "
                   "while i < 500000; d.hold('/var/www/html/index.php'); "
                   "d.release('/var/www/html/index.php'); i += 1; end",
                   2, 500000), "us");
    unit_report("Ruby empty loop, 2 processes (us per iteration)",
        bench_ruby("i = 0; while i < 1000000; i += 1; end", 2, 1000000),
        "us");
}
