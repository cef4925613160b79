/*
 * The String methods that take a pattern (sub, gsub, scan, split, index,
 * [], match, =~, ...): a Regexp goes to Oniguruma here, anything else to
 * the method mruby had before, so a String pattern costs what it did.
 * mruby's own methods are kept at define time: a C one as its function
 * (called directly, with the arguments still on mruby's stack), a Ruby one
 * under an alias (__str_sub ...).
 */

#include <string.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/data.h>
#include <mruby/hash.h>
#include <mruby/proc.h>
#include <mruby/string.h>
#include <mruby/variable.h>

#include "mrb_api.h"
#include "mrb_lib.h"
#include "mrb_regexp.h"
#include "mrb_mruby_version.h"    /* orig_names are C functions in 3.1.0,
                                      orig_aliased Ruby methods */

/* mruby's C methods replaced here; the same functions in every
 * interpreter of the process (one libmruby). */
enum {
    ORIG_INDEX, ORIG_RINDEX, ORIG_SPLIT, ORIG_AREF, ORIG_SLICE,
    ORIG_START_WITH, ORIG_N
};

static const char  *orig_names[ORIG_N] = {
    "index", "rindex", "split", "[]", "slice", "start_with?"
};

static mrb_func_t  orig_funcs[ORIG_N];     /* NULL: not a C function */

/* mruby's Ruby methods replaced here, kept as __str_NAME. */
static const char  *orig_aliased[] = {
    "sub", "sub!", "gsub", "gsub!", "partition", "rpartition"
};


static int
is_regexp(mrb_value v)
{
    return mrb_data_p(v) && DATA_TYPE(v) == &mrb_regexp_type;
}


/* mruby's own C method orig_names[i], or raises where it is none (then
 * another mruby than the one of the version guard above). */
static mrb_func_t
str_orig(mrb_state *mrb, int i)
{
    if (orig_funcs[i] == NULL) {
        mrb_raisef(mrb, E_NOTIMP_ERROR,
                   "String#%s: mruby's own method is not a C function",
                   orig_names[i]);
    }

    return orig_funcs[i];
}


/* Calls mruby's Ruby method name (kept as __str_name) with the arguments
 * of the current call. */
static mrb_value
str_call_orig(mrb_state *mrb, mrb_value self, const char *alias)
{
    mrb_value  *argv, blk;
    mrb_int     argc;

    mrb_get_args(mrb, "*&", &argv, &argc, &blk);
    return mrb_funcall_with_block(mrb, self, mrb_intern_cstr(mrb, alias),
                                  argc, argv, blk);
}


/* A pattern given as a String where Ruby takes it literally (scan). */
static mrb_value
str_literal_regexp(mrb_state *mrb, mrb_value pat)
{
    struct RClass  *c = mrb_lib_get(mrb)->regexp_class;
    mrb_value       src;

    src = mrb_funcall(mrb, mrb_obj_value(c), "escape", 1, pat);
    return mrb_funcall(mrb, mrb_obj_value(c), "new", 1, src);
}


/* A pattern given as a String where Ruby compiles it (match). */
static mrb_value
str_to_regexp(mrb_state *mrb, mrb_value pat)
{
    if (is_regexp(pat)) {
        return pat;
    }

    return mrb_funcall(mrb, mrb_obj_value(mrb_lib_get(mrb)->regexp_class),
                       "new", 1, mrb_str_to_str(mrb, pat));
}


static void
str_cat_range(mrb_state *mrb, mrb_value out, mrb_value src, mrb_int b,
    mrb_int e)
{
    mrb_int  len = RSTRING_LEN(src);

    if (e > len) {
        e = len;
    }
    if (b < e) {
        mrb_str_cat(mrb, out, RSTRING_PTR(src) + b, e - b);
    }
}


/*
 * Appends repl with its references expanded as Ruby's sub does: \0 \& the
 * match, \1..\9 a group, \k<name> a named group, \` and \' what precedes
 * and follows, \\ a backslash; any other \x stays as written.
 */
