/*
 * libFuzzer target: sequences of shared-dictionary operations (set, add,
 * get, incr, delete, hold, release, flush, count, keys) on one zone,
 * checked against a model of what each should answer.
 *
 * Each input is a program: every operation reads an opcode byte, a key
 * byte (16 keys) and its operands from the input.  The zone is large
 * enough that nothing is evicted and no entry expires (no TTL), so the
 * model is a plain table; a disagreement aborts, which libFuzzer reports
 * as a crash with the input.  Operations that would replace the value of
 * a held key are skipped: what a hold leaves after a set is not part of
 * the contract (mrb_shdict_zone.h).
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "mrb_shdict_zone.h"

#define ZONE_SIZE  (1024 * 1024)
#define NKEYS      16
#define VAL_MAX    48

typedef struct {
    int              present;
    mrb_shdict_type  type;
    int64_t          i;
    double           f;
    char             s[VAL_MAX];
    size_t           len;
    int64_t          held;      /* what this process holds on it */
} model_entry;

typedef struct {
    const uint8_t  *p;
    size_t          left;
} program;

static mrb_shdict_zone  *zone;
static model_entry       model[NKEYS];


static unsigned
next_byte(program *pg)
{
    if (pg->left == 0) {
        return 0;
    }

    pg->left--;
    return *pg->p++;
}


static int64_t
next_int(program *pg)
{
    uint64_t  v = 0;
    int       i;

    for (i = 0; i < 8; i++) {
        v = (v << 8) | next_byte(pg);
    }

    return (int64_t) v;
}


static void
expect(int cond)
{
    if (!cond) {
        abort();
    }
}


/* The key's name: some names share a hash bucket's neighbours, one has a
 * NUL inside. */
static size_t
key_name(unsigned k, char *buf)
{
    static const char  *names[NKEYS] = {
        "a", "b", "key", "k\0ey", "/var/www/x.php", "A", "ab", "ba",
        "0", "00", "long-key-long-key-long-key-long-key", "z", "zz", "\xff",
        "\x01\x02", " "
    };
    static const size_t  lens[NKEYS] = {
        1, 1, 3, 4, 14, 1, 2, 2, 1, 2, 35, 1, 2, 1, 2, 1
    };

    memcpy(buf, names[k], lens[k]);
    return lens[k];
}


static size_t
model_count(void)
{
    size_t  i, n = 0;

    for (i = 0; i < NKEYS; i++) {
        n += model[i].present;
    }

    return n;
}


static void
check_get(unsigned k, const char *key, size_t klen, size_t cap)
{
    char              buf[VAL_MAX];
    mrb_shdict_value  v;
    mrb_shdict_rc     rc;
    model_entry      *m = &model[k];

    rc = mrb_shdict_zone_get(zone, key, klen, &v, buf, cap);

    if (!m->present) {
        expect(rc == MRB_SHDICT_NOT_FOUND);
        return;
    }

    expect(v.type == m->type);

    switch (m->type) {
    case MRB_SHDICT_STRING:
        expect(v.len == m->len);
        if (cap < m->len) {
            expect(rc == MRB_SHDICT_TRUNCATED);
        } else {
            expect(rc == MRB_SHDICT_OK);
            expect(memcmp(buf, m->s, m->len) == 0);
        }
        break;
    case MRB_SHDICT_INTEGER:
        expect(rc == MRB_SHDICT_OK && v.i == m->i);
        break;
    case MRB_SHDICT_FLOAT:
        expect(rc == MRB_SHDICT_OK && memcmp(&v.f, &m->f, sizeof(double)) == 0);
        break;
    default:
        expect(rc == MRB_SHDICT_OK);
    }
}


