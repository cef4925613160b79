/*
 * JSON: parse and generate, both written here against mruby objects.
 *
 * Parsing builds the Ruby objects as it reads (see "parse" below for why
 * not jansson).  Generation writes what CRuby's json writes, because
 * scripts compare the bytes: compact separators, "/" and non-ASCII left as
 * they are, \b \f \n \r \t and \u00XX for the other control characters,
 * Floats with the fewest digits that read back, NaN and Infinity refused
 * (GeneratorError), nesting deeper than 100 refused (NestingError) as
 * CRuby's default max_nesting does.  Both directions recurse once a level
 * in C, so whatever max_nesting says (false, 0 or negative: no limit), a
 * level is refused too when the machine stack left is below
 * MRB_STACK_RESERVE (mrb_stack.h): on a coroutine's 256 KB some 1,200
 * levels, on an 8 MB thread stack some 47,000 (built -O2; the unit test
 * lib_json_nesting_stops_at_the_stack_left, 2026-11-27).  Both directions
 * hold only GC-owned objects, so an exception half way leaks nothing.
 */

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
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
#include "mrb_stack.h"

#define JSON_MAX_NESTING  100

typedef struct {
    mrb_value    out;           /* its length is its capacity */
    mrb_int      len;           /* bytes written */
    int          pretty;
    mrb_int      max_nesting;
} json_gen;


static struct RClass *
json_error_class(mrb_state *mrb, const char *name)
{
    return mrb_class_get_under(mrb, mrb_module_get(mrb, "JSON"), name);
}


/* Before each level, both ways: max_nesting (0: none) and the stack. */
static void
json_nest(mrb_state *mrb, mrb_int max_nesting, mrb_int depth)
{
    if (max_nesting > 0 && depth > max_nesting) {
        mrb_raisef(mrb, json_error_class(mrb, "NestingError"),
                   "nesting of %d is too deep", (int) depth);
    }

    if (mrb_stack_left() < MRB_STACK_RESERVE) {
        mrb_raisef(mrb, json_error_class(mrb, "NestingError"),
                   "nesting of %d is too deep for the machine stack left",
                   (int) depth);
    }
}


/* ---- parse ---------------------------------------------------------- */

/*
 * A recursive-descent parser of RFC 8259 that builds the Ruby objects as
 * it reads.  It replaced jansson's, which built a tree of its own first:
 * 274,000 instructions for a 1.1 KB document in jansson alone (callgrind,
 * bench/callgrind_lib.py json-mruby, 2026-11-24).  Strict as
 * jansson was: UTF-8 only, no raw control characters in strings, no lone
 * surrogates, nothing after the value.
 */

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


/* What json_string makes: a String, a Hash key (a frozen String, which
 * mrb_hash_set would otherwise copy and freeze), or a Symbol. */
#define JSON_VALUE       0
#define JSON_KEY_STRING  1
#define JSON_KEY_SYMBOL  2

/* A string, ps->p at its opening quote, as sym says. */
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
        if (sym == JSON_KEY_SYMBOL) {
            return mrb_symbol_value(mrb_intern(mrb, (const char *) run,
                                               q - run));
        }
        out = mrb_str_new(mrb, (const char *) run, q - run);
        if (sym == JSON_KEY_STRING) {
            mrb_obj_freeze(mrb, out);
        }
        return out;
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
    if (sym == JSON_KEY_SYMBOL) {
        return mrb_symbol_value(mrb_intern_str(mrb, out));
    }
    if (sym == JSON_KEY_STRING) {
        mrb_obj_freeze(mrb, out);
    }
    return out;
}


/*
 * The number [ps->p, end) (its syntax checked) without strtoll/strtod
 * when that is exact: an Integer of at most 18 digits; a Float of at most
 * 15 significant digits m and a power of ten p, |p| <= 22, both exact
 * doubles, so that m * 10^p or m / 10^-p is rounded once, as strtod
 * rounds (Clinger's fast path).  Returns 0 for the others.
 */