static void
str_regsub(mrb_state *mrb, mrb_value out, mrb_value repl, mrb_value src,
    mrb_value re, const int *beg, const int *end, int ngroups,
    OnigRegion *region)
{
    const char  *p = RSTRING_PTR(repl), *q;
    mrb_int      i, len = RSTRING_LEN(repl), n;

    for (i = 0; i < len; i++) {
        if (p[i] != '\\' || i + 1 == len) {
            mrb_str_cat(mrb, out, p + i, 1);
            continue;
        }

        n = -1;
        switch (p[++i]) {
        case '0': case '1': case '2': case '3': case '4':
        case '5': case '6': case '7': case '8': case '9':
            n = p[i] - '0';
            break;
        case '&':
            n = 0;
            break;
        case '`':
            str_cat_range(mrb, out, src, 0, beg[0]);
            continue;
        case '\'':
            str_cat_range(mrb, out, src, end[0], RSTRING_LEN(src));
            continue;
        case '\\':
            mrb_str_cat(mrb, out, "\\", 1);
            continue;
        case 'k':
            q = (i + 1 < len && p[i + 1] == '<')
                ? memchr(p + i + 2, '>', len - i - 2) : NULL;
            if (q != NULL) {
                n = mrb_regexp_name_to_group(DATA_PTR(re), p + i + 2,
                                             q - (p + i + 2), region);
                if (n < 0) {
                    mrb_raisef(mrb, E_INDEX_ERROR,
                               "undefined group name reference: %s",
                               mrb_str_to_cstr(mrb, mrb_str_new(mrb, p + i + 2,
                                                   q - (p + i + 2))));
                }
                i = q - p;
                break;
            }
            /* fall through */
        default:
            mrb_str_cat(mrb, out, p + i - 1, 2);
            continue;
        }

        if (n < ngroups && beg[n] >= 0) {
            str_cat_range(mrb, out, src, beg[n], end[n]);
        }
    }
}


/*
 * sub, sub!, gsub, gsub! with a Regexp: the replacement is a String with
 * references, a Hash of matched text, or what the block returns (with $~
 * set to the match while it runs).  Returns the new String, or for the
 * bang forms self or nil when nothing matched.
 */
static mrb_value
str_sub_regexp(mrb_state *mrb, mrb_value self, int global, int bang)
{
    const OnigRegion  *region;
    mrb_value          re, repl = mrb_undef_value(), blk, src, out, md, val;
    mrb_int            offset = 0, len, b0, e0, n;
    int                matched = 0;

    mrb_get_args(mrb, "o|o&", &re, &repl, &blk);
    if (mrb_undef_p(repl) && mrb_nil_p(blk)) {
        mrb_raise(mrb, E_ARGUMENT_ERROR,
                  "wrong number of arguments (given 1, expected 2)");
    }
    if (!mrb_undef_p(repl) && !mrb_hash_p(repl)) {
        repl = mrb_str_to_str(mrb, repl);
    }
    if (bang) {
        mrb_check_frozen(mrb, mrb_basic_ptr(self));
    }

    /* the block may change self: search what it was */
    src = mrb_str_dup(mrb, self);
    len = RSTRING_LEN(src);
    out = mrb_str_new_capa(mrb, len);

    while (offset <= len
           && mrb_regexp_search(mrb, re, src, offset, 0, offset == 0,
                                &region) >= 0)
    {
        b0 = region->beg[0];
        e0 = region->end[0];
        matched = 1;
        str_cat_range(mrb, out, src, offset, b0);

        if (mrb_string_p(repl)) {
            /* no Ruby runs here: region stays this match's */
            str_regsub(mrb, out, repl, src, re, region->beg, region->end,
                       region->num_regs, (OnigRegion *) region);
            mrb_regexp_record(mrb, re, src, mrb_nil_value());
        } else {
            md = mrb_matchdata_new(mrb, re, src, region);
            mrb_regexp_record(mrb, re, src, md);
            if (mrb_hash_p(repl)) {
                val = mrb_hash_get(mrb, repl, mrb_matchdata_group(mrb, md, 0));
            } else {
                val = mrb_yield(mrb, blk, mrb_matchdata_group(mrb, md, 0));
            }
            val = mrb_obj_as_string(mrb, val);
            mrb_str_cat_str(mrb, out, val);
        }

        offset = e0;
        if (b0 == e0) {
            /* an empty match: copy one character and go past it */
            if (e0 >= len) {
                break;
            }
            n = mrb_regexp_char_len(re, RSTRING_PTR(src) + e0,
                                    RSTRING_PTR(src) + len);
            str_cat_range(mrb, out, src, e0, e0 + n);
            offset = e0 + n;
        }

        if (!global) {
            break;
        }
    }

    if (!matched) {
        mrb_regexp_record(mrb, re, mrb_nil_value(), mrb_nil_value());
        return bang ? mrb_nil_value() : mrb_str_dup(mrb, self);
    }

    str_cat_range(mrb, out, src, offset, len);

    if (bang) {
        mrb_funcall(mrb, self, "replace", 1, out);
        return self;
    }

    return out;
}


