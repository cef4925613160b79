/*
 * Regexp: Ruby's patterns on Oniguruma, which speaks Ruby's syntax (the
 * originals' mruby-onig-regexp uses it too).
 *
 * mruby 3.1 compiles a literal /re/i into Regexp.compile("re", "i") run
 * each time the literal is reached, so compile looks the pattern up in a
 * per-interpreter cache first: a literal in a cached script is compiled
 * once per interpreter, and a hit costs a hash of its source.  The cache
 * is direct-mapped with REGEXP_CACHE_SLOTS slots: patterns built from
 * request data (/#{x}/) can only replace entries, never grow it.
 *
 * $~, $1..$9, $&, $`, $' and $+ are plain globals in mruby (the parser
 * reads them with OP_GETGV), so a match must store them.  Building them
 * costs more than the match, so they are stored only when some script of
 * the interpreter names one of them (its symbol exists: checked again only
 * when the symbol table grew).  They are the run's all the same: the
 * top-level isolation never keeps them as sealed globals
 * (mrb_toplevel.c), so they are removed when the run that set them ends
 * and taken aside while it waits.
 *
 * Two limits keep a pattern from taking the worker, both from request
 * data and both raising RegexpError (docs/security.md):
 * - compiling: Oniguruma's parser and compiler recurse on the machine
 *   stack, so the parse depth each compile allows comes from the stack left
 *   (regexp_compile_depth);
 * - matching: backtracking is counted, per start position and per search
 *   (regexp_match_param).
 */

#include <pthread.h>
#include <string.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/data.h>
#include <mruby/hash.h>
#include <mruby/string.h>
#include <mruby/variable.h>

#include "mrb_api.h"
#include "mrb_lib.h"
#include "mrb_mruby_version.h"    /* mrb->symidx counts the symbols */
#include "mrb_regexp.h"
#include "mrb_run_budget.h"
#include "mrb_stack.h"

#if ONIGURUMA_VERSION_INT < 60908
#error "Oniguruma 6.9.8 or later is needed (retry limits of a search)"
#endif

#define REGEXP_CACHE_SLOTS  256     /* a power of two */

/* The match globals, in the order of regexp_state.wanted's bits. */
static const char  *regexp_globals[] = {
    "$~", "$&", "$`", "$'", "$+",
    "$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9"
};

#define REGEXP_NGLOBALS  (sizeof(regexp_globals) / sizeof(regexp_globals[0]))
#define REGEXP_NTH_FIRST 5          /* index of "$1" */

/* The GC-held Array of the state: the cache's slots, then the last match
 * (its Regexp, its String or nil, its MatchData or nil until asked for). */
#define REGEXP_LAST_RE   REGEXP_CACHE_SLOTS
#define REGEXP_LAST_STR  (REGEXP_CACHE_SLOTS + 1)
#define REGEXP_LAST_MD   (REGEXP_CACHE_SLOTS + 2)
#define REGEXP_GC_SIZE   (REGEXP_CACHE_SLOTS + 3)

/* Per interpreter: held by the Regexp class, freed with the interpreter. */
typedef struct {
    OnigRegion      region;         /* where every search leaves its groups */
    OnigMatchParam *match_param;    /* every search's limits */
    struct RArray  *gc;             /* the class's __gc__ Array */
    OnigRegion      last;           /* the last match's groups, kept until a
                                       MatchData is asked for */
    mrb_sym         symidx;         /* mrb->symidx when wanted was computed */
    uint32_t        wanted;         /* bit i: regexp_globals[i] is named */
    mrb_sym         syms[REGEXP_NGLOBALS];
} regexp_state;


static void
regexp_free(mrb_state *mrb, void *p)
{
    mrb_regexp  *rx = p;

    if (rx != NULL) {
        onig_free(rx->re);
        mrb_free(mrb, rx->src);
        mrb_free(mrb, rx);
    }
}


static void
regexp_state_free(mrb_state *mrb, void *p)
{
    regexp_state  *st = p;

    if (st != NULL) {
        onig_region_free(&st->region, 0);
        onig_region_free(&st->last, 0);
        if (st->match_param != NULL) {
            onig_free_match_param(st->match_param);
        }
        mrb_free(mrb, st);
    }
}


const struct mrb_data_type  mrb_regexp_type = { "Regexp", regexp_free };
static const struct mrb_data_type  regexp_state_type = {
    "Regexp state", regexp_state_free
};


static regexp_state *
regexp_state_get(mrb_state *mrb)
{
    return mrb_lib_get(mrb)->regexp;
}


mrb_regexp *
mrb_regexp_check(mrb_state *mrb, mrb_value self)
{
    return mrb_data_get_ptr(mrb, self, &mrb_regexp_type);
}


/* ---- compiling ------------------------------------------------------ */

/*
 * Oniguruma's parser and compiler recurse once or more a level of nesting,
 * and its compiler once more a subexpression call (\g<name>) along a chain
 * of calls, which the parse depth does not bound.  Measured with Debian
 * 12's libonig5 6.9.8 on patterns nested 50 to 1,000 deep (groups, classes,
 * quantifiers, alternations, look-arounds, conditionals, absent operators,
 * with and without /i) and on chains of 3,000 calls: at most 1,398 bytes
 * of stack a unit of parse depth (the absent operator, (?~...); a group
 * counts two units and costs 770 bytes) and 1,120 bytes a call of a
 * chain.  So a compile gets the parse depth that
 * REGEXP_STACK_PER_DEPTH bytes a unit, for each call of the pattern and
 * once more, fits in the stack left above MRB_STACK_RESERVE, and at most
 * Oniguruma's default: 51 nested groups on a coroutine's 256 KB, 2,031 on
 * an 8 MB thread stack (built -O2; the unit test
 * lib_regexp_compile_depth_comes_from_the_stack_left, 2026-11-27).  Deeper
 * raises RegexpError.
 *
 * The limit is one global of Oniguruma's, read while it parses: each
 * compile sets it and compiles under regexp_compile_lock, so that threads
 * with different stacks left do not compile with each other's.
 */
