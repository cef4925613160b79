/*
 * JSON: parse and generate, both written here against mruby objects.
 *
 * Parsing builds the Ruby objects as it reads (see "parse" below for why
 * not jansson).  Generation writes what CRuby's json writes, because
 * scripts compare the bytes: compact separators, "/" and non-ASCII left as
 * they are, \b \f \n \r \t and \u00XX for the other control characters,
 * Floats as Float#to_s writes them, NaN and Infinity refused
 * (GeneratorError), nesting deeper than 100 refused (NestingError) as
 * CRuby's default max_nesting does.  Both directions hold only GC-owned
 * objects, so an exception half way leaks nothing.
 */

#include <errno.h>
#include <math.h>
#include <stdlib.h>
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
#include "mrb_json.h"
#include "mrb_lib.h"

#define JSON_MAX_NESTING  100

typedef struct {
    mrb_value    out;
    int          pretty;
    mrb_int      max_nesting;
} json_gen;


static struct RClass *
json_error_class(mrb_state *mrb, const char *name)
{
    return mrb_class_get_under(mrb, mrb_module_get(mrb, "JSON"), name);
}


/* ---- parse ---------------------------------------------------------- */

/*
 * A recursive-descent parser of RFC 8259 that builds the Ruby objects as
 * it reads.  It replaced jansson's, which built a tree of its own first:
 * 274,000 instructions for a 1.1 KB document in jansson alone.  Strict as
 * jansson was: UTF-8 only, no raw control characters in strings, no lone
 * surrogates, nothing after the value.  JSON_MAX_DEPTH bounds the
 * recursion (the C stack) whatever max_nesting says.
 */

#define JSON_MAX_DEPTH  2048

typedef struct {
    mrb_state              *mrb;
    const unsigned char    *start, *p, *end;
    mrb_bool                symbolize;
    mrb_int                 max_nesting;   /* 0: no limit */
} json_parser;


static void
json_fail(json_parser *ps, const char *what)
{
    const unsigned char  *q;
    int                   line = 1, col = 1;

    for (q = ps->start; q < ps->p && q < ps->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }

    mrb_raisef(ps->mrb, json_error_class(ps->mrb, "ParserError"),
               "%s at line %d column %d", what, line, col);
}


static void
json_ws(json_parser *ps)
{
    while (ps->p < ps->end
           && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n'
               || *ps->p == '\r'))
    {
        ps->p++;
    }
}


static int
json_hex4(json_parser *ps, const unsigned char *q)
{
    int  i, v = 0, c;

    if (ps->end - q < 4) {
        ps->p = q;
        json_fail(ps, "invalid \\u escape");
    }

    for (i = 0; i < 4; i++) {
        c = q[i];
        v <<= 4;
        if (c >= '0' && c <= '9') {
            v |= c - '0';
        } else if (c >= 'a' && c <= 'f') {
            v |= c - 'a' + 10;
        } else if (c >= 'A' && c <= 'F') {
            v |= c - 'A' + 10;
        } else {
            ps->p = q;
            json_fail(ps, "invalid \\u escape");
        }
    }

    return v;
}


static void
json_cat_utf8(mrb_state *mrb, mrb_value out, unsigned int cp)
{
    char  b[4];
    int   n;

    if (cp < 0x80) {
        b[0] = (char) cp; n = 1;
    } else if (cp < 0x800) {
        b[0] = (char) (0xc0 | (cp >> 6));
        b[1] = (char) (0x80 | (cp & 0x3f)); n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char) (0xe0 | (cp >> 12));
        b[1] = (char) (0x80 | ((cp >> 6) & 0x3f));
        b[2] = (char) (0x80 | (cp & 0x3f)); n = 3;
    } else {
        b[0] = (char) (0xf0 | (cp >> 18));
        b[1] = (char) (0x80 | ((cp >> 12) & 0x3f));
        b[2] = (char) (0x80 | ((cp >> 6) & 0x3f));
        b[3] = (char) (0x80 | (cp & 0x3f)); n = 4;
    }

    mrb_str_cat(mrb, out, b, n);
}


