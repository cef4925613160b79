/*
 * MatchData: the groups of one match, as byte offsets into the String that
 * was searched (held, not copied).  A group's text is cut from the String
 * when asked for, clamped to its length: a script may change the String
 * after the match.  Its layout (the String, the Regexp and the offsets as
 * the values of a Struct-like object) is in mrb_regexp.h.
 */

#include <string.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/range.h>
#include <mruby/string.h>

#include "mrb_api.h"
#include "mrb_lib.h"
#include "mrb_mruby_version.h"    /* MRB_TT_STRUCT objects are RArrays the
                                     GC marks (docs/architecture.md) */
#include "mrb_regexp.h"


mrb_value
mrb_matchdata_new(mrb_state *mrb, mrb_value regexp, mrb_value str,
    const OnigRegion *region)
{
    struct RBasic  *o;
    mrb_value       md, *v;
    int             i, n = region->num_regs;

    o = mrb_obj_alloc(mrb, MRB_TT_STRUCT, mrb_lib_get(mrb)->matchdata_class);
    md = mrb_obj_value(o);
    mrb_ary_resize(mrb, md, MRB_MATCH_POS + 2 * (mrb_int) n);

    v = RARRAY_PTR(md);
    v[MRB_MATCH_STR] = str;
    v[MRB_MATCH_RE] = regexp;
    for (i = 0; i < n; i++) {
        v[MRB_MATCH_POS + 2 * i] = mrb_fixnum_value(region->beg[i]);
        v[MRB_MATCH_POS + 2 * i + 1] = mrb_fixnum_value(region->end[i]);
    }
    mrb_field_write_barrier_value(mrb, o, str);
    mrb_field_write_barrier_value(mrb, o, regexp);
    return md;
}


/* The values of a MatchData the VM called a method on (its class is
 * MatchData's or a subclass, whose instances are all MRB_TT_STRUCT), or
 * raises TypeError for one never matched (MatchData.allocate). */
static const mrb_value *
match_values(mrb_state *mrb, mrb_value self, mrb_int *ngroups)
{
    mrb_int  len = RARRAY_LEN(self);

    if (len < MRB_MATCH_POS + 2) {
        mrb_raise(mrb, E_TYPE_ERROR, "uninitialized MatchData");
    }

    *ngroups = (len - MRB_MATCH_POS) / 2;
    return RARRAY_PTR(self);
}


const mrb_value *
mrb_matchdata_check(mrb_state *mrb, mrb_value md, mrb_int *ngroups)
{
    if (mrb_type(md) != MRB_TT_STRUCT
        || !mrb_obj_is_kind_of(mrb, md, mrb_lib_get(mrb)->matchdata_class))
    {
        mrb_raisef(mrb, E_TYPE_ERROR, "%C is not a MatchData",
                   mrb_obj_class(mrb, md));
    }

    return match_values(mrb, md, ngroups);
}


/* Group n of a match in str. */
static mrb_value
match_group(mrb_state *mrb, const mrb_value *v, mrb_int ngroups, mrb_int n)
{
    mrb_value  str = v[MRB_MATCH_STR];
    mrb_int    b, e, len = RSTRING_LEN(str);

    if (n < 0 || n >= ngroups || mrb_match_beg(v, n) < 0) {
        return mrb_nil_value();
    }

    b = mrb_match_beg(v, n);
    e = mrb_match_end(v, n);
    if (b > len) {
        b = len;
    }
    if (e > len) {
        e = len;
    }

    return mrb_str_new(mrb, RSTRING_PTR(str) + b, e > b ? e - b : 0);
}


mrb_value
mrb_matchdata_group(mrb_state *mrb, mrb_value md, mrb_int n)
{
    const mrb_value  *v;
    mrb_int           ngroups;

    v = match_values(mrb, md, &ngroups);
    return match_group(mrb, v, ngroups, n);
}


/*
 * The group number of a name in the match's pattern: of a name used
 * twice, the last group that took part (as Oniguruma's
 * onig_name_to_backref_number picks it, without building a region of the
 * match's groups); raises IndexError for a name the pattern does not have.
 */