#define REGEXP_STACK_PER_DEPTH  2048
#define REGEXP_MAX_DEPTH        4096    /* Oniguruma's default */

static pthread_once_t   regexp_onig_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t  regexp_compile_lock = PTHREAD_MUTEX_INITIALIZER;

static void
regexp_onig_init(void)
{
    OnigEncoding  encs[] = { ONIG_ENCODING_UTF8, ONIG_ENCODING_ASCII };

    onig_initialize(encs, 2);
}


/* Regexp.new's second argument: an Integer of option bits, a String of
 * option letters (what a literal passes), or any true value for /i. */
static mrb_int
regexp_flags(mrb_state *mrb, mrb_value opt, mrb_value enc)
{
    mrb_int  flags = 0;

    if (mrb_integer_p(opt)) {
        flags = mrb_integer(opt) & (MRB_REGEXP_IGNORECASE
                                    | MRB_REGEXP_EXTENDED
                                    | MRB_REGEXP_MULTILINE
                                    | MRB_REGEXP_NOENCODING);
    } else if (mrb_string_p(opt)) {
        const char  *p = RSTRING_PTR(opt);
        mrb_int      i;

        for (i = 0; i < RSTRING_LEN(opt); i++) {
            switch (p[i]) {
            case 'i': flags |= MRB_REGEXP_IGNORECASE; break;
            case 'x': flags |= MRB_REGEXP_EXTENDED; break;
            case 'm': flags |= MRB_REGEXP_MULTILINE; break;
            case 'n': flags |= MRB_REGEXP_NOENCODING; break;
            default: break;
            }
        }
    } else if (mrb_test(opt)) {
        flags = MRB_REGEXP_IGNORECASE;
    }

    if (mrb_string_p(enc) && RSTRING_LEN(enc) > 0
        && (RSTRING_PTR(enc)[0] == 'n' || RSTRING_PTR(enc)[0] == 'N'))
    {
        flags |= MRB_REGEXP_NOENCODING;
    }

    return flags;
}


/* The subexpression calls (\g<name>) of a pattern, or more: an escaped
 * backslash is skipped, a \g in a class is counted. */
static size_t
regexp_count_calls(const char *src, mrb_int len)
{
    size_t   calls = 0;
    mrb_int  i;

    for (i = 0; i + 1 < len; i++) {
        if (src[i] == '\\') {
            calls += src[i + 1] == 'g';
            i++;
        }
    }

    return calls;
}


/* The parse depth a compile of a pattern with calls subexpression calls
 * may use on the stack left; 0 when not even one level fits. */
static unsigned
regexp_compile_depth(size_t calls)
{
    size_t  left = mrb_stack_left(), depth;

    if (left < MRB_STACK_RESERVE) {
        return 0;
    }
    depth = (left - MRB_STACK_RESERVE) / REGEXP_STACK_PER_DEPTH / (calls + 1);
    return depth < REGEXP_MAX_DEPTH ? (unsigned) depth : REGEXP_MAX_DEPTH;
}


/*
 * A hash of a pattern's source and flags, 8 bytes a step: every literal
 * reached on every run hashes its source to find the compiled pattern in
 * the cache, and FNV-1a a byte at a time cost ~210 instructions for the
 * ~30-byte patterns of bench/lib_router.rb (bench/notes.md).
 */
static uint32_t
regexp_hash(const char *p, mrb_int len, mrb_int flags)
{
    uint64_t  h = ((uint64_t) len << 8 | (uint64_t) flags)
                  * 0x9e3779b97f4a7c15u;
    uint64_t  w;
    mrb_int   i;

    for (i = 0; i + 8 <= len; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15u;
        h ^= h >> 32;
    }

    if (i < len) {
        w = 0;
        memcpy(&w, p + i, (size_t) (len - i));
        h = (h ^ w) * 0x9e3779b97f4a7c15u;
        h ^= h >> 32;
    }

    return (uint32_t) h;
}


/* A new frozen Regexp of src, or raises RegexpError. */
static mrb_value
regexp_compile(mrb_state *mrb, struct RClass *c, const char *src,
    mrb_int len, mrb_int flags)
{
    mrb_regexp    *rx;
    struct RData  *d;
    OnigErrorInfo  einfo;
    OnigOptionType opt = ONIG_OPTION_NONE;
    OnigUChar      msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    size_t         calls;
    unsigned       depth;
    int            rc;

    pthread_once(&regexp_onig_once, regexp_onig_init);
    mrb_stack_check(mrb);

    if (flags & MRB_REGEXP_IGNORECASE) opt |= ONIG_OPTION_IGNORECASE;
    if (flags & MRB_REGEXP_EXTENDED)   opt |= ONIG_OPTION_EXTEND;
    if (flags & MRB_REGEXP_MULTILINE)  opt |= ONIG_OPTION_MULTILINE;

    /* the object first: it owns rx from here on, whatever raises */
    d = mrb_data_object_alloc(mrb, c, NULL, &mrb_regexp_type);
    rx = mrb_calloc(mrb, 1, sizeof(mrb_regexp));
    d->data = rx;
    rx->flags = flags;
    rx->src = mrb_malloc(mrb, len + 1);
    memcpy(rx->src, src, len);
    rx->src[len] = '\0';
    rx->srclen = len;

    calls = regexp_count_calls(src, len);
    depth = regexp_compile_depth(calls);
    if (depth == 0) {
        mrb_raisef(mrb, mrb_class_get(mrb, "RegexpError"),
                   "too many subexpression calls (%d) for the machine "
                   "stack left: /%s/", (int) calls, rx->src);
    }

    pthread_mutex_lock(&regexp_compile_lock);
    onig_set_parse_depth_limit(depth);
    rc = onig_new(&rx->re, (const OnigUChar *) rx->src,
                  (const OnigUChar *) rx->src + len, opt,
                  (flags & MRB_REGEXP_NOENCODING) ? ONIG_ENCODING_ASCII
                                                  : ONIG_ENCODING_UTF8,
                  ONIG_SYNTAX_RUBY, &einfo);
    pthread_mutex_unlock(&regexp_compile_lock);

    if (rc == ONIGERR_PARSE_DEPTH_LIMIT_OVER) {
        mrb_raisef(mrb, mrb_class_get(mrb, "RegexpError"),
                   "pattern nests deeper than the machine stack left allows "
                   "(parse depth limit %d): /%s/", (int) depth, rx->src);
    }

    if (rc != ONIG_NORMAL) {
        rx->re = NULL;
        onig_error_code_to_str(msg, rc, &einfo);
        mrb_raisef(mrb, mrb_class_get(mrb, "RegexpError"), "%s: /%s/",
                   (const char *) msg, rx->src);
    }

    return mrb_obj_freeze(mrb, mrb_obj_value(d));
}