/* A string, ps->p at its opening quote; as a Symbol when sym. */
static mrb_value
json_string(json_parser *ps, int sym)
{
    mrb_state            *mrb = ps->mrb;
    const unsigned char  *q = ps->p + 1, *run;
    mrb_value             out = mrb_nil_value();
    unsigned int          cp, lo;
    int                   n;

    /* the common case: no escape, one copy */
    for (run = q; q < ps->end && *q != '"' && *q != '\\'; ) {
        if (*q < 0x20) {
            ps->p = q;
            json_fail(ps, "control character in a string");
        }
        if (*q < 0x80) {
            q++;
            continue;
        }
        n = mrb_lib_utf8_len((const char *) q, (const char *) ps->end);
        if (n == 0) {
            ps->p = q;
            json_fail(ps, "invalid UTF-8 in a string");
        }
        q += n;
    }

    if (q < ps->end && *q == '"') {
        ps->p = q + 1;
        return sym ? mrb_symbol_value(mrb_intern(mrb, (const char *) run,
                                                 q - run))
                   : mrb_str_new(mrb, (const char *) run, q - run);
    }

    out = mrb_str_new(mrb, (const char *) run, q - run);

    while (q < ps->end && *q != '"') {
        if (*q == '\\') {
            if (ps->end - q < 2) {
                break;
            }
            switch (q[1]) {
            case '"':  mrb_str_cat(mrb, out, "\"", 1); q += 2; continue;
            case '\\': mrb_str_cat(mrb, out, "\\", 1); q += 2; continue;
            case '/':  mrb_str_cat(mrb, out, "/", 1); q += 2; continue;
            case 'b':  mrb_str_cat(mrb, out, "\b", 1); q += 2; continue;
            case 'f':  mrb_str_cat(mrb, out, "\f", 1); q += 2; continue;
            case 'n':  mrb_str_cat(mrb, out, "\n", 1); q += 2; continue;
            case 'r':  mrb_str_cat(mrb, out, "\r", 1); q += 2; continue;
            case 't':  mrb_str_cat(mrb, out, "\t", 1); q += 2; continue;
            case 'u':
                cp = (unsigned int) json_hex4(ps, q + 2);
                q += 6;
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    if (ps->end - q < 6 || q[0] != '\\' || q[1] != 'u') {
                        ps->p = q;
                        json_fail(ps, "lone surrogate in a \\u escape");
                    }
                    lo = (unsigned int) json_hex4(ps, q + 2);
                    if (lo < 0xdc00 || lo > 0xdfff) {
                        ps->p = q;
                        json_fail(ps, "lone surrogate in a \\u escape");
                    }
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    q += 6;
                } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                    ps->p = q;
                    json_fail(ps, "lone surrogate in a \\u escape");
                }
                json_cat_utf8(mrb, out, cp);
                continue;
            default:
                ps->p = q;
                json_fail(ps, "invalid escape in a string");
            }
        }

        if (*q < 0x20) {
            ps->p = q;
            json_fail(ps, "control character in a string");
        }

        n = mrb_lib_utf8_len((const char *) q, (const char *) ps->end);
        if (n == 0) {
            ps->p = q;
            json_fail(ps, "invalid UTF-8 in a string");
        }
        mrb_str_cat(mrb, out, (const char *) q, n);
        q += n;
    }

    if (q >= ps->end) {
        ps->p = q;
        json_fail(ps, "unterminated string");
    }

    ps->p = q + 1;
    return sym ? mrb_symbol_value(mrb_intern_str(mrb, out)) : out;
}


