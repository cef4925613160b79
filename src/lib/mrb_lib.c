/*
 * Defines every class of src/lib in a new interpreter.  Defining costs
 * only at creation: nothing here runs per request, and what needs setup
 * (a compiled pattern, a digest context) is made when first used.
 */

#include <stdint.h>
#include <string.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/data.h>
#include <mruby/error.h>
#include <mruby/variable.h>

#include "mrb_digest.h"
#include "mrb_json.h"
#include "mrb_lib.h"
#include "mrb_regexp.h"
#include "mrb_securerandom.h"
#include "mrb_sys.h"


static void
lib_free(mrb_state *mrb, void *p)
{
    mrb_interp_head  *head = mrb->ud;

    if (head != NULL && head->lib == p) {
        head->lib = NULL;
    }
    mrb_free(mrb, p);
}

static const struct mrb_data_type  lib_type = { "mrb_lib", lib_free };


void
mrb_lib_define(mrb_state *mrb)
{
    mrb_interp_head  *head = mrb->ud;
    struct RData     *d;

    /* owned by the GC (held by Kernel), freed when the interpreter closes */
    d = mrb_data_object_alloc(mrb, mrb->object_class, NULL, &lib_type);
    d->data = mrb_calloc(mrb, 1, sizeof(mrb_lib));
    mrb_iv_set(mrb, mrb_obj_value(mrb->kernel_module),
               mrb_intern_lit(mrb, "__lib__"), mrb_obj_value(d));
    head->lib = d->data;

    mrb_regexp_define(mrb);
    mrb_matchdata_define(mrb);
    mrb_regexp_string_define(mrb);
    mrb_json_define(mrb);
    mrb_digest_define(mrb);
    mrb_securerandom_define(mrb);
    mrb_env_define(mrb);
    mrb_process_define(mrb);
    mrb_dir_define(mrb);
    mrb_uname_define(mrb);
    mrb_kernel_ext_define(mrb);
}


/*
 * What a class keeps of a run (it sets run_state): dropped when the run
 * ends, taken aside and put back around the run's waits.  One entry holds
 * all three, so that what a take keeps is what run_end drops.
 */
typedef struct {
    void       (*run_end)(mrb_state *mrb);
    mrb_value  (*take)(mrb_state *mrb);         /* nil: nothing */
    void       (*put_back)(mrb_state *mrb, mrb_value kept);
} lib_run_state;

static const lib_run_state  lib_run_states[] = {
    { mrb_regexp_run_end, mrb_regexp_take, mrb_regexp_put_back },
};

#define LIB_RUN_STATES  (sizeof(lib_run_states) / sizeof(lib_run_states[0]))


void
mrb_lib_run_end_slow(mrb_state *mrb)
{
    mrb_lib  *lib = mrb_lib_get(mrb);
    size_t    i;

    for (i = 0; i < LIB_RUN_STATES; i++) {
        lib_run_states[i].run_end(mrb);
    }
    lib->run_state = 0;
}


/* An Array of what each entry of lib_run_states took, by index (made at
 * the first that took something), or nil. */
static mrb_value
lib_take_body(mrb_state *mrb, void *arg)
{
    mrb_value  kept = mrb_nil_value(), one;
    size_t     i;

    for (i = 0; i < LIB_RUN_STATES; i++) {
        one = lib_run_states[i].take(mrb);      /* in the arena */
        if (mrb_nil_p(one)) {
            continue;
        }
        if (mrb_nil_p(kept)) {
            kept = mrb_ary_new_capa(mrb, LIB_RUN_STATES);
        }
        mrb_ary_set(mrb, kept, (mrb_int) i, one);
    }

    return kept;
}


int
mrb_lib_take(mrb_state *mrb, mrb_value *kept)
{
    mrb_lib   *lib = mrb_lib_get(mrb);
    mrb_bool   failed = FALSE;

    *kept = mrb_nil_value();

    if (lib != NULL && lib->run_state) {
        *kept = mrb_protect_error(mrb, lib_take_body, NULL, &failed);
        mrb_lib_run_end_slow(mrb);
    }

    return failed ? -1 : 0;
}


void
mrb_lib_put_back(mrb_state *mrb, mrb_value kept)
{
    mrb_value  one;
    size_t     i;

    if (mrb_nil_p(kept)) {
        return;
    }

    for (i = 0; i < (size_t) RARRAY_LEN(kept); i++) {
        one = RARRAY_PTR(kept)[i];
        if (!mrb_nil_p(one)) {
            lib_run_states[i].put_back(mrb, one);
        }
    }
}


int
mrb_lib_utf8_len(const char *s, const char *end)
{
    const unsigned char  *p = (const unsigned char *) s;
    unsigned int          c = *p, n, i, cp;

    if (c < 0x80) {
        return 1;
    }

    if (c >= 0xc2 && c <= 0xdf) {
        n = 1;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 2;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 3;
        cp = c & 0x07;
    } else {
        return 0;
    }

    if ((size_t) (end - s) <= n) {
        return 0;
    }

    for (i = 1; i <= n; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            return 0;
        }
        cp = (cp << 6) | (p[i] & 0x3f);
    }

    if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff)))
        || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
    {
        return 0;
    }

    return (int) n + 1;
}


/* Eight bytes at a time while they are ASCII (URIs, keys, most text):
 * a byte at a time cost ~9 instructions, a tenth of a routing match. */
int
mrb_lib_utf8_valid(const char *s, size_t len)
{
    const char  *end = s + len;
    uint64_t     w;
    int          n;

    while (s < end) {
        if (end - s >= 8) {
            memcpy(&w, s, 8);
            if ((w & 0x8080808080808080ull) == 0) {
                s += 8;
                continue;
            }
        }
        if ((unsigned char) *s < 0x80) {
            s++;
            continue;
        }
        n = mrb_lib_utf8_len(s, end);
        if (n == 0) {
            return 0;
        }
        s += n;
    }

    return 1;
}