/* Regexp.new(src, opt = nil, enc = nil) and Regexp.compile, through the
 * cache. */
static mrb_value
regexp_s_new(mrb_state *mrb, mrb_value self)
{
    mrb_value    src, opt = mrb_nil_value(), enc = mrb_nil_value();
    regexp_state *st;
    mrb_value    hit, re;
    mrb_regexp  *rx;
    mrb_int      flags, slot, argc;
    const mrb_value  *argv;

    /* reached by every literal on every run: the arguments are read
     * without mrb_get_args (200 instructions of a hit's 450: callgrind,
     * bench/callgrind.py nginx regexp, 2026-11-24) */
    argc = mrb_get_argc(mrb);
    if (argc < 1 || argc > 3) {
        mrb_argnum_error(mrb, argc, 1, 3);
    }
    argv = mrb_get_argv(mrb);
    src = argv[0];
    if (argc > 1) {
        opt = argv[1];
    }
    if (argc > 2) {
        enc = argv[2];
    }

    if (mrb_data_p(src) && DATA_TYPE(src) == &mrb_regexp_type) {
        rx = DATA_PTR(src);
        if (mrb_nil_p(opt)) {
            return src;
        }
        src = mrb_str_new(mrb, rx->src, rx->srclen);
    }

    if (!mrb_string_p(src)) {
        src = mrb_str_to_str(mrb, src);
    }
    flags = regexp_flags(mrb, opt, enc);

    if (mrb_class_ptr(self) != mrb_lib_get(mrb)->regexp_class) {
        return regexp_compile(mrb, mrb_class_ptr(self), RSTRING_PTR(src),
                              RSTRING_LEN(src), flags);
    }

    st = regexp_state_get(mrb);
    slot = regexp_hash(RSTRING_PTR(src), RSTRING_LEN(src), flags)
           & (REGEXP_CACHE_SLOTS - 1);
    hit = ARY_PTR(st->gc)[slot];

    if (!mrb_nil_p(hit)) {
        rx = DATA_PTR(hit);
        if (rx->flags == flags && rx->srclen == RSTRING_LEN(src)
            && memcmp(rx->src, RSTRING_PTR(src), rx->srclen) == 0)
        {
            return hit;
        }
    }

    re = regexp_compile(mrb, mrb_class_ptr(self), RSTRING_PTR(src),
                        RSTRING_LEN(src), flags);
    mrb_ary_set(mrb, mrb_obj_value(st->gc), slot, re);
    return re;
}


/* Regexp.escape(str): str with the characters that mean something in a
 * pattern escaped, as Ruby escapes them. */
static mrb_value
regexp_s_escape(mrb_state *mrb, mrb_value self)
{
    mrb_value    str, out;
    const char  *p;
    mrb_int      i, len;

    mrb_get_args(mrb, "o", &str);
    if (mrb_symbol_p(str)) {
        str = mrb_sym_str(mrb, mrb_symbol(str));
    }
    str = mrb_str_to_str(mrb, str);

    len = RSTRING_LEN(str);
    out = mrb_str_new_capa(mrb, len + 8);

    for (i = 0; i < len; i++) {
        char  c = RSTRING_PTR(str)[i];

        p = NULL;
        switch (c) {
        case '[': case ']': case '{': case '}': case '(': case ')':
        case '|': case '-': case '*': case '.': case '\\': case '?':
        case '+': case '^': case '$': case '#':
            mrb_str_cat(mrb, out, "\\", 1);
            break;
        case ' ':  p = "\\ "; break;
        case '\t': p = "\\t"; break;
        case '\n': p = "\\n"; break;
        case '\r': p = "\\r"; break;
        case '\f': p = "\\f"; break;
        case '\v': p = "\\v"; break;
        default: break;
        }

        if (p != NULL) {
            mrb_str_cat(mrb, out, p, 2);
        } else {
            mrb_str_cat(mrb, out, &c, 1);
        }
    }

    return out;
}


/* ---- the match globals ---------------------------------------------- */