static mrb_value
str_sub(mrb_state *mrb, mrb_value self)
{
    mrb_value  *argv;
    mrb_int     argc;

    mrb_get_args(mrb, "*!", &argv, &argc);
    if (argc > 0 && is_regexp(argv[0])) {
        return str_sub_regexp(mrb, self, 0, 0);
    }
    return str_call_orig(mrb, self, "__str_sub");
}


static mrb_value
str_sub_bang(mrb_state *mrb, mrb_value self)
{
    mrb_value  *argv;
    mrb_int     argc;

    mrb_get_args(mrb, "*!", &argv, &argc);
    if (argc > 0 && is_regexp(argv[0])) {
        return str_sub_regexp(mrb, self, 0, 1);
    }
    return str_call_orig(mrb, self, "__str_sub!");
}


static mrb_value
str_gsub(mrb_state *mrb, mrb_value self)
{
    mrb_value  *argv;
    mrb_int     argc;

    mrb_get_args(mrb, "*!", &argv, &argc);
    if (argc > 0 && is_regexp(argv[0])) {
        return str_sub_regexp(mrb, self, 1, 0);
    }
    return str_call_orig(mrb, self, "__str_gsub");
}


static mrb_value
str_gsub_bang(mrb_state *mrb, mrb_value self)
{
    mrb_value  *argv;
    mrb_int     argc;

    mrb_get_args(mrb, "*!", &argv, &argc);
    if (argc > 0 && is_regexp(argv[0])) {
        return str_sub_regexp(mrb, self, 1, 1);
    }
    return str_call_orig(mrb, self, "__str_gsub!");
}


/* str.scan(pattern) [{ |m| ... }]: each match (or its groups). */
static mrb_value
str_scan(mrb_state *mrb, mrb_value self)
{
    const OnigRegion  *region;
    mrb_value          re, blk, src, ary, md, item;
    mrb_int            pos = 0, len, e0;
    int                i;

    mrb_get_args(mrb, "o&", &re, &blk);
    if (!is_regexp(re)) {
        re = str_literal_regexp(mrb, mrb_str_to_str(mrb, re));
    }

    src = mrb_str_dup(mrb, self);
    len = RSTRING_LEN(src);
    ary = mrb_ary_new(mrb);
    md = mrb_nil_value();

    while (pos <= len && mrb_regexp_search(mrb, re, src, pos, 0, pos == 0,
                                                 &region) >= 0) {
        e0 = region->end[0];
        pos = (region->beg[0] == e0)
              ? e0 + (e0 < len ? mrb_regexp_char_len(re, RSTRING_PTR(src) + e0,
                                                     RSTRING_PTR(src) + len)
                               : 1)
              : e0;

        md = mrb_matchdata_new(mrb, re, src, region);
        if (region->num_regs == 1) {
            item = mrb_matchdata_group(mrb, md, 0);
        } else {
            item = mrb_ary_new_capa(mrb, region->num_regs - 1);
            for (i = 1; i < region->num_regs; i++) {
                mrb_ary_push(mrb, item, mrb_matchdata_group(mrb, md, i));
            }
        }

        if (mrb_nil_p(blk)) {
            mrb_ary_push(mrb, ary, item);
        } else {
            mrb_regexp_record(mrb, re, src, md);
            mrb_yield(mrb, blk, item);
        }
    }

    mrb_regexp_record(mrb, re, mrb_nil_p(md) ? md : src, md);
    return mrb_nil_p(blk) ? ary : self;
}