static int
json_number_exact(json_parser *ps, const unsigned char *end, int real,
    mrb_value *v)
{
    static const double   pow10[] = {
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12,
        1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22
    };
    const unsigned char  *q = ps->p;
    uint64_t              m = 0;
    int                   neg = 0, ndigits = 0, exp10 = 0, e = 0, eneg = 0;
    double                d;

    if (*q == '-') {
        neg = 1;
        q++;
    }

    for ( ; q < end && *q >= '0' && *q <= '9'; q++) {
        if (m != 0 || *q != '0') {
            if (++ndigits > 18) {
                return 0;
            }
        }
        m = m * 10 + (uint64_t) (*q - '0');
    }

    if (!real) {
        *v = mrb_int_value(ps->mrb, neg ? -(mrb_int) m : (mrb_int) m);
        return 1;
    }

    if (q < end && *q == '.') {
        for (q++; q < end && *q >= '0' && *q <= '9'; q++) {
            if (m != 0 || *q != '0') {
                if (++ndigits > 15) {
                    return 0;
                }
            }
            m = m * 10 + (uint64_t) (*q - '0');
            exp10--;
        }
    }

    if (ndigits > 15) {
        return 0;
    }

    if (q < end && (*q == 'e' || *q == 'E')) {
        q++;
        if (*q == '+' || *q == '-') {
            eneg = (*q == '-');
            q++;
        }
        for ( ; q < end && *q >= '0' && *q <= '9'; q++) {
            if (e > 1000) {
                return 0;
            }
            e = e * 10 + (*q - '0');
        }
        exp10 += eneg ? -e : e;
    }

    if (exp10 < -22 || exp10 > 22) {
        return 0;
    }

    d = (double) m;
    d = (exp10 < 0) ? d / pow10[-exp10] : d * pow10[exp10];
    *v = mrb_float_value(ps->mrb, neg ? -d : d);
    return 1;
}


