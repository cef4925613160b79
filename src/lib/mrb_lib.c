/*
 * Defines every class of src/lib in a new interpreter, then the library's
 * Ruby (its .rb files, compiled into mrb_lib_irep).  Defining costs only at
 * creation: nothing here runs per request, and what needs setup (a
 * compiled pattern, a digest context) is made when first used.
 */

#include <stdint.h>
#include <string.h>

#include <mruby.h>
#include <mruby/data.h>
#include <mruby/irep.h>
#include <mruby/variable.h>

#include "mrb_digest.h"
#include "mrb_json.h"
#include "mrb_lib.h"
#include "mrb_regexp.h"
#include "mrb_securerandom.h"
#include "mrb_sys.h"

extern const uint8_t mrb_lib_irep[];


static void
lib_free(mrb_state *mrb, void *p)
{
    mrb_interp_head  *head = mrb->ud;

    if (head != NULL && head->part_state == p) {
        head->part_state = NULL;
    }
    mrb_free(mrb, p);
}

static const struct mrb_data_type  lib_type = { "mrb_lib", lib_free };


static void
lib_define(mrb_state *mrb)
{
    mrb_interp_head  *head = mrb->ud;
    struct RData     *d;

    /* owned by the GC (held by Kernel), freed when the interpreter closes */
    d = mrb_data_object_alloc(mrb, mrb->object_class, NULL, &lib_type);
    d->data = mrb_calloc(mrb, 1, sizeof(mrb_lib));
    mrb_iv_set(mrb, mrb_obj_value(mrb->kernel_module),
               mrb_intern_lit(mrb, "__lib__"), mrb_obj_value(d));
    head->part_state = d->data;

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

    mrb_load_irep(mrb, mrb_lib_irep);
}


const mrb_part  mrb_lib_part = { "lib", lib_define, NULL, NULL, NULL };


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
 * a byte at a time cost ~9 instructions, a tenth of a routing match
 * (bench/callgrind.py nginx regexp, 2026-11-24). */
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