/* split with a Regexp, as Ruby's rb_str_split_m does it. */
static mrb_value
str_split_regexp(mrb_state *mrb, mrb_value self, mrb_value re, mrb_value lim_v)
{
    const OnigRegion  *region;
    mrb_value          ary = mrb_ary_new(mrb);
    mrb_int            lim = 0, i = 1, beg = 0, start = 0, end, len, idx;
    int                limited = 0, last_null = 0;
    const char        *p = RSTRING_PTR(self);

    len = RSTRING_LEN(self);

    if (!mrb_nil_p(lim_v)) {
        lim = mrb_as_int(mrb, lim_v);
        if (lim == 1) {
            if (len > 0) {
                mrb_ary_push(mrb, ary, mrb_str_dup(mrb, self));
            }
            return ary;
        }
        limited = lim > 0;
    }

    if (len == 0) {
        return ary;
    }

    while (start <= len
           && (end = mrb_regexp_search(mrb, re, self, start, 0,
                                          start == 0, &region)) >= 0)
    {
        if (start == end && region->beg[0] == region->end[0]) {
            if (last_null) {
                mrb_ary_push(mrb, ary, mrb_str_substr(mrb, self, beg,
                    mrb_regexp_char_len(re, p + beg, p + len)));
                beg = start;
            } else {
                start += (start == len)
                         ? 1 : mrb_regexp_char_len(re, p + start, p + len);
                last_null = 1;
                continue;
            }
        } else {
            mrb_ary_push(mrb, ary, mrb_str_substr(mrb, self, beg, end - beg));
            beg = start = region->end[0];
        }
        last_null = 0;

        for (idx = 1; idx < region->num_regs; idx++) {
            if (region->beg[idx] < 0) {
                continue;
            }
            mrb_ary_push(mrb, ary, mrb_str_substr(mrb, self, region->beg[idx],
                         region->end[idx] - region->beg[idx]));
        }

        if (limited && lim <= ++i) {
            break;
        }
    }

    if (len > 0 && (limited || len > beg || lim < 0)) {
        mrb_ary_push(mrb, ary, beg >= len ? mrb_str_new(mrb, NULL, 0)
                               : mrb_str_substr(mrb, self, beg, len - beg));
    }

    if (!limited && lim == 0) {
        while (RARRAY_LEN(ary) > 0
               && RSTRING_LEN(RARRAY_PTR(ary)[RARRAY_LEN(ary) - 1]) == 0)
        {
            mrb_ary_pop(mrb, ary);
        }
    }

    return ary;
}


static mrb_value
str_split(mrb_state *mrb, mrb_value self)
{
    mrb_value  pat = mrb_nil_value(), lim = mrb_nil_value();

    mrb_get_args(mrb, "|oo", &pat, &lim);
    if (is_regexp(pat)) {
        return str_split_regexp(mrb, self, pat, lim);
    }
    return str_orig(mrb, ORIG_SPLIT)(mrb, self);
}


static mrb_value
str_index_regexp(mrb_state *mrb, mrb_value self, mrb_value re, mrb_value pos_v,
    int backward)
{
    const OnigRegion  *region;
    mrb_int            pos, len = RSTRING_LEN(self), at;

    pos = mrb_nil_p(pos_v) ? (backward ? len : 0) : mrb_as_int(mrb, pos_v);
    if (pos < 0) {
        pos += len;
    }
    if (pos < 0 || pos > len) {
        mrb_regexp_record(mrb, re, mrb_nil_value(), mrb_nil_value());
        return mrb_nil_value();
    }

    at = mrb_regexp_search(mrb, re, self, pos, backward, 1, &region);
    mrb_regexp_record(mrb, re, at < 0 ? mrb_nil_value() : self,
                      mrb_nil_value());
    return at < 0 ? mrb_nil_value() : mrb_fixnum_value(at);
}


static mrb_value
str_index(mrb_state *mrb, mrb_value self)
{
    mrb_value  pat, pos = mrb_nil_value();

    mrb_get_args(mrb, "o|o", &pat, &pos);
    if (is_regexp(pat)) {
        return str_index_regexp(mrb, self, pat, pos, 0);
    }
    return str_orig(mrb, ORIG_INDEX)(mrb, self);
}


static mrb_value
str_rindex(mrb_state *mrb, mrb_value self)
{
    mrb_value  pat, pos = mrb_nil_value();

    mrb_get_args(mrb, "o|o", &pat, &pos);
    if (is_regexp(pat)) {
        return str_index_regexp(mrb, self, pat, pos, 1);
    }
    return str_orig(mrb, ORIG_RINDEX)(mrb, self);
}