static void
run_op(program *pg)
{
    char              key[40], sbuf[VAL_MAX];
    size_t            klen, len, need, count;
    unsigned          op, k;
    int64_t           n, total;
    mrb_shdict_value  v, init, out;
    mrb_shdict_rc     rc;
    model_entry      *m;
    static char       keys[4096];

    op = next_byte(pg) % 12;
    k = next_byte(pg) % NKEYS;
    m = &model[k];
    klen = key_name(k, key);

    switch (op) {
    case 0:     /* set a String */
    case 1:     /* add a String */
        len = next_byte(pg) % VAL_MAX;
        for (size_t i = 0; i < len; i++) {
            sbuf[i] = (char) next_byte(pg);
        }
        if (m->held != 0) {
            return;
        }
        v.type = MRB_SHDICT_STRING;
        v.str = sbuf;
        v.len = len;
        rc = mrb_shdict_zone_set(zone, key, klen, &v, 0,
                                 op == 1 ? MRB_SHDICT_ADD : 0);
        if (op == 1 && m->present) {
            expect(rc == MRB_SHDICT_EXISTS);
            return;
        }
        expect(rc == MRB_SHDICT_OK);
        m->present = 1;
        m->type = MRB_SHDICT_STRING;
        memcpy(m->s, sbuf, len);
        m->len = len;
        return;

    case 2:     /* set an Integer, a Float, true or false */
        n = next_int(pg);
        if (m->held != 0) {
            return;
        }
        memset(&v, 0, sizeof(v));
        v.type = (mrb_shdict_type) (MRB_SHDICT_INTEGER + (n & 3));
        v.i = n >> 2;
        v.f = (double) (n >> 2) / 8;
        expect(mrb_shdict_zone_set(zone, key, klen, &v, 0, 0)
               == MRB_SHDICT_OK);
        m->present = 1;
        m->type = v.type;
        m->i = v.i;
        m->f = v.f;
        return;

    case 3:     /* get, into a buffer of any size */
        check_get(k, key, klen, next_byte(pg) % (VAL_MAX + 1));
        return;

    case 4:     /* incr by a small Integer, with or without init */
        n = (int8_t) next_byte(pg);
        init.type = MRB_SHDICT_INTEGER;
        init.i = next_int(pg);
        if (m->held != 0) {
            return;
        }
        v.type = MRB_SHDICT_INTEGER;
        v.i = n;
        rc = mrb_shdict_zone_incr(zone, key, klen, &v,
                                  (init.i & 1) ? &init : NULL, 0, &out);
        if (!m->present) {
            if (!(init.i & 1)) {
                expect(rc == MRB_SHDICT_NOT_FOUND);
                return;
            }
            /* an absent key starts from init: init + n is stored, or,
             * when that overflows, nothing is */
            if (__builtin_add_overflow(init.i, n, &total)) {
                expect(rc == MRB_SHDICT_OVERFLOW);
                return;
            }
            expect(rc == MRB_SHDICT_OK && out.type == MRB_SHDICT_INTEGER
                   && out.i == total);
            m->present = 1;
            m->type = MRB_SHDICT_INTEGER;
            m->i = total;
            return;
        }
        if (m->type == MRB_SHDICT_INTEGER) {
            if (__builtin_add_overflow(m->i, n, &total)) {
                expect(rc == MRB_SHDICT_OVERFLOW);
                return;
            }
            expect(rc == MRB_SHDICT_OK && out.type == MRB_SHDICT_INTEGER
                   && out.i == total);
            m->i = total;
        } else if (m->type == MRB_SHDICT_FLOAT) {
            expect(rc == MRB_SHDICT_OK && out.type == MRB_SHDICT_FLOAT);
            m->f = m->f + (double) n;
            expect(memcmp(&out.f, &m->f, sizeof(double)) == 0);
        } else {
            expect(rc == MRB_SHDICT_NOT_A_NUMBER);
        }
        return;

    case 5:     /* delete (and the holds on it) */
        rc = mrb_shdict_zone_delete(zone, key, klen);
        expect(rc == (m->present ? MRB_SHDICT_OK : MRB_SHDICT_NOT_FOUND));
        memset(m, 0, sizeof(*m));
        return;

    case 6:     /* hold */
        n = 1 + next_byte(pg) % 4;
        rc = mrb_shdict_zone_hold(zone, key, klen, n, &total);
        if (m->present && m->type != MRB_SHDICT_INTEGER) {
            expect(rc == MRB_SHDICT_NOT_A_NUMBER);
            return;
        }
        if (!m->present) {
            m->present = 1;
            m->type = MRB_SHDICT_INTEGER;
            m->i = 0;
        }
        if (__builtin_add_overflow(m->i, n, &total)) {
            expect(rc == MRB_SHDICT_OVERFLOW);
            return;
        }
        expect(rc == MRB_SHDICT_OK);
        m->i += n;
        m->held += n;
        expect(total == m->i);
        return;

    case 7:     /* release */
        n = 1 + next_byte(pg) % 4;
        rc = mrb_shdict_zone_release(zone, key, klen, n, &total);
        if (m->held == 0) {
            /* nothing changes; a value that is not an Integer says so */
            expect(rc == ((m->present && m->type != MRB_SHDICT_INTEGER)
                          ? MRB_SHDICT_NOT_A_NUMBER : MRB_SHDICT_NOT_FOUND));
            return;
        }
        expect(rc == MRB_SHDICT_OK);
        if (n > m->held) {
            n = m->held;
        }
        m->i -= n;
        m->held -= n;
        expect(total == m->i);
        return;

    case 8:     /* flush */
        if (next_byte(pg) % 4 != 0) {
            return;
        }
        expect(mrb_shdict_zone_flush(zone) == MRB_SHDICT_OK);
        memset(model, 0, sizeof(model));
        return;

    case 9:     /* count */
        expect(mrb_shdict_zone_count(zone) == model_count());
        return;

    case 10:    /* keys */
        rc = mrb_shdict_zone_keys(zone, keys, sizeof(keys), &need, &count);
        expect(rc == MRB_SHDICT_OK && count == model_count());
        return;

    default:    /* ttl: nothing expires here */
        {
            int64_t  ms;

            rc = mrb_shdict_zone_ttl(zone, key, klen, &ms);
            expect(rc == (m->present ? MRB_SHDICT_OK
                                     : MRB_SHDICT_NOT_FOUND));
            expect(!m->present || ms == -1);
        }
        return;
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    program   pg = { data, size };
    void     *mem;
    unsigned  k;
    int64_t   total;
    char      key[40];

    if (zone == NULL) {
        mem = mmap(NULL, ZONE_SIZE, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED) {
            abort();
        }
        zone = mrb_shdict_zone_init(mem, ZONE_SIZE);
        if (zone == NULL) {
            abort();
        }
    }

    /* every input starts from an empty zone and holds nothing */
    for (k = 0; k < NKEYS; k++) {
        if (model[k].held != 0) {
            mrb_shdict_zone_release(zone, key, key_name(k, key),
                                    model[k].held, &total);
        }
    }
    expect(mrb_shdict_zone_flush(zone) == MRB_SHDICT_OK);
    memset(model, 0, sizeof(model));

    while (pg.left > 0) {
        run_op(&pg);
    }

    for (k = 0; k < NKEYS; k++) {
        check_get(k, key, key_name(k, key), VAL_MAX);
    }
    expect(mrb_shdict_zone_count(zone) == model_count());

    return 0;
}
