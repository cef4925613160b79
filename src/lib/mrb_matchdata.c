/*
 * MatchData: the groups of one match, as byte offsets into the String that
 * was searched (held, not copied).  A group's text is cut from the String
 * when asked for, clamped to its length: a script may change the String
 * after the match.
 */

#include <string.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/data.h>
#include <mruby/hash.h>
#include <mruby/range.h>
#include <mruby/string.h>
#include <mruby/variable.h>

#include "mrb_api.h"
#include "mrb_lib.h"
#include "mrb_regexp.h"


static void
match_free(mrb_state *mrb, void *p)
{
    mrb_free(mrb, p);
}

const struct mrb_data_type  mrb_match_type = { "MatchData", match_free };


static mrb_match *
match_check(mrb_state *mrb, mrb_value self)
{
    return mrb_data_get_ptr(mrb, self, &mrb_match_type);
}


static mrb_value
match_string(mrb_state *mrb, mrb_value self)
{
    return mrb_iv_get(mrb, self, mrb_lib_get(mrb)->sym_string);
}


mrb_value
mrb_matchdata_new(mrb_state *mrb, mrb_value regexp, mrb_value str,
    const OnigRegion *region)
{
    mrb_lib        *lib = mrb_lib_get(mrb);
    struct RData   *d;
    mrb_match      *m;
    mrb_value       md;
    int             n = region->num_regs;

    d = mrb_data_object_alloc(mrb, lib->matchdata_class, NULL,
                              &mrb_match_type);
    md = mrb_obj_value(d);
    m = mrb_malloc(mrb, sizeof(mrb_match) + 2 * n * sizeof(int));
    m->ngroups = n;
    m->beg = m->pos;
    m->end = m->pos + n;
    memcpy(m->beg, region->beg, n * sizeof(int));
    memcpy(m->end, region->end, n * sizeof(int));
    d->data = m;

    mrb_iv_set(mrb, md, lib->sym_string, str);
    mrb_iv_set(mrb, md, lib->sym_regexp, regexp);
    return md;
}


/* Group n of m, a match in str. */
static mrb_value
match_group(mrb_state *mrb, mrb_match *m, mrb_value str, mrb_int n)
{
    mrb_int  b, e, len = RSTRING_LEN(str);

    if (n < 0 || n >= m->ngroups || m->beg[n] < 0) {
        return mrb_nil_value();
    }

    b = m->beg[n];
    e = m->end[n];
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
    return match_group(mrb, DATA_PTR(md), match_string(mrb, md), n);
}


/* The group number an index or a name stands for; raises IndexError for a
 * name the pattern does not have. */
static mrb_int
match_group_index(mrb_state *mrb, mrb_value self, mrb_match *m, mrb_value idx)
{
    mrb_value    re;
    mrb_regexp  *rx;
    OnigRegion   region;
    mrb_int      n;

    if (mrb_integer_p(idx)) {
        n = mrb_integer(idx);
        return n < 0 ? n + m->ngroups : n;
    }

    if (mrb_symbol_p(idx)) {
        idx = mrb_sym_str(mrb, mrb_symbol(idx));
    }

    if (!mrb_string_p(idx)) {
        return mrb_as_int(mrb, idx);
    }

    re = mrb_iv_get(mrb, self, mrb_lib_get(mrb)->sym_regexp);
    rx = mrb_regexp_check(mrb, re);

    memset(&region, 0, sizeof(region));
    region.num_regs = m->ngroups;
    region.beg = m->beg;
    region.end = m->end;

    n = mrb_regexp_name_to_group(rx, RSTRING_PTR(idx), RSTRING_LEN(idx),
                                 &region);
    if (n < 0) {
        mrb_raisef(mrb, E_INDEX_ERROR, "undefined group name reference: %v",
                   idx);
    }

    return n;
}


/* md[i], md[-1], md["name"], md[:name]; md[start, len] and md[range] as
 * md.to_a does. */