static mrb_int
match_name_to_group(mrb_state *mrb, const mrb_value *v, mrb_value name)
{
    mrb_regexp  *rx = mrb_regexp_check(mrb, v[MRB_MATCH_RE]);
    int         *nums, n, i;

    n = onig_name_to_group_numbers(rx->re,
                                   (const OnigUChar *) RSTRING_PTR(name),
                                   (const OnigUChar *) RSTRING_PTR(name)
                                   + RSTRING_LEN(name), &nums);
    if (n <= 0) {
        mrb_raisef(mrb, E_INDEX_ERROR, "undefined group name reference: %v",
                   name);
    }

    for (i = n - 1; i >= 0; i--) {
        if (mrb_match_beg(v, nums[i]) >= 0) {
            return nums[i];
        }
    }

    return nums[n - 1];
}


/* The group number an index or a name stands for in self; raises
 * IndexError for a name the pattern does not have.  (An index's to_int
 * may run Ruby: the caller reads self's values after.) */
static mrb_int
match_group_index(mrb_state *mrb, mrb_value self, mrb_value idx)
{
    const mrb_value  *v;
    mrb_int           n, ngroups;

    if (mrb_symbol_p(idx)) {
        idx = mrb_sym_str(mrb, mrb_symbol(idx));
    } else if (!mrb_integer_p(idx) && !mrb_string_p(idx)) {
        idx = mrb_fixnum_value(mrb_as_int(mrb, idx));
    }

    v = match_values(mrb, self, &ngroups);
    if (mrb_string_p(idx)) {
        return match_name_to_group(mrb, v, idx);
    }

    n = mrb_integer(idx);
    return n < 0 ? n + ngroups : n;
}


/* md[i], md[-1], md["name"], md[:name]; md[start, len] and md[range] as
 * md.to_a does. */
static mrb_value
match_aref(mrb_state *mrb, mrb_value self)
{
    const mrb_value  *v;
    mrb_value         idx, len = mrb_undef_value(), ary;
    mrb_int           n, ngroups;

    /* md[i], the common call, without mrb_get_args */
    if (mrb_get_argc(mrb) == 1) {
        idx = mrb_get_argv(mrb)[0];
    } else {
        mrb_get_args(mrb, "o|o", &idx, &len);
    }

    if (mrb_undef_p(len) && !mrb_range_p(idx)) {
        n = match_group_index(mrb, self, idx);
        v = match_values(mrb, self, &ngroups);
        return match_group(mrb, v, ngroups, n);
    }

    ary = mrb_funcall(mrb, self, "to_a", 0);
    return mrb_undef_p(len) ? mrb_funcall(mrb, ary, "[]", 1, idx)
                            : mrb_funcall(mrb, ary, "[]", 2, idx, len);
}


static mrb_value
match_begin_end(mrb_state *mrb, mrb_value self, int end)
{
    const mrb_value  *v;
    mrb_value         idx = mrb_get_arg1(mrb);
    mrb_int           n, ngroups;

    n = match_group_index(mrb, self, idx);
    v = match_values(mrb, self, &ngroups);
    if (n < 0 || n >= ngroups) {
        mrb_raisef(mrb, E_INDEX_ERROR, "index %v out of matches", idx);
    }

    return mrb_match_beg(v, n) < 0
           ? mrb_nil_value()
           : mrb_fixnum_value(end ? mrb_match_end(v, n) : mrb_match_beg(v, n));
}


static mrb_value
match_begin(mrb_state *mrb, mrb_value self)
{
    return match_begin_end(mrb, self, 0);
}


static mrb_value
match_end(mrb_state *mrb, mrb_value self)
{
    return match_begin_end(mrb, self, 1);
}


/* The groups from first on, as an Array. */
static mrb_value
match_groups(mrb_state *mrb, mrb_value self, mrb_int first)
{
    const mrb_value  *v;
    mrb_value         ary;
    mrb_int           i, ngroups;

    v = match_values(mrb, self, &ngroups);
    ary = mrb_ary_new_capa(mrb, ngroups - first);
    for (i = first; i < ngroups; i++) {
        mrb_ary_push(mrb, ary, match_group(mrb, v, ngroups, i));
    }

    return ary;
}


static mrb_value
match_to_a(mrb_state *mrb, mrb_value self)
{
    return match_groups(mrb, self, 0);
}