static mrb_value
json_number(json_parser *ps)
{
    const unsigned char  *q = ps->p, *digits;
    char                  buf[64], *e;
    int                   real = 0;
    size_t                len;
    long long             i;
    double                d;

    if (q < ps->end && *q == '-') {
        q++;
    }
    digits = q;
    if (q < ps->end && *q == '0') {
        q++;
    } else {
        while (q < ps->end && *q >= '0' && *q <= '9') {
            q++;
        }
    }
    if (q == digits) {
        json_fail(ps, "invalid number");
    }
    if (q < ps->end && *q == '.') {
        real = 1;
        digits = ++q;
        while (q < ps->end && *q >= '0' && *q <= '9') {
            q++;
        }
        if (q == digits) {
            ps->p = q;
            json_fail(ps, "invalid number");
        }
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        real = 1;
        q++;
        if (q < ps->end && (*q == '+' || *q == '-')) {
            q++;
        }
        digits = q;
        while (q < ps->end && *q >= '0' && *q <= '9') {
            q++;
        }
        if (q == digits) {
            ps->p = q;
            json_fail(ps, "invalid number");
        }
    }

    len = (size_t) (q - ps->p);
    if (len >= sizeof(buf)) {
        if (!real) {
            json_fail(ps, "too big integer");
        }
        json_fail(ps, "number too long");
    }
    memcpy(buf, ps->p, len);
    buf[len] = '\0';

    errno = 0;
    if (!real) {
        i = strtoll(buf, &e, 10);
        if (errno == ERANGE) {
            json_fail(ps, "too big integer");
        }
        ps->p = q;
        return mrb_int_value(ps->mrb, (mrb_int) i);
    }

    d = strtod(buf, &e);
    if (errno == ERANGE && (d == HUGE_VAL || d == -HUGE_VAL)) {
        json_fail(ps, "real number overflow");
    }
    ps->p = q;
    return mrb_float_value(ps->mrb, d);
}


static int
json_word(json_parser *ps, const char *w, size_t n)
{
    if ((size_t) (ps->end - ps->p) >= n && memcmp(ps->p, w, n) == 0) {
        ps->p += n;
        return 1;
    }
    return 0;
}


static mrb_value json_value(json_parser *ps, mrb_int depth);


static void
json_nest(json_parser *ps, mrb_int depth)
{
    if ((ps->max_nesting > 0 && depth > ps->max_nesting)
        || depth > JSON_MAX_DEPTH)
    {
        mrb_raisef(ps->mrb, json_error_class(ps->mrb, "NestingError"),
                   "nesting of %d is too deep", (int) depth);
    }
}


static mrb_value
json_object(json_parser *ps, mrb_int depth)
{
    mrb_state  *mrb = ps->mrb;
    mrb_value   h = mrb_hash_new(mrb), k, v;
    int         ai = mrb_gc_arena_save(mrb);

    json_nest(ps, depth);
    ps->p++;
    json_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        return h;
    }

    for ( ;; ) {
        if (ps->p >= ps->end || *ps->p != '"') {
            json_fail(ps, "expected a string as object key");
        }
        k = json_string(ps, ps->symbolize);
        json_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') {
            json_fail(ps, "expected ':'");
        }
        ps->p++;
        v = json_value(ps, depth);
        mrb_hash_set(mrb, h, k, v);
        mrb_gc_arena_restore(mrb, ai);

        json_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            json_ws(ps);
            continue;
        }
        if (ps->p < ps->end && *ps->p == '}') {
            ps->p++;
            return h;
        }
        json_fail(ps, "expected ',' or '}'");
    }
}


static mrb_value
json_array(json_parser *ps, mrb_int depth)
{
    mrb_state  *mrb = ps->mrb;
    mrb_value   a = mrb_ary_new(mrb), v;
    int         ai = mrb_gc_arena_save(mrb);

    json_nest(ps, depth);
    ps->p++;
    json_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        return a;
    }

    for ( ;; ) {
        v = json_value(ps, depth);
        mrb_ary_push(mrb, a, v);
        mrb_gc_arena_restore(mrb, ai);

        json_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == ']') {
            ps->p++;
            return a;
        }
        json_fail(ps, "expected ',' or ']'");
    }
}


