/*
 * JSON: parse with jansson (Debian's libjansson), generate here.
 *
 * Generation is written out directly rather than through jansson's
 * encoder, because scripts compare the bytes with what CRuby's json gives:
 * compact separators, "/" and non-ASCII left as they are, \b \f \n \r \t
 * and \u00XX for the other control characters, Floats as Float#to_s
 * writes them, NaN and Infinity refused (GeneratorError), nesting deeper
 * than 100 refused (NestingError) as CRuby's default max_nesting does.
 * Both directions build on GC-owned objects (the parsed jansson tree is
 * held by a Data object), so an exception half way leaks nothing.
 */

#include <math.h>
#include <string.h>

#include <jansson.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/data.h>
#include <mruby/hash.h>
#include <mruby/proc.h>
#include <mruby/string.h>
#include <mruby/variable.h>

#include "mrb_api.h"
#include "mrb_json.h"

#define JSON_MAX_NESTING  100

typedef struct {
    mrb_bool     symbolize;
    mrb_int      max_nesting;   /* 0: no limit */
} json_parse_opts;

typedef struct {
    mrb_value    out;
    int          pretty;
    mrb_int      max_nesting;
} json_gen;


static void
json_tree_free(mrb_state *mrb, void *p)
{
    json_decref(p);
}

static const struct mrb_data_type  json_tree_type = {
    "JSON tree", json_tree_free
};


static struct RClass *
json_error_class(mrb_state *mrb, const char *name)
{
    return mrb_class_get_under(mrb, mrb_module_get(mrb, "JSON"), name);
}


/* ---- parse ---------------------------------------------------------- */

static mrb_value
json_to_value(mrb_state *mrb, json_t *j, const json_parse_opts *o,
    mrb_int depth)
{
    mrb_value    v, key;
    const char  *k;
    json_t      *item;
    size_t       i;
    int          ai;

    switch (json_typeof(j)) {
    case JSON_OBJECT:
    case JSON_ARRAY:
        if (o->max_nesting > 0 && depth > o->max_nesting) {
            mrb_raisef(mrb, json_error_class(mrb, "NestingError"),
                       "nesting of %d is too deep", (int) depth);
        }
        break;
    default:
        break;
    }

    switch (json_typeof(j)) {
    case JSON_OBJECT:
        v = mrb_hash_new_capa(mrb, (mrb_int) json_object_size(j));
        ai = mrb_gc_arena_save(mrb);
        json_object_foreach(j, k, item) {
            key = o->symbolize ? mrb_symbol_value(mrb_intern_cstr(mrb, k))
                               : mrb_str_new_cstr(mrb, k);
            mrb_hash_set(mrb, v, key, json_to_value(mrb, item, o, depth + 1));
            mrb_gc_arena_restore(mrb, ai);
        }
        return v;

    case JSON_ARRAY:
        v = mrb_ary_new_capa(mrb, (mrb_int) json_array_size(j));
        ai = mrb_gc_arena_save(mrb);
        json_array_foreach(j, i, item) {
            mrb_ary_push(mrb, v, json_to_value(mrb, item, o, depth + 1));
            mrb_gc_arena_restore(mrb, ai);
        }
        return v;

    case JSON_STRING:
        return mrb_str_new(mrb, json_string_value(j), json_string_length(j));

    case JSON_INTEGER:
        return mrb_int_value(mrb, (mrb_int) json_integer_value(j));

    case JSON_REAL:
        return mrb_float_value(mrb, json_real_value(j));

    case JSON_TRUE:
        return mrb_true_value();

    case JSON_FALSE:
        return mrb_false_value();

    default:
        return mrb_nil_value();
    }
}


