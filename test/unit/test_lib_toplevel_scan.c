/*
 * The library methods the top-level scan (mrb_toplevel_scan.c) flags.  A
 * request may call any method the library (mruby's gems, src/lib,
 * mrblib/) defines in Ruby; the scan knows only by name the few of them
 * that change constants or methods for their caller.  This test lists
 * every library method whose code the scan would flag, so that a new one
 * is read before it ships.
 */

#define _GNU_SOURCE   /* qsort_r */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mruby.h>
#include <mruby/class.h>
#include <mruby/gc.h>
#include <mruby/proc.h>
#include "lib_eval.h"
#include "mrb_interp.h"
#include "mrb_mruby_version.h"
#include "mrb_toplevel.h"
#include "unit.h"


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

    p = (struct RProc *) MRB_METHOD_PROC(m);    /* const in mruby 4.0 */
    if (p != NULL) {
        p = (struct RProc *) MRB_PROC_UNALIAS(p);
    }
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
 * Enumerator's, Proc#curry, catch, Mutex#try_lock_loop's instance_eval
 * of its block: a run naming a method of the list gives it such a name,
 * and is flagged for that), or name a method of
 * the list on an object of their own (Data's members and send(member),
 * Userdata's to_sym of the key it was called by, Module#include,
 * attr_accessor, prepend: mrblib's own definitions of those methods; Set's
 * freeze, of its own Hash and itself: the caller named freeze).
 * mruby 3.3 names its Enumerator helpers otherwise, writes Kernel#extend
 * in Ruby (extend_object on the modules its caller gave, as include),
 * and has Enumerator#initialize_copy (instance_eval on the copied
 * Enumerator) and to_enum (a name its caller gave).  mruby 4.0 compiles
 * its own Ruby into the library with no symbol table (the scan reads no
 * names there: attr_accessor, prepend, product, extend and the Enumerator
 * helper are not read), has its own Set (the library's, whose freeze was
 * read, is not loaded), and adds TCPServer#accept (instance_eval and
 * __send__ of initialize on the socket it makes) and Enumerator::Chain#
 * initialize (freeze of its own list).
 * A new entry here is a library method to read before it ships.
 */
static const char  *scan_known[] = {
    "[]", "[]=", "build_env", "capitalize", "catch",
    "curry", "def_delegator", "def_delegators", "define", "delegate",
    "delegate_method", "do_not_reverse_lookup=", "downcase", "each",
    "each_pair", "include", "inject", "inspect",
    "members", "method_missing", "new",
    "reduce", "select", "to_h", "to_proc", "to_s", "try_lock_loop",
    "upcase",
#if MRUBY_RELEASE_NO == 30100
    "attr_accessor", "freeze", "prepend", "product",
    "enumerator_block_call", "new_with_prelude", "singleton_method",
#elif MRUBY_RELEASE_NO == 30300
    "attr_accessor", "freeze", "prepend", "product",
    "__enumerator_block_call", "_new_with_prelude", "enum_for", "extend",
    "initialize_copy", "to_enum",
#else
    "__enumerator_block_call", "accept", "enum_for", "initialize",
    "initialize_copy", "to_enum",
#endif
    NULL
};


static int
scan_name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *) a, *(const char *const *) b);
}


TEST(toplevel_scan_library_definers_are_known)
{
    mrb_interp  *interp = lib_interp();
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
    qsort(scan_known, (size_t) n, sizeof(scan_known[0]), scan_name_cmp);

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
