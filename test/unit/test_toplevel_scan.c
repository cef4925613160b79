/*
 * Unit tests of the scan that decides which runs compare the top-level
 * tables (mrb_toplevel_scan.c).  A request may call any method the library
 * (mruby's gems, src/lib, mrblib/) defines in Ruby; the scan knows only by
 * name the few of them that change constants or methods for their
 * caller.  This test lists every library method whose code the scan would
 * flag, so that a new one is read before it ships.
 */

#define _GNU_SOURCE   /* qsort_r */

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mruby.h>
#include <mruby/class.h>
#include <mruby/compile.h>
#include <mruby/gc.h>
#include <mruby/proc.h>
#include "mrb_interp.h"
#include "mrb_interp_core.h"
#include "mrb_toplevel.h"
#include "unit.h"


static int
scan_write(mrb_run *run, const char *data, size_t len)
{
    return 0;
}


static void
scan_logger(void *target, mrb_run *run, int level, const char *msg,
    size_t len)
{
}


static void
scan_define(mrb_state *mrb, struct RClass *server_class)
{
}


static const mrb_server  scan_server = {
    "Test", "Apache", "mod_mruby", "test", 0, scan_define, scan_write,
    scan_logger
};

#define SCAN_FOUND_MAX  256

typedef struct {
    mrb_toplevel_names  *names;
    mrb_sym              found[SCAN_FOUND_MAX];
    int                  nfound;
} scan_walk;


static int
scan_method(mrb_state *mrb, mrb_sym sym, mrb_method_t m, void *arg)
{
    scan_walk     *w = arg;
    struct RProc  *p;
    int            i;

    if (MRB_METHOD_FUNC_P(m)) {
        return 0;
    }

    p = MRB_METHOD_PROC(m);
    if (p == NULL || MRB_PROC_CFUNC_P(p)
        || !(mrb_toplevel_scan(w->names, p) & MRB_TOPLEVEL_CHANGES))
    {
        return 0;
    }

    for (i = 0; i < w->nfound; i++) {
        if (w->found[i] == sym) {
            return 0;
        }
    }

    if (w->nfound < SCAN_FOUND_MAX) {
        w->found[w->nfound++] = sym;
    }

    return 0;
}


static int
scan_object(mrb_state *mrb, struct RBasic *obj, void *arg)
{
    if (obj->tt == MRB_TT_CLASS || obj->tt == MRB_TT_MODULE
        || obj->tt == MRB_TT_SCLASS)
    {
        mrb_mt_foreach(mrb, (struct RClass *) obj, scan_method, arg);
    }

    return MRB_EACH_OBJ_OK;
}


static int
scan_sym_cmp(const void *a, const void *b, void *mrb)
{
    return strcmp(mrb_sym_name(mrb, *(const mrb_sym *) a),
                  mrb_sym_name(mrb, *(const mrb_sym *) b));
}


/*
 * The library methods the scan flags today, read one by one.  Only
 * Forwardable's choose, from their arguments, a method to define on their
 * receiver: they are in the scan's list of names, so a run that calls
 * them compares the tables.  The others change nothing for their caller:
 * they send a name or run a block their caller gave (Enumerable's,
 * Enumerator's, Proc#curry, catch: a run naming a method of the list
 * gives it such a name, and is flagged for that), or name a method of
 * the list on an object of their own (Data's members and send(member),
 * Userdata's to_sym of the key it was called by, Module#include,
 * attr_accessor, prepend: mrblib's own definitions of those methods; Set's
 * freeze, of its own Hash and itself: the caller named freeze).
 * A new entry here is a library method to read before it ships.
 */
static const char  *const  scan_known[] = {
    "[]", "[]=", "attr_accessor", "build_env", "capitalize", "catch",
    "curry", "def_delegator", "def_delegators", "define", "delegate",
    "delegate_method", "do_not_reverse_lookup=", "downcase", "each",
    "each_pair", "enumerator_block_call", "freeze", "include", "inject",
    "inspect",
    "members", "method_missing", "new", "new_with_prelude", "prepend",
    "product", "reduce", "select", "singleton_method", "to_h", "to_proc",
    "to_s", "upcase", NULL
};