/* The value at ps->p (after white space), inside depth containers. */
static mrb_value
json_value(json_parser *ps, mrb_int depth)
{
    json_ws(ps);
    if (ps->p >= ps->end) {
        json_fail(ps, "unexpected end of input");
    }

    switch (*ps->p) {
    case '{':
        return json_object(ps, depth + 1);
    case '[':
        return json_array(ps, depth + 1);
    case '"':
        return json_string(ps, 0);
    case 't':
        if (json_word(ps, "true", 4)) {
            return mrb_true_value();
        }
        break;
    case 'f':
        if (json_word(ps, "false", 5)) {
            return mrb_false_value();
        }
        break;
    case 'n':
        if (json_word(ps, "null", 4)) {
            return mrb_nil_value();
        }
        break;
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) {
            return json_number(ps);
        }
        break;
    }

    json_fail(ps, "unexpected token");
    return mrb_nil_value();
}


/* JSON.parse(source, symbolize_names: false, max_nesting: 100) */
static mrb_value
json_s_parse(mrb_state *mrb, mrb_value self)
{
    mrb_value    src, opts = mrb_nil_value(), v;
    json_parser  ps;

    mrb_get_args(mrb, "S|H", &src, &opts);

    ps.mrb = mrb;
    ps.symbolize = FALSE;
    ps.max_nesting = JSON_MAX_NESTING;

    if (mrb_hash_p(opts)) {
        v = mrb_hash_get(mrb, opts, mrb_symbol_value(
                mrb_intern_lit(mrb, "symbolize_names")));
        ps.symbolize = mrb_test(v);
        v = mrb_hash_fetch(mrb, opts, mrb_symbol_value(
                mrb_intern_lit(mrb, "max_nesting")), mrb_undef_value());
        if (!mrb_undef_p(v)) {
            ps.max_nesting = mrb_test(v) ? mrb_as_int(mrb, v) : 0;
        }
    }

    /* read in place: no Ruby runs while it parses (keys are Strings or
     * Symbols, hashed in C) */
    ps.start = ps.p = (const unsigned char *) RSTRING_PTR(src);
    ps.end = ps.p + RSTRING_LEN(src);

    v = json_value(&ps, 0);
    json_ws(&ps);
    if (ps.p != ps.end) {
        json_fail(&ps, "unexpected data after the value");
    }

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


static void
gen_string(mrb_state *mrb, json_gen *g, const char *s, mrb_int len)
{
    static const char  hex[] = "0123456789abcdef";
    mrb_int            i, run = 0;
    char               esc[6];

    if (!mrb_lib_utf8_valid(s, (size_t) len)) {
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



/*
 * A finite Float with the fewest digits that read back as the same mruby
 * Float, as CRuby's json writes it (mruby 3.1's Float#to_s keeps 15
 * digits, so a generated number could parse back as another one).  The
 * comparison goes through mrb_float_value: Debian's mruby boxes a Float
 * in a word and drops its last mantissa bits, so the digits that give
 * back the stored value are often fewer than a C double needs (0.1, not
 * 0.09999999999999998).  Always with a ".0" or an exponent, so that it
 * reads back as a Float: "1.0", "1.0e+20", "1.5e-07".  Returns the length.
 */
static int
json_float_str(mrb_state *mrb, double d, char *buf, size_t size)
{
    char  *e;
    int    prec, n;

    for (prec = 15; prec < 17; prec++) {
        snprintf(buf, size, "%.*g", prec, d);
        if (mrb_float(mrb_float_value(mrb, strtod(buf, NULL))) == d) {
            break;
        }
    }

    n = snprintf(buf, size, "%.*g", prec, d);

    if (strchr(buf, '.') != NULL) {
        return n;
    }

    e = strchr(buf, 'e');
    if (e == NULL) {
        return n + snprintf(buf + n, size - (size_t) n, ".0");
    }

    memmove(e + 2, e, strlen(e) + 1);
    e[0] = '.';
    e[1] = '0';
    return n + 2;
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
        n = json_float_str(mrb, mrb_float(v), buf, sizeof(buf));
        mrb_str_cat(mrb, g->out, buf, n);
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