static mrb_value
json_number(json_parser *ps)
{
    const unsigned char  *q = ps->p, *digits;
    char                  buf[64], *e;
    mrb_value             v;
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

    if (json_number_exact(ps, q, real, &v)) {
        ps->p = q;
        return v;
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


static mrb_value
json_object(json_parser *ps, mrb_int depth)
{
    mrb_state  *mrb = ps->mrb;
    mrb_value   h = mrb_hash_new(mrb), k, v;
    int         ai = mrb_gc_arena_save(mrb);

    json_nest(mrb, ps->max_nesting, depth);
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
        k = json_string(ps, ps->symbolize ? JSON_KEY_SYMBOL
                                          : JSON_KEY_STRING);
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

    json_nest(mrb, ps->max_nesting, depth);
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
        return json_string(ps, JSON_VALUE);
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


/* ---- generate ------------------------------------------------------ */

/*
 * The output is written straight into a String whose length is its
 * capacity while it grows (g->len bytes are written), and cut to g->len at
 * the end: mrb_str_cat cost ~100 instructions a piece, a third of the
 * generator (bench/callgrind_lib.py json-mruby, 2026-11-24).  The pointer
 * is taken again after every call that may run Ruby (to_json, to_s).
 */

static void gen_value(mrb_state *mrb, json_gen *g, mrb_value v,
    mrb_int depth);


/* Room for n more bytes; where they go. */
static char *
gen_room(mrb_state *mrb, json_gen *g, mrb_int n)
{
    mrb_int  capa = RSTRING_LEN(g->out);

    if (n > MRB_INT_MAX / 2 - g->len) {
        mrb_raise(mrb, json_error_class(mrb, "GeneratorError"),
                  "the document is too large");
    }

    if (g->len + n > capa) {
        capa = (g->len + n > capa * 2) ? g->len + n : capa * 2;
        mrb_str_resize(mrb, g->out, capa);
    }

    return RSTRING_PTR(g->out) + g->len;
}


static void
gen_cat(mrb_state *mrb, json_gen *g, const char *p, mrb_int n)
{
    memcpy(gen_room(mrb, g, n), p, (size_t) n);
    g->len += n;
}

#define gen_cat_lit(mrb, g, lit)  gen_cat(mrb, g, lit, sizeof(lit) - 1)


static void
gen_indent(mrb_state *mrb, json_gen *g, mrb_int depth)
{
    char  *p = gen_room(mrb, g, 1 + depth * 2);

    p[0] = '\n';
    memset(p + 1, ' ', (size_t) depth * 2);
    g->len += 1 + depth * 2;
}


/* What a byte below 0x80 becomes in a string: 0 itself, else the length
 * of its escape. */
static const unsigned char  gen_escape_len[128] = {
    6, 6, 6, 6, 6, 6, 6, 6, 2, 2, 2, 6, 2, 2, 6, 6,
    6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6,
    0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};


/* s as a JSON string: one pass checks the UTF-8 and sizes the escapes,
 * the second writes. */
static void
gen_string(mrb_state *mrb, json_gen *g, const char *s, mrb_int len)
{
    static const char     hex[] = "0123456789abcdef";
    const unsigned char  *p = (const unsigned char *) s;
    mrb_int               i, extra = 0, run;
    char                 *o;
    int                   n;

    for (i = 0; i < len; ) {
        if (p[i] < 0x80) {
            if (gen_escape_len[p[i]] != 0) {
                extra += gen_escape_len[p[i]] - 1;
            }
            i++;
            continue;
        }
        n = mrb_lib_utf8_len(s + i, s + len);
        if (n == 0) {
            mrb_raise(mrb, json_error_class(mrb, "GeneratorError"),
                      "source sequence is illegal/malformed utf-8");
        }
        i += n;
    }

    if (extra > MRB_INT_MAX / 2 - len) {
        mrb_raise(mrb, json_error_class(mrb, "GeneratorError"),
                  "the document is too large");
    }

    o = gen_room(mrb, g, len + extra + 2);
    *o++ = '"';

    if (extra == 0) {
        memcpy(o, s, (size_t) len);
        o += len;
    } else {
        for (i = 0, run = 0; i < len; i++) {
            unsigned char  c = p[i];

            if (c >= 0x80 || gen_escape_len[c] == 0) {
                run++;
                continue;
            }

            memcpy(o, s + i - run, (size_t) run);
            o += run;
            run = 0;

            *o++ = '\\';
            switch (c) {
            case '"':  *o++ = '"'; break;
            case '\\': *o++ = '\\'; break;
            case '\b': *o++ = 'b'; break;
            case '\f': *o++ = 'f'; break;
            case '\n': *o++ = 'n'; break;
            case '\r': *o++ = 'r'; break;
            case '\t': *o++ = 't'; break;
            default:
                *o++ = 'u'; *o++ = '0'; *o++ = '0';
                *o++ = hex[c >> 4]; *o++ = hex[c & 15];
                break;
            }
        }
        memcpy(o, s + len - run, (size_t) run);
        o += run;
    }

    *o = '"';
    g->len += len + extra + 2;
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


typedef struct {
    json_gen   *g;
    mrb_int     depth;
    mrb_int     done;       /* entries written */
    int         ai;
} gen_hash_walk;


static void
gen_pair(mrb_state *mrb, json_gen *g, mrb_value k, mrb_value v,
    mrb_int depth, mrb_int i)
{
    if (i > 0) {
        gen_cat_lit(mrb, g, ",");
    }
    if (g->pretty) {
        gen_indent(mrb, g, depth);
    }
    gen_key(mrb, g, k);
    if (g->pretty) {
        gen_cat_lit(mrb, g, ": ");
    } else {
        gen_cat_lit(mrb, g, ":");
    }
    gen_value(mrb, g, v, depth);
}


/* Whether writing k and v runs no Ruby: no to_json or to_s, no container
 * that could hold an object that has one. */
static int
gen_runs_no_ruby(mrb_value k, mrb_value v)
{
    if (!mrb_string_p(k) && !mrb_symbol_p(k)) {
        return 0;
    }

    switch (mrb_type(v)) {
    case MRB_TT_FALSE:
    case MRB_TT_TRUE:
    case MRB_TT_INTEGER:
    case MRB_TT_FLOAT:
    case MRB_TT_STRING:
    case MRB_TT_SYMBOL:
        return 1;
    default:
        return 0;
    }
}


/*
 * The walk stops before a pair that may run Ruby: Ruby may change the
 * Hash, and mruby 3.3's walk raises "hash modified" when it has changed
 * under it.  gen_hash writes the rest by position.
 */
static int
gen_hash_i(mrb_state *mrb, mrb_value k, mrb_value v, void *arg)
{
    gen_hash_walk  *w = arg;

    if (!gen_runs_no_ruby(k, v)) {
        return 1;
    }

    gen_pair(mrb, w->g, k, v, w->depth, w->done);
    mrb_gc_arena_restore(mrb, w->ai);
    w->done++;

    return 0;
}


static void
gen_hash(mrb_state *mrb, json_gen *g, mrb_value h, mrb_int depth)
{
    gen_hash_walk  w;
    mrb_value      keys, k, v;
    mrb_int        i;
    int            ai;

    json_nest(mrb, g->max_nesting, depth);
    gen_cat_lit(mrb, g, "{");

    w.g = g;
    w.depth = depth;
    w.done = 0;
    w.ai = mrb_gc_arena_save(mrb);
    mrb_hash_foreach(mrb, mrb_hash_ptr(h), gen_hash_i, &w);

    /* the rest by position, by the keys the Hash has now: taken again
     * after each pair that may have run Ruby */
    ai = mrb_gc_arena_save(mrb);
    keys = mrb_nil_value();

    for (i = w.done; i < mrb_hash_size(mrb, h); i++) {
        if (mrb_nil_p(keys)) {
            mrb_gc_arena_restore(mrb, ai);
            keys = mrb_hash_keys(mrb, h);
            w.ai = mrb_gc_arena_save(mrb);
        }

        k = RARRAY_PTR(keys)[i];
        v = mrb_hash_get(mrb, h, k);
        if (!gen_runs_no_ruby(k, v)) {
            keys = mrb_nil_value();
        }

        gen_pair(mrb, g, k, v, depth, i);
        mrb_gc_arena_restore(mrb, w.ai);
        w.done++;
    }

    if (g->pretty && w.done > 0) {
        gen_indent(mrb, g, depth - 1);
    }
    gen_cat_lit(mrb, g, "}");
}


static void
gen_array(mrb_state *mrb, json_gen *g, mrb_value a, mrb_int depth)
{
    mrb_int  i;
    int      ai;

    json_nest(mrb, g->max_nesting, depth);
    gen_cat_lit(mrb, g, "[");
    ai = mrb_gc_arena_save(mrb);

    /* the length is read again each time: to_json of an element may
     * change the Array */
    for (i = 0; i < RARRAY_LEN(a); i++) {
        if (i > 0) {
            gen_cat_lit(mrb, g, ",");
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
    gen_cat_lit(mrb, g, "]");
}


/* The decimal digits of v, written backwards from end; returns where they
 * start. */
static char *
gen_digits(char *end, uint64_t v)
{
    do {
        *--end = (char) ('0' + v % 10);
        v /= 10;
    } while (v != 0);

    return end;
}


static void
gen_integer(mrb_state *mrb, json_gen *g, mrb_int i)
{
    char      buf[24], *p;
    uint64_t  u = (i < 0) ? 0 - (uint64_t) i : (uint64_t) i;

    p = gen_digits(buf + sizeof(buf), u);
    if (i < 0) {
        *--p = '-';
    }
    gen_cat(mrb, g, p, buf + sizeof(buf) - p);
}


/*
 * The common case of json_float_str: a Float that k <= 15 decimals give
 * back exactly, 1e-4 <= |d| < 1e15, at most 15 significant digits.  Then
 * r = d * 10^k rounded is an integer below 2^53 and 10^k is exact, so
 * r / 10^k is rounded once, as strtod rounds "r e-k": the same Float, and
 * the same digits as "%.15g" writes (found in ~50 instructions instead of
 * ~9,000 for two snprintf and a strtod: callgrind, 2026-11-24).  Returns
 * the length, or 0 when d is not such a Float.
 */
static int
json_float_short(mrb_state *mrb, double d, char *buf)
{
    static const double  pow10[] = {
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12,
        1e13, 1e14, 1e15
    };
    double     a = fabs(d), r;
    uint64_t   u;
    char       digits[24], *p, *o = buf;
    int        k, n, intdigits;

    if (!(a >= 1e-4 && a < 1e15)) {
        return 0;
    }

    for (intdigits = 1; intdigits < 16 && a >= pow10[intdigits]; intdigits++)
    {
        /* the digits before the point */
    }

    for (k = 0; k <= 15; k++) {
        r = nearbyint(a * pow10[k]);
        if (r >= 9007199254740992.0) {      /* 2^53 */
            return 0;
        }
        if (mrb_float(mrb_float_value(mrb, r / pow10[k])) == a) {
            break;
        }
    }
    if (k > 15) {
        return 0;
    }

    u = (uint64_t) r;
    p = gen_digits(digits + sizeof(digits), u);
    n = (int) (digits + sizeof(digits) - p);

    /* significant digits: those of r without the zeros before it */
    if (n > 15 || (a >= 1 && intdigits + k > 15)) {
        return 0;
    }

    if (d < 0) {
        *o++ = '-';
    }
    if (n <= k) {                           /* 0.000ddd */
        *o++ = '0';
        *o++ = '.';
        memset(o, '0', (size_t) (k - n));
        o += k - n;
        memcpy(o, p, (size_t) n);
        o += n;
    } else {
        memcpy(o, p, (size_t) (n - k));
        o += n - k;
        *o++ = '.';
        if (k == 0) {
            *o++ = '0';
        } else {
            memcpy(o, p + n - k, (size_t) k);
            o += k;
        }
    }

    return (int) (o - buf);
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

    n = json_float_short(mrb, d, buf);
    if (n > 0) {
        return n;
    }

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
    char            buf[40];
    int             n;

    switch (mrb_type(v)) {
    case MRB_TT_FALSE:
        if (mrb_nil_p(v)) {
            gen_cat_lit(mrb, g, "null");
        } else {
            gen_cat_lit(mrb, g, "false");
        }
        return;

    case MRB_TT_TRUE:
        gen_cat_lit(mrb, g, "true");
        return;

    case MRB_TT_INTEGER:
        gen_integer(mrb, g, mrb_integer(v));
        return;

    case MRB_TT_FLOAT:
        if (isnan(mrb_float(v)) || isinf(mrb_float(v))) {
            s = mrb_obj_as_string(mrb, v);
            mrb_raisef(mrb, json_error_class(mrb, "GeneratorError"),
                       "%v not allowed in JSON", s);
        }
        n = json_float_str(mrb, mrb_float(v), buf, sizeof(buf));
        gen_cat(mrb, g, buf, n);
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
        s = mrb_str_to_str(mrb, mrb_funcall(mrb, v, "to_json", 0));
        gen_cat(mrb, g, RSTRING_PTR(s), RSTRING_LEN(s));
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

    g.out = mrb_str_new(mrb, NULL, 256);
    g.len = 0;
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
    return mrb_str_resize(mrb, g.out, g.len);
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