static uint32_t
regexp_wanted(mrb_state *mrb, regexp_state *st)
{
    size_t  i;

    if (st->symidx == mrb->symidx) {
        return st->wanted;
    }

    st->wanted = 0;
    for (i = 0; i < REGEXP_NGLOBALS; i++) {
        st->syms[i] = mrb_intern_check_cstr(mrb, regexp_globals[i]);
        if (st->syms[i] != 0) {
            st->wanted |= 1u << i;
        }
    }

    /* every other global is read from $~ */
    if (st->wanted != 0 && st->syms[0] == 0) {
        st->syms[0] = mrb_intern_lit(mrb, "$~");
        st->wanted |= 1;
    }

    st->symidx = mrb->symidx;
    return st->wanted;
}


static void
regexp_set_globals(mrb_state *mrb, regexp_state *st, uint32_t wanted,
    mrb_value md)
{
    const mrb_value  *m = NULL;
    mrb_value         str = mrb_nil_value(), v;
    size_t            i;
    mrb_int           len, last, ngroups = 0;

    if (!mrb_nil_p(md)) {
        m = mrb_matchdata_check(mrb, md, &ngroups);
        str = m[MRB_MATCH_STR];
    }

    mrb_gv_set(mrb, st->syms[0], md);

    for (i = 1; i < REGEXP_NGLOBALS; i++) {
        if (!(wanted & (1u << i))) {
            continue;
        }

        v = mrb_nil_value();
        if (m != NULL) {
            len = RSTRING_LEN(str);
            switch (i) {
            case 1:
                v = mrb_matchdata_group(mrb, md, 0);
                break;
            case 2:
                v = mrb_str_substr(mrb, str, 0, mrb_match_beg(m, 0));
                break;
            case 3:
                v = mrb_str_substr(mrb, str, mrb_match_end(m, 0),
                                   len - mrb_match_end(m, 0));
                break;
            case 4:
                for (last = ngroups - 1; last > 0; last--) {
                    if (mrb_match_beg(m, last) >= 0) {
                        break;
                    }
                }
                v = (last > 0) ? mrb_matchdata_group(mrb, md, last)
                               : mrb_nil_value();
                break;
            default:
                v = mrb_matchdata_group(mrb, md,
                                        (mrb_int) (i - REGEXP_NTH_FIRST + 1));
                break;
            }
        }

        mrb_gv_set(mrb, st->syms[i], v);
    }
}


/* Slot i of the state's Array, which is never frozen, shared or shorter
 * than REGEXP_GC_SIZE (mrb_ary_set checks all three: 70 instructions, three
 * times a match; bench/callgrind.py nginx regexp, 2026-11-24). */
static void
regexp_gc_set(mrb_state *mrb, regexp_state *st, mrb_int i, mrb_value v)
{
    ARY_PTR(st->gc)[i] = v;
    mrb_field_write_barrier_value(mrb, (struct RBasic *) st->gc, v);
}


/*
 * Records a search's outcome as the last match: re and str with the groups
 * in st->region when it matched (md its MatchData if one was made), or
 * str nil.  A MatchData is made only when a script names a match global;
 * Regexp.last_match makes one from the kept groups when asked.
 */
static void
regexp_record(mrb_state *mrb, regexp_state *st, mrb_value re, mrb_value str,
    mrb_value md)
{
    uint32_t   wanted = regexp_wanted(mrb, st);

    if (wanted != 0) {
        if (mrb_nil_p(md) && !mrb_nil_p(str)) {
            md = mrb_matchdata_new(mrb, re, str, &st->region);
        }
        regexp_set_globals(mrb, st, wanted, md);
    }

    if (mrb_nil_p(md) && !mrb_nil_p(str)
        && onig_region_resize(&st->last, st->region.num_regs) == ONIG_NORMAL)
    {
        memcpy(st->last.beg, st->region.beg,
               st->region.num_regs * sizeof(int));
        memcpy(st->last.end, st->region.end,
               st->region.num_regs * sizeof(int));
    }

    regexp_gc_set(mrb, st, REGEXP_LAST_RE, re);
    regexp_gc_set(mrb, st, REGEXP_LAST_STR, str);
    regexp_gc_set(mrb, st, REGEXP_LAST_MD, md);

    if (!mrb_lib_get(mrb)->run_state) {
        mrb_lib_get(mrb)->run_state = 1;
        mrb_part_dirty(mrb, &mrb_regexp_part);
    }
}


int
mrb_regexp_run_end(mrb_state *mrb, const mrb_run_rec *run)
{
    regexp_state  *st = regexp_state_get(mrb);
    mrb_value      gc = mrb_obj_value(st->gc);

    mrb_ary_set(mrb, gc, REGEXP_LAST_RE, mrb_nil_value());
    mrb_ary_set(mrb, gc, REGEXP_LAST_STR, mrb_nil_value());
    mrb_ary_set(mrb, gc, REGEXP_LAST_MD, mrb_nil_value());
    mrb_lib_get(mrb)->run_state = 0;
    return 0;
}


mrb_value
mrb_regexp_take(mrb_state *mrb)
{
    regexp_state  *st = regexp_state_get(mrb);
    mrb_value      gc = mrb_obj_value(st->gc);
    mrb_value      md;

    if (mrb_nil_p(mrb_ary_ref(mrb, gc, REGEXP_LAST_STR))) {
        return mrb_nil_value();
    }

    md = mrb_ary_ref(mrb, gc, REGEXP_LAST_MD);
    if (mrb_nil_p(md)) {
        md = mrb_matchdata_new(mrb, mrb_ary_ref(mrb, gc, REGEXP_LAST_RE),
                               mrb_ary_ref(mrb, gc, REGEXP_LAST_STR),
                               &st->last);
    }

    return md;
}


