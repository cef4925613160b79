/*
 * libFuzzer target: the Ruby-facing wire checks (mrb_http_check_header,
 * _header_value, _uri, _target, _args) in one interpreter opened once,
 * with arbitrary bytes as Ruby Strings, the way a script's values reach
 * them.
 *
 * Input: a selector byte, a split byte, then bytes cut at the split into a
 * name and a value.  A check raises ArgumentError (caught here) exactly when
 * the oracle of fuzz_http_oracle.h refuses the bytes, and otherwise hands
 * back exactly the bytes it was given; anything else (another exception,
 * other bytes, a leftover mrb->exc, an arena that grows) aborts.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mruby.h>
#include <mruby/error.h>
#include <mruby/string.h>

#include "mrb_http_check.h"
#include "fuzz_http_oracle.h"

typedef struct {
    int            which;
    mrb_value      name, value;
    mrb_http_str   out_name, out_value;
} fuzz_call;

static mrb_state  *fuzz_mrb;


static mrb_value
fuzz_body(mrb_state *mrb, void *ud)
{
    fuzz_call  *c = ud;

    switch (c->which) {

    case 0:
        mrb_http_check_header(mrb, c->name, c->value, &c->out_name,
                              &c->out_value);
        break;

    case 1:
        mrb_http_check_header_value(mrb, "X-Fuzz", c->value, &c->out_value);
        break;

    case 2:
        mrb_http_check_uri(mrb, "uri=", c->value, &c->out_value);
        break;

    case 3:
        mrb_http_check_target(mrb, "redirect target", c->value,
                              &c->out_value);
        break;

    default:
        mrb_http_check_args(mrb, "args=", c->value, &c->out_value);
        break;
    }

    return mrb_nil_value();
}


static void
same_bytes(const mrb_http_str *s, const uint8_t *p, size_t len)
{
    if (s->len != len || (len > 0 && memcmp(s->data, p, len) != 0)) {
        abort();
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_call       c;
    mrb_value       exc;
    mrb_bool        failed;
    size_t          split, vlen;
    const uint8_t  *v;
    int             ai, ok;

    if (fuzz_mrb == NULL) {
        fuzz_mrb = mrb_open();
        if (fuzz_mrb == NULL) {
            abort();
        }
    }

    if (size < 2) {
        return 0;
    }

    memset(&c, 0, sizeof(c));
    c.which = data[0] % 5;
    split = data[1] % (size - 1);

    ai = mrb_gc_arena_save(fuzz_mrb);

    c.name = mrb_str_new(fuzz_mrb, (const char *) data + 2, split);
    v = data + 2 + split;
    vlen = size - 2 - split;
    c.value = mrb_str_new(fuzz_mrb, (const char *) v, vlen);

    exc = mrb_protect_error(fuzz_mrb, fuzz_body, &c, &failed);

    if (fuzz_mrb->exc != NULL) {
        abort();
    }

    switch (c.which) {
    case 0:
        ok = oracle_name(data + 2, split) && oracle_value(v, vlen);
        break;
    case 1:
        ok = oracle_value(v, vlen);
        break;
    case 2:
        ok = oracle_uri(v, vlen, 1, 0);
        break;
    case 3:
        ok = oracle_uri(v, vlen, 0, 0);
        break;
    default:
        ok = oracle_uri(v, vlen, 0, 1);
        break;
    }

    if (failed) {
        if (ok || !mrb_obj_is_kind_of(fuzz_mrb, exc,
                                      mrb_class_get(fuzz_mrb, "ArgumentError")))
        {
            abort();
        }

    } else {
        if (!ok) {
            abort();
        }

        if (c.which == 0) {
            same_bytes(&c.out_name, data + 2, split);
        }

        same_bytes(&c.out_value, v, vlen);
    }

    mrb_gc_arena_restore(fuzz_mrb, ai);

    if (mrb_gc_arena_save(fuzz_mrb) != ai) {
        abort();
    }

    return 0;
}