static mrb_value
match_aref(mrb_state *mrb, mrb_value self)
{
    mrb_match  *m = match_check(mrb, self);
    mrb_value   idx, len = mrb_undef_value(), ary;

    mrb_get_args(mrb, "o|o", &idx, &len);

    if (mrb_undef_p(len) && !mrb_range_p(idx)) {
        return mrb_matchdata_group(mrb, self,
                                   match_group_index(mrb, self, m, idx));
    }

    ary = mrb_funcall(mrb, self, "to_a", 0);
    return mrb_undef_p(len) ? mrb_funcall(mrb, ary, "[]", 1, idx)
                            : mrb_funcall(mrb, ary, "[]", 2, idx, len);
}


static mrb_value
match_begin_end(mrb_state *mrb, mrb_value self, int end)
{
    mrb_match  *m = match_check(mrb, self);
    mrb_value   idx;
    mrb_int     n;

    mrb_get_args(mrb, "o", &idx);
    n = match_group_index(mrb, self, m, idx);
    if (n < 0 || n >= m->ngroups) {
        mrb_raisef(mrb, E_INDEX_ERROR, "index %v out of matches", idx);
    }

    return m->beg[n] < 0 ? mrb_nil_value()
                         : mrb_fixnum_value(end ? m->end[n] : m->beg[n]);
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
match_groups(mrb_state *mrb, mrb_value self, int first)
{
    mrb_match  *m = match_check(mrb, self);
    mrb_value   str = match_string(mrb, self);
    mrb_value   ary = mrb_ary_new_capa(mrb, m->ngroups);
    int         i;

    for (i = first; i < m->ngroups; i++) {
        mrb_ary_push(mrb, ary, match_group(mrb, m, str, i));
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
    mrb_match  *m = match_check(mrb, self);

    return mrb_str_substr(mrb, match_string(mrb, self), 0, m->beg[0]);
}


static mrb_value
match_post_match(mrb_state *mrb, mrb_value self)
{
    mrb_match  *m = match_check(mrb, self);
    mrb_value   str = match_string(mrb, self);
    mrb_int     len = RSTRING_LEN(str);

    if (m->end[0] >= len) {
        return mrb_str_new(mrb, NULL, 0);
    }

    return mrb_str_substr(mrb, str, m->end[0], len - m->end[0]);
}


static mrb_value
match_to_s(mrb_state *mrb, mrb_value self)
{
    match_check(mrb, self);
    return mrb_matchdata_group(mrb, self, 0);
}


static mrb_value
match_size(mrb_state *mrb, mrb_value self)
{
    return mrb_fixnum_value(match_check(mrb, self)->ngroups);
}


static mrb_value
match_regexp(mrb_state *mrb, mrb_value self)
{
    return mrb_iv_get(mrb, self, mrb_lib_get(mrb)->sym_regexp);
}


/* The frozen String that was searched. */
static mrb_value
match_string_m(mrb_state *mrb, mrb_value self)
{
    mrb_value  s = mrb_str_dup(mrb, match_string(mrb, self));

    mrb_obj_freeze(mrb, s);
    return s;
}


static const mrb_api_method  match_methods[] = {
    { "[]",         match_aref,        MRB_ARGS_ARG(1, 1) },
    { "begin",      match_begin,       MRB_ARGS_REQ(1) },
    { "end",        match_end,         MRB_ARGS_REQ(1) },
    { "to_a",       match_to_a,        MRB_ARGS_NONE() },
    { "captures",   match_captures,    MRB_ARGS_NONE() },
    { "pre_match",  match_pre_match,   MRB_ARGS_NONE() },
    { "post_match", match_post_match,  MRB_ARGS_NONE() },
    { "to_s",       match_to_s,        MRB_ARGS_NONE() },
    { "size",       match_size,        MRB_ARGS_NONE() },
    { "length",     match_size,        MRB_ARGS_NONE() },
    { "regexp",     match_regexp,      MRB_ARGS_NONE() },
    { "string",     match_string_m,    MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


void
mrb_matchdata_define(mrb_state *mrb)
{
    struct RClass  *c;

    c = mrb_api_define_class(mrb, NULL, "MatchData", NULL, match_methods);
    MRB_SET_INSTANCE_TT(c, MRB_TT_DATA);
    mrb_lib_get(mrb)->matchdata_class = c;
    mrb_lib_get(mrb)->sym_string = mrb_intern_lit(mrb, "string");
    mrb_lib_get(mrb)->sym_regexp = mrb_intern_lit(mrb, "regexp");
    mrb_undef_class_method(mrb, c, "new");
}