void
mrb_regexp_put_back(mrb_state *mrb, mrb_value md)
{
    regexp_state     *st = regexp_state_get(mrb);
    const mrb_value  *m = RARRAY_PTR(md);  /* mrb_regexp_take's MatchData:
                                              nothing may raise here */

    regexp_gc_set(mrb, st, REGEXP_LAST_RE, m[MRB_MATCH_RE]);
    regexp_gc_set(mrb, st, REGEXP_LAST_STR, m[MRB_MATCH_STR]);
    regexp_gc_set(mrb, st, REGEXP_LAST_MD, md);
    mrb_lib_get(mrb)->run_state = 1;
}


void
mrb_regexp_set_last_match(mrb_state *mrb, mrb_value md)
{
    regexp_state     *st = regexp_state_get(mrb);
    const mrb_value  *m;
    mrb_value         re = mrb_nil_value(), str = mrb_nil_value();
    mrb_int           ngroups;

    if (!mrb_nil_p(md)) {
        m = mrb_matchdata_check(mrb, md, &ngroups);
        re = m[MRB_MATCH_RE];
        str = m[MRB_MATCH_STR];
    }

    regexp_record(mrb, st, re, str, md);
}


/* Regexp.last_match(n = nil) */
static mrb_value
regexp_s_last_match(mrb_state *mrb, mrb_value self)
{
    regexp_state  *st = regexp_state_get(mrb);
    mrb_value      gc = mrb_obj_value(st->gc);
    mrb_value      md, str, n = mrb_nil_value();

    mrb_get_args(mrb, "|o", &n);

    str = mrb_ary_ref(mrb, gc, REGEXP_LAST_STR);
    if (mrb_nil_p(str)) {
        return mrb_nil_value();
    }

    md = mrb_ary_ref(mrb, gc, REGEXP_LAST_MD);
    if (mrb_nil_p(md)) {
        md = mrb_matchdata_new(mrb, mrb_ary_ref(mrb, gc, REGEXP_LAST_RE),
                               str, &st->last);
        mrb_ary_set(mrb, gc, REGEXP_LAST_MD, md);
    }

    return mrb_nil_p(n) ? md : mrb_funcall(mrb, md, "[]", 1, n);
}


/* Regexp.__set_last_match(md): for the Ruby parts of the library, which
 * must not name $~ themselves (that would make every match store it). */
static mrb_value
regexp_s_set_last_match(mrb_state *mrb, mrb_value self)
{
    mrb_value  md;

    mrb_get_args(mrb, "o", &md);
    mrb_regexp_set_last_match(mrb, md);
    return md;
}


/* ---- matching ------------------------------------------------------- */

/*
 * Backtracking is counted (Oniguruma's retries): REGEXP_RETRY_LIMIT_IN_MATCH
 * at one start position, REGEXP_RETRY_LIMIT_IN_SEARCH over all positions
 * of one search, and past either the search raises RegexpError.  Measured
 * on a 2-core machine (Debian 12, libonig5 6.9.8, loaded; 2026-11-27,
 * test_regexp_backtracking.py and timed runs of the pattern): 1,000,000 retries
 * take some 0.05 s, so a search stops within about half a second;
 * /(a+)+$/ on ("a" * 23 + "!") * 60, 30 s without the limits, stops after
 * 0.05 s.  The patterns of a 1 MB body measured below the limits: a
 * quoted string with escapes ("(?:[^"\\]|\\.)*"), /(\w+\s?)*$/ on
 * words, /\s+$/, /(.*)foo/.  The one place they are set, per search.
 */
#define REGEXP_RETRY_LIMIT_IN_MATCH   1000000
#define REGEXP_RETRY_LIMIT_IN_SEARCH  10000000

/*
 * Backtracking steps per millisecond, from the figure above (10^7 steps of
 * /(a+)+$/ in 0.5 s): Oniguruma 6.9.8 has no time limit, so a search may
 * take no more steps than the run's time budget has left for, and one
 * that would is stopped before the budget ends rather than 0.5 s later.
 */
#define REGEXP_RETRIES_PER_MS         20000


/* The retry limits of a search now: *budget 1 when the run's time budget
 * lowered them. */
static void
regexp_retry_limits(mrb_state *mrb, unsigned long *in_match,
    unsigned long *in_search, int *budget)
{
    long  left = mrb_run_budget_left_ms(mrb);

    *in_match = REGEXP_RETRY_LIMIT_IN_MATCH;
    *in_search = REGEXP_RETRY_LIMIT_IN_SEARCH;
    *budget = 0;

    if (left >= 0 && (unsigned long) left
                     < REGEXP_RETRY_LIMIT_IN_SEARCH / REGEXP_RETRIES_PER_MS)
    {
        *in_search = (unsigned long) left * REGEXP_RETRIES_PER_MS;
        *in_match = *in_match < *in_search ? *in_match : *in_search;
        *budget = 1;
    }
}


static OnigMatchParam *
regexp_match_param(regexp_state *st, unsigned long in_match,
    unsigned long in_search)
{
    onig_set_retry_limit_in_match_of_match_param(st->match_param, in_match);
    onig_set_retry_limit_in_search_of_match_param(st->match_param,
                                                  in_search);
    return st->match_param;
}


/*
 * Searches str for rx from byte pos (backward towards 0 when backward);
 * returns where the match starts, the groups in st->region, or -1.
 * With check, a UTF-8 pattern first checks that str is valid UTF-8, as
 * Ruby does (ArgumentError otherwise); a loop over one String checks it
 * on its first search only.
 */