/* str[re], str[re, n], str[re, "name"]: the match or a group of it. */
static mrb_value
str_aref_regexp(mrb_state *mrb, mrb_value self, mrb_value re, mrb_value grp)
{
    mrb_value  md = mrb_funcall(mrb, re, "match", 1, self);

    if (mrb_nil_p(md)) {
        return md;
    }

    return mrb_funcall(mrb, md, "[]", 1,
                       mrb_undef_p(grp) ? mrb_fixnum_value(0) : grp);
}


static mrb_value
str_aref(mrb_state *mrb, mrb_value self)
{
    mrb_value  a, b = mrb_undef_value();

    mrb_get_args(mrb, "o|o", &a, &b);
    if (is_regexp(a)) {
        return str_aref_regexp(mrb, self, a, b);
    }
    return str_orig(mrb, ORIG_AREF)(mrb, self);
}


static mrb_value
str_slice(mrb_state *mrb, mrb_value self)
{
    mrb_value  a, b = mrb_undef_value();

    mrb_get_args(mrb, "o|o", &a, &b);
    if (is_regexp(a)) {
        return str_aref_regexp(mrb, self, a, b);
    }
    return str_orig(mrb, ORIG_SLICE)(mrb, self);
}


/* str.start_with?(prefix_or_regexp, ...) */
static mrb_value
str_start_with(mrb_state *mrb, mrb_value self)
{
    const OnigRegion  *region;
    mrb_value         *argv;
    mrb_int            argc, i;

    mrb_get_args(mrb, "*", &argv, &argc);
    for (i = 0; i < argc; i++) {
        if (is_regexp(argv[i])) {
            break;
        }
    }
    if (i == argc) {
        return str_orig(mrb, ORIG_START_WITH)(mrb, self);
    }

    for (i = 0; i < argc; i++) {
        if (is_regexp(argv[i])) {
            /* the leftmost match: at 0 if there is one there */
            if (mrb_regexp_search(mrb, argv[i], self, 0, 0, 1, &region) == 0) {
                mrb_regexp_record(mrb, argv[i], self, mrb_nil_value());
                return mrb_true_value();
            }
        } else {
            mrb_value  s = mrb_str_to_str(mrb, argv[i]);

            if (RSTRING_LEN(s) <= RSTRING_LEN(self)
                && memcmp(RSTRING_PTR(s), RSTRING_PTR(self),
                          RSTRING_LEN(s)) == 0)
            {
                return mrb_true_value();
            }
        }
    }

    return mrb_false_value();
}


/* str =~ obj: a Regexp matches; a String is a TypeError, as in Ruby. */
static mrb_value
str_match_op(mrb_state *mrb, mrb_value self)
{
    mrb_value  obj;

    mrb_get_args(mrb, "o", &obj);
    if (is_regexp(obj)) {
        return mrb_regexp_match_index(mrb, obj, self);
    }
    if (mrb_string_p(obj)) {
        mrb_raise(mrb, E_TYPE_ERROR, "wrong argument type String (expected Regexp)");
    }
    return mrb_funcall(mrb, obj, "=~", 1, self);
}


/* str.match(pattern, pos = 0) { |md| ... } */
static mrb_value
str_match(mrb_state *mrb, mrb_value self)
{
    mrb_value  pat, pos = mrb_fixnum_value(0), blk;

    mrb_get_args(mrb, "o|o&", &pat, &pos, &blk);
    return mrb_funcall_with_block(mrb, str_to_regexp(mrb, pat),
                                  mrb_intern_lit(mrb, "match"), 2,
                                  (mrb_value[]) { self, pos }, blk);
}


static mrb_value
str_match_p(mrb_state *mrb, mrb_value self)
{
    mrb_value  pat, pos = mrb_fixnum_value(0);

    mrb_get_args(mrb, "o|o", &pat, &pos);
    return mrb_funcall(mrb, str_to_regexp(mrb, pat), "match?", 2, self, pos);
}


