/*
 * libFuzzer target: JSON.parse and the Regexp engine's String methods
 * (src/lib) on arbitrary bytes, in one interpreter opened once.
 *
 * Input: a selector byte.  Even: the rest is a JSON document; a parse that
 * succeeds must generate text that parses and generates to the same text
 * (all with max_nesting: false, so that only the stack bounds the depth).  Odd: a
 * split byte, then a pattern and a subject cut at it; a pattern that
 * compiles is used by =~, scan, split and gsub on the subject.  Only the
 * library's own errors (JSON::JSONError, RegexpError, ArgumentError for
 * bytes that are not UTF-8) may be raised; anything else aborts.
 *
 * Each input runs on a coroutine's stack of the default size (256 KB), as
 * a script that waits does: a pattern or a document nested deeper than
 * that stack allows must raise, not reach the guard page.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mruby.h>
#include <mruby/error.h>
#include <mruby/hash.h>
#include <mruby/string.h>
#include <mruby/variable.h>

#include "mrb_coro.h"
#include "mrb_interp.h"
#include "mrb_lib.h"

static mrb_interp     *fuzz_interp;
static mrb_coro_pool  *fuzz_pool;

static int
fuzz_write(mrb_run_rec *run, const char *data, size_t len)
{
    return 0;
}

static void
fuzz_log(void *target, mrb_run_rec *run, int level, const char *msg,
    size_t len)
{
}

static const mrb_server  fuzz_server = {
    .name = "Fuzz", .class_name = "Apache", .module_name = "mod_mruby",
    .module_version = "fuzz", .write = fuzz_write, .log = fuzz_log,
    .parts = mrb_parts
};

typedef struct {
    mrb_state  *mrb;
    int         json;
    mrb_value   a, b;
    mrb_value   result;     /* the exception, when failed */
    mrb_bool    failed;
} fuzz_input;


static mrb_value
fuzz_body(mrb_state *mrb, void *ud)
{
    fuzz_input  *in = ud;
    mrb_value    json, opts, v, s, back, re;

    if (in->json) {
        json = mrb_obj_value(mrb_module_get(mrb, "JSON"));
        opts = mrb_hash_new(mrb);
        mrb_hash_set(mrb, opts, mrb_symbol_value(mrb_intern_lit(mrb,
                     "max_nesting")), mrb_false_value());
        v = mrb_funcall(mrb, json, "parse", 2, in->a, opts);
        s = mrb_funcall(mrb, json, "generate", 2, v, opts);
        /* the text, not the value: a Float's to_s may round once */
        back = mrb_funcall(mrb, json, "generate", 2,
                           mrb_funcall(mrb, json, "parse", 2, s, opts), opts);
        if (!mrb_str_equal(mrb, s, back)) {
            abort();
        }
        return mrb_nil_value();
    }

    re = mrb_funcall(mrb, mrb_obj_value(mrb_class_get(mrb, "Regexp")), "new",
                     1, in->a);
    mrb_funcall(mrb, in->b, "=~", 1, re);
    mrb_funcall(mrb, in->b, "scan", 1, re);
    mrb_funcall(mrb, in->b, "split", 1, re);
    mrb_funcall(mrb, in->b, "gsub", 2, re, mrb_str_new_lit(mrb, "<\\0\\1>"));
    mrb_funcall(mrb, in->b, "index", 2, re, mrb_fixnum_value(1));
    mrb_funcall(mrb, in->b, "rindex", 1, re);
    return mrb_nil_value();
}


static void
fuzz_on_coroutine(mrb_coro *coro, void *arg)
{
    fuzz_input  *in = arg;

    in->result = mrb_protect_error(in->mrb, fuzz_body, in, &in->failed);
}


static int
fuzz_allowed(mrb_state *mrb, mrb_value exc)
{
    static const char  *names[] = { "RegexpError", "ArgumentError" };
    struct RClass      *c = mrb_obj_class(mrb, exc);
    size_t              i;

    if (mrb_obj_is_kind_of(mrb, exc, mrb_class_get_under(mrb,
            mrb_module_get(mrb, "JSON"), "JSONError")))
    {
        return 1;
    }
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (c == mrb_class_get(mrb, names[i])) {
            return 1;
        }
    }
    return 0;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mrb_state   *mrb;
    fuzz_input   in;
    mrb_coro    *coro;
    const uint8_t *cut;
    char         err[256];
    int          ai;

    if (fuzz_interp == NULL) {
        fuzz_interp = mrb_interp_open(&fuzz_server, NULL, err, sizeof(err));
        fuzz_pool = mrb_coro_pool_new(MRB_CORO_STACK_DEFAULT, 1);
        if (fuzz_interp == NULL || fuzz_pool == NULL) {
            abort();
        }
    }
    mrb = mrb_interp_state(fuzz_interp);

    if (size < 2) {
        return 0;
    }

    ai = mrb_gc_arena_save(mrb);
    in.mrb = mrb;
    in.json = (data[0] & 1) == 0;
    if (in.json) {
        in.a = mrb_str_new(mrb, (const char *) data + 1, size - 1);
        in.b = mrb_nil_value();
    } else {
        cut = memchr(data + 2, data[1], size - 2);
        if (cut == NULL) {
            cut = data + size;
        }
        in.a = mrb_str_new(mrb, (const char *) data + 2, cut - (data + 2));
        in.b = cut < data + size
               ? mrb_str_new(mrb, (const char *) cut + 1,
                             (data + size) - (cut + 1))
               : mrb_str_new(mrb, NULL, 0);
    }

    coro = mrb_coro_new(fuzz_pool, fuzz_on_coroutine, &in);
    if (coro == NULL || mrb_coro_resume(coro) != 0) {
        abort();    /* no stack, or the body waited: neither can happen */
    }
    if (in.failed && !fuzz_allowed(mrb, in.result)) {
        abort();
    }
    mrb->exc = NULL;
    mrb_gc_arena_restore(mrb, ai);
    return 0;
}