static mrb_int
regexp_search(mrb_state *mrb, regexp_state *st, mrb_regexp *rx,
    mrb_value str, mrb_int pos, int backward, int check)
{
    const OnigUChar  *s = (const OnigUChar *) RSTRING_PTR(str);
    mrb_int           len = RSTRING_LEN(str);
    OnigUChar         msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    unsigned long     in_match, in_search;
    int               rc, budget;

    if (pos < 0 || pos > len) {
        return -1;
    }

    if (check && !(rx->flags & MRB_REGEXP_NOENCODING)
        && !mrb_lib_utf8_valid((const char *) s, (size_t) len))
    {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "invalid byte sequence in UTF-8");
    }

    regexp_retry_limits(mrb, &in_match, &in_search, &budget);
    rc = onig_search_with_param(rx->re, s, s + len, s + pos,
                                backward ? s : s + len, &st->region,
                                ONIG_OPTION_NONE,
                                regexp_match_param(st, in_match, in_search));
    if (rc >= 0) {
        return rc;
    }

    if (rc == ONIG_MISMATCH) {
        return -1;
    }

    if (rc == ONIGERR_RETRY_LIMIT_IN_MATCH_OVER
        || rc == ONIGERR_RETRY_LIMIT_IN_SEARCH_OVER)
    {
        mrb_raisef(mrb, mrb_class_get(mrb, "RegexpError"),
                   "backtracking limit hit: more than %d retries %s%s: /%s/",
                   (int) (rc == ONIGERR_RETRY_LIMIT_IN_MATCH_OVER
                          ? in_match : in_search),
                   rc == ONIGERR_RETRY_LIMIT_IN_MATCH_OVER
                       ? "at one position (retry_limit_in_match)"
                       : "in one search (retry_limit_in_search)",
                   budget ? ", as few as the run's time budget left" : "",
                   rx->src);
    }

    onig_error_code_to_str(msg, rc);
    mrb_raisef(mrb, mrb_class_get(mrb, "RegexpError"), "%s: /%s/",
               (const char *) msg, rx->src);
    return -1;
}


mrb_int
mrb_regexp_search(mrb_state *mrb, mrb_value re, mrb_value str, mrb_int pos,
    int backward, int check, const OnigRegion **region)
{
    regexp_state  *st = regexp_state_get(mrb);

    *region = &st->region;
    return regexp_search(mrb, st, mrb_regexp_check(mrb, re), str, pos,
                         backward, check);
}


void
mrb_regexp_record(mrb_state *mrb, mrb_value re, mrb_value str, mrb_value md)
{
    regexp_record(mrb, regexp_state_get(mrb), re, str, md);
}


/* What a pattern method accepts as its subject: a String, a Symbol's name,
 * or nil (no match). */
static mrb_value
regexp_subject(mrb_state *mrb, mrb_value v)
{
    if (mrb_nil_p(v) || mrb_string_p(v)) {
        return v;
    }

    if (mrb_symbol_p(v)) {
        return mrb_sym_str(mrb, mrb_symbol(v));
    }

    return mrb_str_to_str(mrb, v);
}


/* A negative pos counts from the end; -1 when it lies outside str. */
static mrb_int
regexp_pos(mrb_value str, mrb_int pos)
{
    if (pos < 0) {
        pos += RSTRING_LEN(str);
    }

    return (pos < 0 || pos > RSTRING_LEN(str)) ? -1 : pos;
}


/*
 * The search behind every method: a MatchData (and the match globals set)
 * or nil.  set_globals 0 leaves the globals alone (match?, the library's
 * own loops).
 */
static mrb_value
regexp_match_at(mrb_state *mrb, mrb_value self, mrb_value str, mrb_int pos,
    int backward, int set_globals)
{
    regexp_state  *st = regexp_state_get(mrb);
    mrb_regexp    *rx = mrb_regexp_check(mrb, self);
    mrb_value      md = mrb_nil_value();

    if (!mrb_nil_p(str) && pos >= 0
        && regexp_search(mrb, st, rx, str, pos, backward, 1) >= 0)
    {
        md = mrb_matchdata_new(mrb, self, str, &st->region);
    }

    if (set_globals) {
        regexp_record(mrb, st, self, mrb_nil_p(md) ? md : str, md);
    }

    return md;
}


/* re.match(str, pos = 0) { |md| ... } */
static mrb_value
regexp_match(mrb_state *mrb, mrb_value self)
{
    mrb_value  str, md, blk = mrb_nil_value();
    mrb_int    pos = 0;

    /* the common call, re.match(str), without mrb_get_args (330
     * instructions, a sixth of a match) */
    if (mrb_get_argc(mrb) == 1 && !mrb_block_given_p(mrb)) {
        str = mrb_get_argv(mrb)[0];
    } else {
        mrb_get_args(mrb, "o|i&", &str, &pos, &blk);
    }
    str = regexp_subject(mrb, str);
    if (!mrb_nil_p(str)) {
        pos = regexp_pos(str, pos);
    }

    md = regexp_match_at(mrb, self, str, pos, 0, 1);
    if (!mrb_nil_p(md) && !mrb_nil_p(blk)) {
        return mrb_yield(mrb, blk, md);
    }

    return md;
}


/* re.match?(str, pos = 0): no MatchData, no globals. */
static mrb_value
regexp_match_p(mrb_state *mrb, mrb_value self)
{
    regexp_state  *st;
    mrb_value      str;
    mrb_int        pos = 0;

    if (mrb_get_argc(mrb) == 1) {
        str = mrb_get_argv(mrb)[0];
    } else {
        mrb_get_args(mrb, "o|i", &str, &pos);
    }
    str = regexp_subject(mrb, str);
    if (mrb_nil_p(str)) {
        return mrb_false_value();
    }

    pos = regexp_pos(str, pos);
    st = regexp_state_get(mrb);

    return mrb_bool_value(pos >= 0
        && regexp_search(mrb, st, mrb_regexp_check(mrb, self), str, pos, 0,
                          1)
           >= 0);
}


/*
 * re =~ str: where the match starts, or nil.  Without a script that names
 * a match global no MatchData is made.
 */