/* str.partition(re) / str.rpartition(re): [before, match, after]. */
static mrb_value
str_partition_regexp(mrb_state *mrb, mrb_value self, mrb_value re,
    int backward)
{
    const OnigRegion  *region;
    mrb_int            len = RSTRING_LEN(self), at, e;

    at = mrb_regexp_search(mrb, re, self, backward ? len : 0, backward, 1,
                           &region);
    if (at < 0) {
        mrb_regexp_record(mrb, re, mrb_nil_value(), mrb_nil_value());
        return backward
            ? mrb_ary_new_from_values(mrb, 3, (mrb_value[]) {
                  mrb_str_new(mrb, NULL, 0), mrb_str_new(mrb, NULL, 0),
                  mrb_str_dup(mrb, self) })
            : mrb_ary_new_from_values(mrb, 3, (mrb_value[]) {
                  mrb_str_dup(mrb, self), mrb_str_new(mrb, NULL, 0),
                  mrb_str_new(mrb, NULL, 0) });
    }

    e = region->end[0];
    mrb_regexp_record(mrb, re, self, mrb_nil_value());
    return mrb_ary_new_from_values(mrb, 3, (mrb_value[]) {
        mrb_str_substr(mrb, self, 0, at),
        mrb_str_substr(mrb, self, at, e - at),
        e >= len ? mrb_str_new(mrb, NULL, 0)
                 : mrb_str_substr(mrb, self, e, len - e) });
}


static mrb_value
str_partition(mrb_state *mrb, mrb_value self)
{
    mrb_value  pat;

    mrb_get_args(mrb, "o", &pat);
    if (is_regexp(pat)) {
        return str_partition_regexp(mrb, self, pat, 0);
    }
    return str_call_orig(mrb, self, "__str_partition");
}


static mrb_value
str_rpartition(mrb_state *mrb, mrb_value self)
{
    mrb_value  pat;

    mrb_get_args(mrb, "o", &pat);
    if (is_regexp(pat)) {
        return str_partition_regexp(mrb, self, pat, 1);
    }
    return str_call_orig(mrb, self, "__str_rpartition");
}


static const mrb_api_method  str_methods[] = {
    { "sub",          str_sub,          MRB_ARGS_ANY() },
    { "sub!",         str_sub_bang,     MRB_ARGS_ANY() },
    { "gsub",         str_gsub,         MRB_ARGS_ANY() },
    { "gsub!",        str_gsub_bang,    MRB_ARGS_ANY() },
    { "scan",         str_scan,         MRB_ARGS_REQ(1) | MRB_ARGS_BLOCK() },
    { "split",        str_split,        MRB_ARGS_OPT(2) },
    { "index",        str_index,        MRB_ARGS_ARG(1, 1) },
    { "rindex",       str_rindex,       MRB_ARGS_ARG(1, 1) },
    { "[]",           str_aref,         MRB_ARGS_ARG(1, 1) },
    { "slice",        str_slice,        MRB_ARGS_ARG(1, 1) },
    { "start_with?",  str_start_with,   MRB_ARGS_ANY() },
    { "=~",           str_match_op,     MRB_ARGS_REQ(1) },
    { "match",        str_match,        MRB_ARGS_ARG(1, 1) },
    { "match?",       str_match_p,      MRB_ARGS_ARG(1, 1) },
    { "partition",    str_partition,    MRB_ARGS_REQ(1) },
    { "rpartition",   str_rpartition,   MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};


void
mrb_regexp_string_define(mrb_state *mrb)
{
    struct RClass  *s = mrb->string_class, *c;
    mrb_method_t    m;
    size_t          i;
    char            alias[32];

    for (i = 0; i < ORIG_N; i++) {
        c = s;
        m = mrb_method_search_vm(mrb, &c, mrb_intern_cstr(mrb, orig_names[i]));
        orig_funcs[i] = !MRB_METHOD_UNDEF_P(m) && MRB_METHOD_CFUNC_P(m)
                        ? MRB_METHOD_CFUNC(m) : NULL;
    }

    for (i = 0; i < sizeof(orig_aliased) / sizeof(orig_aliased[0]); i++) {
        snprintf(alias, sizeof(alias), "__str_%s", orig_aliased[i]);
        mrb_define_alias(mrb, s, alias, orig_aliased[i]);
    }

    mrb_api_define_methods(mrb, s, str_methods);
}