TEST(toplevel_scan_library_definers_are_known)
{
    char         err[256];
    mrb_interp  *interp = mrb_interp_open(&scan_server, NULL, err,
                                          sizeof(err));
    mrb_state   *mrb;
    scan_walk   *w;
    int          i, n;

    REQUIRE(interp != NULL);
    mrb = mrb_interp_state(interp);
    w = calloc(1, sizeof(scan_walk));
    REQUIRE(w != NULL);
    w->names = mrb_toplevel_names_new(mrb, 0);
    REQUIRE(w->names != NULL);

    mrb_objspace_each_objects(mrb, scan_object, w);
    qsort_r(w->found, (size_t) w->nfound, sizeof(mrb_sym), scan_sym_cmp,
            mrb);

    for (n = 0; scan_known[n] != NULL; n++) {
        /* count */
    }

    for (i = 0; i < w->nfound && i < n; i++) {
        if (strcmp(mrb_sym_name(mrb, w->found[i]), scan_known[i]) != 0) {
            break;
        }
    }

    if (i != n || w->nfound != n) {
        fprintf(stderr, "  flagged library methods now:");
        for (i = 0; i < w->nfound; i++) {
            fprintf(stderr, " %s", mrb_sym_name(mrb, w->found[i]));
        }
        fprintf(stderr, "\n");
        CHECK(0);
    }

    mrb_toplevel_names_free(w->names);
    free(w);
    mrb_interp_close(interp);
}


/* What the scan answers for a few scripts, compiled, not run. */
TEST(toplevel_scan_answers)
{
    static const struct {
        const char  *code;
        int          what;
    } cases[] = {
        { "Apache.rputs 'hello'", 0 },
        { "x = [1, 2].map { |v| v * 2 }; $g = x; @a = 1", 0 },
        { "A = 1", MRB_TOPLEVEL_CHANGES },
        { "Apache::HTTP_OK = 1", MRB_TOPLEVEL_CHANGES },
        { "class Foo; end", MRB_TOPLEVEL_CHANGES },
        { "def foo; 1; end", MRB_TOPLEVEL_CHANGES },
        { "x = :\"a#{1}\"", MRB_TOPLEVEL_CHANGES },
        { "Object.freeze", MRB_TOPLEVEL_CHANGES },
        { "class Foo; def bar; end; end",
          MRB_TOPLEVEL_CHANGES | MRB_TOPLEVEL_LEAVES },
        { "[1].each { A = 1 }", MRB_TOPLEVEL_CHANGES | MRB_TOPLEVEL_LEAVES },
        { "alias cs puts", MRB_TOPLEVEL_CHANGES | MRB_TOPLEVEL_LEAVES },
        { "Object.const_set(:A, 1)",
          MRB_TOPLEVEL_CHANGES | MRB_TOPLEVEL_LEAVES },
        /* a name mruby 3.1 packs into the symbol (222306624) */
        { "load 'x'", MRB_TOPLEVEL_CHANGES | MRB_TOPLEVEL_LEAVES },
    };
    char                 err[256];
    mrb_interp          *interp = mrb_interp_open(&scan_server, NULL, err,
                                                  sizeof(err));
    mrb_state           *mrb;
    mrb_toplevel_names  *names;
    mrbc_context        *cxt;
    mrb_value            proc;
    size_t               i;
    int                  what;

    struct mallinfo2     before, after;

    REQUIRE(interp != NULL);
    mrb = mrb_interp_state(interp);

    /* a bit per symbol up to the largest took 27 MB ("load") */
    before = mallinfo2();
    names = mrb_toplevel_names_new(mrb, 0);
    after = mallinfo2();
    REQUIRE(names != NULL);
    CHECK(after.uordblks + after.hblkhd
          < before.uordblks + before.hblkhd + 16384);

    cxt = mrbc_context_new(mrb);
    cxt->no_exec = TRUE;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        proc = mrb_load_string_cxt(mrb, cases[i].code, cxt);
        REQUIRE(mrb_proc_p(proc));
        what = mrb_toplevel_scan(names, mrb_proc_ptr(proc));
        if (what != cases[i].what) {
            fprintf(stderr, "  %s: %d, not %d\n", cases[i].code, what,
                    cases[i].what);
            CHECK(0);
        }
        /* the second answer comes from the irep's flags */
        CHECK_EQ(mrb_toplevel_scan(names, mrb_proc_ptr(proc)), what);
    }

    mrbc_context_free(mrb, cxt);
    mrb_toplevel_names_free(names);
    mrb_interp_close(interp);
}