static mrb_value
regexp_match_op(mrb_state *mrb, mrb_value self)
{
    regexp_state  *st;
    mrb_value      str = mrb_get_arg1(mrb);

    str = regexp_subject(mrb, str);
    st = regexp_state_get(mrb);

    if (mrb_nil_p(str)) {
        regexp_record(mrb, st, self, str, str);
        return mrb_nil_value();
    }

    return mrb_regexp_match_index(mrb, self, str);
}


mrb_value
mrb_regexp_match_index(mrb_state *mrb, mrb_value re, mrb_value str)
{
    regexp_state  *st = regexp_state_get(mrb);
    mrb_int        at;

    at = regexp_search(mrb, st, mrb_regexp_check(mrb, re), str, 0, 0, 1);
    regexp_record(mrb, st, re, at < 0 ? mrb_nil_value() : str,
                  mrb_nil_value());

    return at < 0 ? mrb_nil_value() : mrb_fixnum_value(at);
}


/* re === obj: in case/when; false for what is not a String or Symbol. */
static mrb_value
regexp_eqq(mrb_state *mrb, mrb_value self)
{
    regexp_state  *st;
    mrb_value      str = mrb_get_arg1(mrb);
    mrb_int        at;

    if (mrb_symbol_p(str)) {
        str = mrb_sym_str(mrb, mrb_symbol(str));
    } else if (!mrb_string_p(str)) {
        return mrb_false_value();
    }

    st = regexp_state_get(mrb);
    at = regexp_search(mrb, st, mrb_regexp_check(mrb, self), str, 0, 0, 1);
    regexp_record(mrb, st, self, at < 0 ? mrb_nil_value() : str,
                  mrb_nil_value());

    return mrb_bool_value(at >= 0);
}


/* re.__search(str, pos, backward = false): the MatchData of the next match
 * from byte pos, without touching the globals (for the library's loops). */
static mrb_value
regexp_search_m(mrb_state *mrb, mrb_value self)
{
    mrb_value  str;
    mrb_int    pos;
    mrb_bool   backward = FALSE;

    mrb_get_args(mrb, "Si|b", &str, &pos, &backward);
    return regexp_match_at(mrb, self, str, pos, backward, 0);
}


/* ---- about the pattern ---------------------------------------------- */

static mrb_value
regexp_source(mrb_state *mrb, mrb_value self)
{
    mrb_regexp  *rx = mrb_regexp_check(mrb, self);

    return mrb_str_new(mrb, rx->src, rx->srclen);
}


static mrb_value
regexp_options(mrb_state *mrb, mrb_value self)
{
    return mrb_fixnum_value(mrb_regexp_check(mrb, self)->flags);
}


static mrb_value
regexp_casefold_p(mrb_state *mrb, mrb_value self)
{
    return mrb_bool_value(
        (mrb_regexp_check(mrb, self)->flags & MRB_REGEXP_IGNORECASE) != 0);
}


static mrb_value
regexp_eq(mrb_state *mrb, mrb_value self)
{
    mrb_value    other;
    mrb_regexp  *a, *b;

    mrb_get_args(mrb, "o", &other);
    if (!mrb_data_p(other) || DATA_TYPE(other) != &mrb_regexp_type) {
        return mrb_false_value();
    }

    a = mrb_regexp_check(mrb, self);
    b = DATA_PTR(other);

    return mrb_bool_value(a->flags == b->flags && a->srclen == b->srclen
                          && memcmp(a->src, b->src, a->srclen) == 0);
}


static mrb_value
regexp_hash_m(mrb_state *mrb, mrb_value self)
{
    mrb_regexp  *rx = mrb_regexp_check(mrb, self);

    return mrb_fixnum_value(regexp_hash(rx->src, rx->srclen, rx->flags)
                            & 0x3fffffff);
}


static int
regexp_name_i(const OnigUChar *name, const OnigUChar *end, int ngroups,
    int *groups, OnigRegex re, void *arg)
{
    void       **a = arg;
    mrb_state   *mrb = a[0];
    mrb_value    ary = *(mrb_value *) a[1];

    mrb_ary_set(mrb, ary, groups[0] - 1,
                mrb_str_new(mrb, (const char *) name, end - name));
    return 0;
}


/* re.names: the names of its named groups, in the order of the groups
 * (Oniguruma walks its name table in hash order). */
static mrb_value
regexp_names(mrb_state *mrb, mrb_value self)
{
    mrb_regexp  *rx = mrb_regexp_check(mrb, self);
    mrb_value    ary = mrb_ary_new(mrb), out = mrb_ary_new(mrb);
    void        *arg[2] = { mrb, &ary };
    mrb_int      i;

    onig_foreach_name(rx->re, regexp_name_i, arg);
    for (i = 0; i < RARRAY_LEN(ary); i++) {
        if (!mrb_nil_p(RARRAY_PTR(ary)[i])) {
            mrb_ary_push(mrb, out, RARRAY_PTR(ary)[i]);
        }
    }
    return out;
}


static int
regexp_named_i(const OnigUChar *name, const OnigUChar *end, int ngroups,
    int *groups, OnigRegex re, void *arg)
{
    void       **a = arg;
    mrb_state   *mrb = a[0];
    mrb_value    hash = *(mrb_value *) a[1];
    mrb_value    nums = mrb_ary_new_capa(mrb, ngroups);
    int          i;

    for (i = 0; i < ngroups; i++) {
        mrb_ary_push(mrb, nums, mrb_fixnum_value(groups[i]));
    }

    mrb_hash_set(mrb, hash,
                 mrb_str_new(mrb, (const char *) name, end - name), nums);
    return 0;
}