static mrb_value
match_captures(mrb_state *mrb, mrb_value self)
{
    return match_groups(mrb, self, 1);
}


static mrb_value
match_pre_match(mrb_state *mrb, mrb_value self)
{
    const mrb_value  *v;
    mrb_int           ngroups;

    v = match_values(mrb, self, &ngroups);
    return mrb_str_substr(mrb, v[MRB_MATCH_STR], 0, mrb_match_beg(v, 0));
}


static mrb_value
match_post_match(mrb_state *mrb, mrb_value self)
{
    const mrb_value  *v;
    mrb_value         str;
    mrb_int           len, e, ngroups;

    v = match_values(mrb, self, &ngroups);
    str = v[MRB_MATCH_STR];
    len = RSTRING_LEN(str);
    e = mrb_match_end(v, 0);
    if (e >= len) {
        return mrb_str_new(mrb, NULL, 0);
    }

    return mrb_str_substr(mrb, str, e, len - e);
}


static mrb_value
match_to_s(mrb_state *mrb, mrb_value self)
{
    const mrb_value  *v;
    mrb_int           ngroups;

    v = match_values(mrb, self, &ngroups);
    return match_group(mrb, v, ngroups, 0);
}


static mrb_value
match_size(mrb_state *mrb, mrb_value self)
{
    mrb_int  ngroups;

    match_values(mrb, self, &ngroups);
    return mrb_fixnum_value(ngroups);
}


static mrb_value
match_regexp(mrb_state *mrb, mrb_value self)
{
    mrb_int  ngroups;

    return match_values(mrb, self, &ngroups)[MRB_MATCH_RE];
}


/* The frozen String that was searched. */
static mrb_value
match_string_m(mrb_state *mrb, mrb_value self)
{
    mrb_value  s;
    mrb_int    ngroups;

    s = mrb_str_dup(mrb, match_values(mrb, self, &ngroups)
                             [MRB_MATCH_STR]);
    mrb_obj_freeze(mrb, s);
    return s;
}


/* md.dup, md.clone: the same match. */
static mrb_value
match_init_copy(mrb_state *mrb, mrb_value self)
{
    mrb_value         src = mrb_get_arg1(mrb);
    const mrb_value  *v;
    mrb_int           ngroups, len;

    if (mrb_obj_equal(mrb, self, src)) {
        return self;
    }

    v = mrb_matchdata_check(mrb, src, &ngroups);
    len = MRB_MATCH_POS + 2 * ngroups;
    mrb_ary_resize(mrb, self, len);
    memcpy(RARRAY_PTR(self), v, len * sizeof(mrb_value));
    mrb_write_barrier(mrb, mrb_basic_ptr(self));
    return self;
}


static const mrb_api_method  match_methods[] = {
    { "[]",              match_aref,        MRB_ARGS_ARG(1, 1) },
    { "begin",           match_begin,       MRB_ARGS_REQ(1) },
    { "end",             match_end,         MRB_ARGS_REQ(1) },
    { "to_a",            match_to_a,        MRB_ARGS_NONE() },
    { "captures",        match_captures,    MRB_ARGS_NONE() },
    { "pre_match",       match_pre_match,   MRB_ARGS_NONE() },
    { "post_match",      match_post_match,  MRB_ARGS_NONE() },
    { "to_s",            match_to_s,        MRB_ARGS_NONE() },
    { "size",            match_size,        MRB_ARGS_NONE() },
    { "length",          match_size,        MRB_ARGS_NONE() },
    { "regexp",          match_regexp,      MRB_ARGS_NONE() },
    { "string",          match_string_m,    MRB_ARGS_NONE() },
    { "initialize_copy", match_init_copy,   MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};


void
mrb_matchdata_define(mrb_state *mrb)
{
    struct RClass  *c;

    c = mrb_api_define_class(mrb, NULL, "MatchData", NULL, match_methods);
    MRB_SET_INSTANCE_TT(c, MRB_TT_STRUCT);
    mrb_lib_get(mrb)->matchdata_class = c;
    mrb_undef_class_method(mrb, c, "new");
    mrb_undef_class_method(mrb, c, "allocate");
}