/* JSON.parse(source, symbolize_names: false, max_nesting: 100) */
static mrb_value
json_s_parse(mrb_state *mrb, mrb_value self)
{
    mrb_value        src, opts = mrb_nil_value(), v;
    json_parse_opts  o = { FALSE, JSON_MAX_NESTING };
    json_error_t     err;
    json_t          *root;
    struct RData    *holder;

    mrb_get_args(mrb, "S|H", &src, &opts);

    if (mrb_hash_p(opts)) {
        v = mrb_hash_get(mrb, opts, mrb_symbol_value(
                mrb_intern_lit(mrb, "symbolize_names")));
        o.symbolize = mrb_test(v);
        v = mrb_hash_fetch(mrb, opts, mrb_symbol_value(
                mrb_intern_lit(mrb, "max_nesting")), mrb_undef_value());
        if (!mrb_undef_p(v)) {
            o.max_nesting = mrb_test(v) ? mrb_as_int(mrb, v) : 0;
        }
    }

    holder = mrb_data_object_alloc(mrb, mrb->object_class, NULL,
                                   &json_tree_type);

    root = json_loadb(RSTRING_PTR(src), (size_t) RSTRING_LEN(src),
                      JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (root == NULL) {
        mrb_raisef(mrb, json_error_class(mrb, "ParserError"),
                   "%s at line %d column %d", err.text, err.line,
                   err.column);
    }

    holder->data = root;
    v = json_to_value(mrb, root, &o, 1);

    /* the tree goes now rather than at the next GC */
    holder->data = NULL;
    json_decref(root);
    return v;
}


/* ---- generate ------------------------------------------------------- */

static void gen_value(mrb_state *mrb, json_gen *g, mrb_value v,
    mrb_int depth);


static void
gen_indent(mrb_state *mrb, json_gen *g, mrb_int depth)
{
    static const char  spaces[] = "                                ";
    mrb_int            n = depth * 2;

    mrb_str_cat(mrb, g->out, "\n", 1);
    while (n > 0) {
        mrb_int  k = n < (mrb_int) sizeof(spaces) - 1
                     ? n : (mrb_int) sizeof(spaces) - 1;

        mrb_str_cat(mrb, g->out, spaces, k);
        n -= k;
    }
}


/* Whether [p, p + len) is UTF-8 (what CRuby's generator requires). */
static int
gen_utf8_valid(const unsigned char *p, mrb_int len)
{
    const unsigned char  *end = p + len;
    unsigned int          c, n, i, cp;

    while (p < end) {
        c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) {
            n = 1; cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2; cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3; cp = c & 0x07;
        } else {
            return 0;
        }
        if (end - p <= (long) n) {
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
        p += n + 1;
    }

    return 1;
}


static void
gen_string(mrb_state *mrb, json_gen *g, const char *s, mrb_int len)
{
    static const char  hex[] = "0123456789abcdef";
    mrb_int            i, run = 0;
    char               esc[6];

    if (!gen_utf8_valid((const unsigned char *) s, len)) {
        mrb_raise(mrb, json_error_class(mrb, "GeneratorError"),
                  "source sequence is illegal/malformed utf-8");
    }

    mrb_str_cat(mrb, g->out, "\"", 1);

    for (i = 0; i < len; i++) {
        unsigned char  c = (unsigned char) s[i];
        const char    *rep = NULL;
        size_t         replen = 2;

        switch (c) {
        case '"':  rep = "\\\""; break;
        case '\\': rep = "\\\\"; break;
        case '\b': rep = "\\b"; break;
        case '\f': rep = "\\f"; break;
        case '\n': rep = "\\n"; break;
        case '\r': rep = "\\r"; break;
        case '\t': rep = "\\t"; break;
        default:
            if (c < 0x20) {
                esc[0] = '\\'; esc[1] = 'u'; esc[2] = '0'; esc[3] = '0';
                esc[4] = hex[c >> 4]; esc[5] = hex[c & 15];
                rep = esc;
                replen = 6;
            }
            break;
        }

        if (rep == NULL) {
            run++;
            continue;
        }

        mrb_str_cat(mrb, g->out, s + i - run, run);
        run = 0;
        mrb_str_cat(mrb, g->out, rep, replen);
    }

    mrb_str_cat(mrb, g->out, s + len - run, run);
    mrb_str_cat(mrb, g->out, "\"", 1);
}


static void
gen_nesting(mrb_state *mrb, json_gen *g, mrb_int depth)
{
    if (g->max_nesting > 0 && depth > g->max_nesting) {
        mrb_raisef(mrb, json_error_class(mrb, "NestingError"),
                   "nesting of %d is too deep", (int) depth);
    }
}


static void
gen_key(mrb_state *mrb, json_gen *g, mrb_value k)
{
    if (mrb_symbol_p(k)) {
        mrb_int      len;
        const char  *p = mrb_sym_name_len(mrb, mrb_symbol(k), &len);

        gen_string(mrb, g, p, len);
        return;
    }

    if (!mrb_string_p(k)) {
        k = mrb_obj_as_string(mrb, k);
    }
    gen_string(mrb, g, RSTRING_PTR(k), RSTRING_LEN(k));
}


static void
gen_hash(mrb_state *mrb, json_gen *g, mrb_value h, mrb_int depth)
{
    mrb_value  keys = mrb_hash_keys(mrb, h);
    mrb_int    i, n = RARRAY_LEN(keys);
    int        ai;

    gen_nesting(mrb, g, depth);
    mrb_str_cat(mrb, g->out, "{", 1);
    ai = mrb_gc_arena_save(mrb);

    for (i = 0; i < RARRAY_LEN(keys) && i < n; i++) {
        mrb_value  k = RARRAY_PTR(keys)[i];

        if (i > 0) {
            mrb_str_cat(mrb, g->out, ",", 1);
        }
        if (g->pretty) {
            gen_indent(mrb, g, depth);
        }
        gen_key(mrb, g, k);
        mrb_str_cat(mrb, g->out, g->pretty ? ": " : ":", g->pretty ? 2 : 1);
        gen_value(mrb, g, mrb_hash_get(mrb, h, k), depth);
        mrb_gc_arena_restore(mrb, ai);
    }

    if (g->pretty && n > 0) {
        gen_indent(mrb, g, depth - 1);
    }
    mrb_str_cat(mrb, g->out, "}", 1);
}


static void
gen_array(mrb_state *mrb, json_gen *g, mrb_value a, mrb_int depth)
{
    mrb_int  i;
    int      ai;

    gen_nesting(mrb, g, depth);
    mrb_str_cat(mrb, g->out, "[", 1);
    ai = mrb_gc_arena_save(mrb);

    /* the length is read again each time: to_json of an element may
     * change the Array */
    for (i = 0; i < RARRAY_LEN(a); i++) {
        if (i > 0) {
            mrb_str_cat(mrb, g->out, ",", 1);
        }
        if (g->pretty) {
            gen_indent(mrb, g, depth);
        }
        gen_value(mrb, g, RARRAY_PTR(a)[i], depth);
        mrb_gc_arena_restore(mrb, ai);
    }

    if (g->pretty && RARRAY_LEN(a) > 0) {
        gen_indent(mrb, g, depth - 1);
    }
    mrb_str_cat(mrb, g->out, "]", 1);
}


static void
gen_value(mrb_state *mrb, json_gen *g, mrb_value v, mrb_int depth)
{
    struct RClass  *c;
    mrb_method_t    m;
    mrb_value       s;
    char            buf[32];
    int             n;

    switch (mrb_type(v)) {
    case MRB_TT_FALSE:
        if (mrb_nil_p(v)) {
            mrb_str_cat_lit(mrb, g->out, "null");
        } else {
            mrb_str_cat_lit(mrb, g->out, "false");
        }
        return;

    case MRB_TT_TRUE:
        mrb_str_cat_lit(mrb, g->out, "true");
        return;

    case MRB_TT_INTEGER:
        n = snprintf(buf, sizeof(buf), "%" MRB_PRId, mrb_integer(v));
        mrb_str_cat(mrb, g->out, buf, n);
        return;

    case MRB_TT_FLOAT:
        if (isnan(mrb_float(v)) || isinf(mrb_float(v))) {
            s = mrb_obj_as_string(mrb, v);
            mrb_raisef(mrb, json_error_class(mrb, "GeneratorError"),
                       "%v not allowed in JSON", s);
        }
        s = mrb_obj_as_string(mrb, v);
        mrb_str_cat_str(mrb, g->out, s);
        return;

    case MRB_TT_STRING:
        gen_string(mrb, g, RSTRING_PTR(v), RSTRING_LEN(v));
        return;

    case MRB_TT_SYMBOL:
        gen_key(mrb, g, v);
        return;

    case MRB_TT_HASH:
        gen_hash(mrb, g, v, depth + 1);
        return;

    case MRB_TT_ARRAY:
        gen_array(mrb, g, v, depth + 1);
        return;

    default:
        break;
    }

    /* an object whose class defines to_json writes itself; the others
     * (Object#to_json is the library's) are written as their to_s */
    c = mrb_class(mrb, v);
    m = mrb_method_search_vm(mrb, &c, mrb_intern_lit(mrb, "to_json"));
    if (!MRB_METHOD_UNDEF_P(m) && c != mrb->object_class
        && c != mrb->kernel_module)
    {
        s = mrb_funcall(mrb, v, "to_json", 0);
        mrb_str_cat_str(mrb, g->out, mrb_str_to_str(mrb, s));
        return;
    }

    s = mrb_obj_as_string(mrb, v);
    gen_string(mrb, g, RSTRING_PTR(s), RSTRING_LEN(s));
}


static mrb_value
json_generate(mrb_state *mrb, int pretty)
{
    mrb_value  obj, opts = mrb_nil_value(), v;
    json_gen   g;

    mrb_get_args(mrb, "o|o", &obj, &opts);

    g.out = mrb_str_new_capa(mrb, 64);
    g.pretty = pretty;
    g.max_nesting = JSON_MAX_NESTING;

    if (mrb_hash_p(opts)) {
        v = mrb_hash_fetch(mrb, opts, mrb_symbol_value(
                mrb_intern_lit(mrb, "max_nesting")), mrb_undef_value());
        if (!mrb_undef_p(v)) {
            g.max_nesting = mrb_test(v) ? mrb_as_int(mrb, v) : 0;
        }
    }

    gen_value(mrb, &g, obj, 0);
    return g.out;
}


/* JSON.generate(obj, opts = nil), JSON.dump, JSON.stringify */
static mrb_value
json_s_generate(mrb_state *mrb, mrb_value self)
{
    return json_generate(mrb, 0);
}


/* JSON.pretty_generate(obj): two spaces of indent, "key": value */
static mrb_value
json_s_pretty_generate(mrb_state *mrb, mrb_value self)
{
    return json_generate(mrb, 1);
}


static const mrb_api_method  json_functions[] = {
    { "parse",            json_s_parse,            MRB_ARGS_ARG(1, 1) },
    { "generate",         json_s_generate,         MRB_ARGS_ARG(1, 1) },
    { "dump",             json_s_generate,         MRB_ARGS_ARG(1, 1) },
    { "stringify",        json_s_generate,         MRB_ARGS_ARG(1, 1) },
    { "pretty_generate",  json_s_pretty_generate,  MRB_ARGS_ARG(1, 1) },
    MRB_API_METHOD_END
};


void
mrb_json_define(mrb_state *mrb)
{
    struct RClass  *json, *base, *parser;

    json = mrb_api_define_module(mrb, NULL, "JSON", json_functions);
    base = mrb_api_define_class(mrb, json, "JSONError",
                                mrb->eStandardError_class, NULL);
    parser = mrb_api_define_class(mrb, json, "ParserError", base, NULL);
    mrb_api_define_class(mrb, json, "NestingError", parser, NULL);
    mrb_api_define_class(mrb, json, "GeneratorError", base, NULL);
}