/* re.named_captures: { "name" => [group numbers] }, in group order. */
static mrb_value
regexp_named_captures(mrb_state *mrb, mrb_value self)
{
    mrb_regexp  *rx = mrb_regexp_check(mrb, self);
    mrb_value    groups = mrb_hash_new(mrb), out = mrb_hash_new(mrb), names;
    void        *arg[2] = { mrb, &groups };
    mrb_int      i;

    onig_foreach_name(rx->re, regexp_named_i, arg);

    names = regexp_names(mrb, self);
    for (i = 0; i < RARRAY_LEN(names); i++) {
        mrb_hash_set(mrb, out, RARRAY_PTR(names)[i],
                     mrb_hash_get(mrb, groups, RARRAY_PTR(names)[i]));
    }
    return out;
}


/* The group number of name in re (the last matched one of a name used
 * twice, with region), or -1. */
int
mrb_regexp_name_to_group(mrb_regexp *rx, const char *name, mrb_int len,
    OnigRegion *region)
{
    int  n = onig_name_to_backref_number(rx->re, (const OnigUChar *) name,
                                         (const OnigUChar *) name + len,
                                         region);

    return n > 0 ? n : -1;
}


static const mrb_api_method  regexp_class_methods[] = {
    { "new",              regexp_s_new,           MRB_ARGS_ARG(1, 2) },
    { "compile",          regexp_s_new,           MRB_ARGS_ARG(1, 2) },
    { "escape",           regexp_s_escape,        MRB_ARGS_REQ(1) },
    { "quote",            regexp_s_escape,        MRB_ARGS_REQ(1) },
    { "last_match",       regexp_s_last_match,    MRB_ARGS_OPT(1) },
    { "__set_last_match", regexp_s_set_last_match, MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};

static const mrb_api_method  regexp_methods[] = {
    { "match",            regexp_match,           MRB_ARGS_ARG(1, 1) },
    { "match?",           regexp_match_p,         MRB_ARGS_ARG(1, 1) },
    { "=~",               regexp_match_op,        MRB_ARGS_REQ(1) },
    { "===",              regexp_eqq,             MRB_ARGS_REQ(1) },
    { "__search",         regexp_search_m,        MRB_ARGS_ARG(2, 1) },
    { "source",           regexp_source,          MRB_ARGS_NONE() },
    { "options",          regexp_options,         MRB_ARGS_NONE() },
    { "casefold?",        regexp_casefold_p,      MRB_ARGS_NONE() },
    { "==",               regexp_eq,              MRB_ARGS_REQ(1) },
    { "eql?",             regexp_eq,              MRB_ARGS_REQ(1) },
    { "hash",             regexp_hash_m,          MRB_ARGS_NONE() },
    { "names",            regexp_names,           MRB_ARGS_NONE() },
    { "named_captures",   regexp_named_captures,  MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};

static const mrb_api_const  regexp_consts[] = {
    { "IGNORECASE",  MRB_REGEXP_IGNORECASE },
    { "EXTENDED",    MRB_REGEXP_EXTENDED },
    { "MULTILINE",   MRB_REGEXP_MULTILINE },
    { "NOENCODING",  MRB_REGEXP_NOENCODING },
    MRB_API_CONST_END
};


void
mrb_regexp_define(mrb_state *mrb)
{
    struct RClass  *c;
    regexp_state   *st;
    struct RData   *d;
    mrb_value       gc;

    mrb_api_define_class(mrb, NULL, "RegexpError", mrb->eStandardError_class,
                         NULL);

    c = mrb_api_define_class(mrb, NULL, "Regexp", NULL, regexp_methods);
    MRB_SET_INSTANCE_TT(c, MRB_TT_DATA);
    mrb_lib_get(mrb)->regexp_class = c;
    mrb_api_define_class_methods(mrb, c, regexp_class_methods);
    mrb_api_define_consts(mrb, c, regexp_consts);

    d = mrb_data_object_alloc(mrb, mrb->object_class, NULL,
                              &regexp_state_type);
    st = mrb_calloc(mrb, 1, sizeof(regexp_state));
    onig_region_init(&st->region);
    st->symidx = (mrb_sym) -1;
    d->data = st;
    st->match_param = onig_new_match_param();
    if (st->match_param == NULL) {
        mrb_exc_raise(mrb, mrb_obj_value(mrb->nomem_err));
    }
    onig_initialize_match_param(st->match_param);
    mrb_iv_set(mrb, mrb_obj_value(c), mrb_intern_lit(mrb, "__state__"),
               mrb_obj_value(d));

    onig_region_init(&st->last);
    gc = mrb_ary_new_capa(mrb, REGEXP_GC_SIZE);
    mrb_ary_set(mrb, gc, REGEXP_GC_SIZE - 1, mrb_nil_value());
    mrb_iv_set(mrb, mrb_obj_value(c), mrb_intern_lit(mrb, "__gc__"), gc);
    st->gc = mrb_ary_ptr(gc);
    mrb_lib_get(mrb)->regexp = st;
}


mrb_int
mrb_regexp_char_len(mrb_value re, const char *p, const char *end)
{
    mrb_regexp     *rx = DATA_PTR(re);
    unsigned char   c = (unsigned char) *p;
    mrb_int         n = 1;

    if (!(rx->flags & MRB_REGEXP_NOENCODING)) {
        n = (c >= 0xf0) ? 4 : (c >= 0xe0) ? 3 : (c >= 0xc0) ? 2 : 1;
    }

    return (n > end - p) ? end - p : n;
}


/* Its classes are the library's (mrb_lib_part defines them). */
const mrb_part  mrb_regexp_part = {
    "Regexp", NULL, mrb_regexp_run_end, mrb_regexp_take, mrb_regexp_put_back
};
