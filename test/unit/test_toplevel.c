/*
 * Unit tests of mrb_toplevel.c on a bare mrb_state: what a recorded
 * interpreter's restore puts back after code changed its top level, what
 * it leaves, and what take / put_back set aside for a run that waits.
 * (Through whole request runs: test_interp.c; the scan that decides which
 * runs compare the tables: test_toplevel_scan.c.)
 */

#include <string.h>

#include <mruby.h>
#include <mruby/class.h>
#include <mruby/compile.h>
#include <mruby/string.h>

#include "mrb_errbuf.h"
#include "mrb_mruby_version.h"
#include "mrb_toplevel.h"
#include "unit.h"
#include "unit_ruby.h"

typedef struct {
    mrb_state     *mrb;
    mrb_toplevel  *tl;
} tl_fixture;


/* An interpreter with a server class Srv and a startup state, recorded. */
static int
tl_open(tl_fixture *f, int always)
{
    struct RClass  *srv;

    f->mrb = mrb_open();
    if (f->mrb == NULL) {
        return -1;
    }

    srv = mrb_define_class(f->mrb, "Srv", f->mrb->object_class);
    mrb_load_string(f->mrb, "$kept = 'startup'; Kept = 1; Srv::Code = 2; "
                    "module Kernel; def kept_helper; :helper; end; end; "
                    "def Srv.rputs(s); s; end");
    if (f->mrb->exc != NULL) {
        return -1;
    }

    f->tl = mrb_toplevel_record(f->mrb, srv, always);
    return f->tl != NULL ? 0 : -1;
}


static void
tl_close(tl_fixture *f)
{
    mrb_toplevel_free(f->mrb, f->tl);
    mrb_close(f->mrb);
}


static int
tl_restore(tl_fixture *f)
{
    char  err[MRB_ERR_MSG_LEN];

    return mrb_toplevel_restore(f->mrb, f->tl, err, sizeof(err));
}


#ifndef MRB_IV_COMPACT
/* The head of mruby's iv table (mrb_toplevel.c says its layout): how
 * many of Object's constant slots hold a live or a removed name. */
struct tl_test_tbl {
    int    size;
    int    alloc;
    void  *ptr;
};

static int
tl_constant_slots_taken(mrb_state *mrb, int *alloc)
{
    const struct tl_test_tbl  *h = (const void *) mrb->object_class->iv;
    const uint32_t            *keys;
    int                        i, taken = 0;

    keys = (const uint32_t *) ((const mrb_value *) h->ptr + h->alloc);
    for (i = 0; i < h->alloc; i++) {
        taken += keys[i] != 0;
    }

    *alloc = h->alloc;
    return taken;
}


/* A crowded table of Object's constants is doubled when the state is
 * recorded (lookups probe fewer slots); its constants stay as they were,
 * the placeholders that doubled it leave nothing behind. */
TEST(toplevel_record_spreads_a_crowded_constant_table)
{
    mrb_state     *mrb = mrb_open();
    mrb_toplevel  *tl;
    char           name[32];
    int            i, alloc, before;

    REQUIRE(mrb != NULL);

    for (i = 0; tl_constant_slots_taken(mrb, &alloc) * 4 <= alloc * 3; i++) {
        snprintf(name, sizeof(name), "Crowd%d", i);
        mrb_define_const(mrb, mrb->object_class, name, mrb_fixnum_value(i));
    }
    before = alloc;
    CHECK_MRB(mrb, "$names = Object.constants; $names.size > 0", "true");

    tl = mrb_toplevel_record(mrb, mrb->object_class, 0);
    REQUIRE(tl != NULL);

    CHECK(tl_constant_slots_taken(mrb, &alloc) * 4 <= alloc * 3);
    CHECK_EQ(alloc, 2 * before);
    CHECK_MRB(mrb, "[$names.size == Object.constants.size, "
              "$names.all? { |c| Object.const_defined?(c) }, Crowd0, "
              "Object.const_defined?(:MrbConstantsSpread0)]",
              "[true, true, 0, false]");

    mrb_toplevel_free(mrb, tl);
    mrb_close(mrb);
}
#endif


TEST(toplevel_restore_removes_added_globals_and_keeps_new_values)
{
    tl_fixture  f;

    REQUIRE(tl_open(&f, 1) == 0);

    CHECK_MRB(f.mrb, "$kept = 'run'; $added = 1; @ivar = 2; nil", "nil");
    CHECK_EQ(tl_restore(&f), 0);

    /* a startup global is how scripts share on purpose */
    CHECK_MRB(f.mrb, "[$kept, global_variables.include?(:$added), "
              "instance_variables]", "[\"run\", false, []]");

    tl_close(&f);
}


TEST(toplevel_restore_puts_constants_and_methods_back)
{
    tl_fixture  f;

    REQUIRE(tl_open(&f, 1) == 0);

    CHECK_MRB(f.mrb, "Object.send(:remove_const, :Kept); Added = 3; "
              "Srv.send(:remove_const, :Code); Srv::New = 4; "
              "module Kernel; def kept_helper; :changed; end; "
              "def added_helper; end; end; "
              "def Srv.rputs(s); :replaced; end; nil", "nil");
    CHECK_EQ(tl_restore(&f), 0);

    CHECK_MRB(f.mrb, "[Kept, Object.const_defined?(:Added), Srv::Code, "
              "Srv.const_defined?(:New)]", "[1, false, 2, false]");
    CHECK_MRB(f.mrb, "[kept_helper, Kernel.method_defined?(:added_helper), "
              "Srv.rputs(:s)]", "[:helper, false, :s]");
    CHECK_EQ(mrb_toplevel_restores(f.tl), 1);

    tl_close(&f);
}


TEST(toplevel_restore_unfreezes_what_a_run_froze)
{
    tl_fixture  f;

    REQUIRE(tl_open(&f, 1) == 0);

    CHECK_MRB(f.mrb, "Srv.freeze; Object.freeze; [Srv.frozen?, "
              "Object.frozen?]", "[true, true]");
    CHECK_EQ(tl_restore(&f), 0);
    CHECK_MRB(f.mrb, "[Srv.frozen?, Object.frozen?]", "[false, false]");

    tl_close(&f);
}


/* Not recorded as always, with no run begun: only the sizes are compared,
 * and a run that changed nothing costs no restore. */
TEST(toplevel_restore_after_nothing_changed_restores_nothing)
{
    tl_fixture  f;

    REQUIRE(tl_open(&f, 0) == 0);

    CHECK_MRB(f.mrb, "$kept.size", "7");
    CHECK_EQ(tl_restore(&f), 0);
    CHECK_EQ(mrb_toplevel_restores(f.tl), 0);
    CHECK_EQ(mrb_toplevel_compares(f.tl), 0);

    /* an added global shows in the sizes alone */
    CHECK_MRB(f.mrb, "$added = 1", "1");
    CHECK_EQ(tl_restore(&f), 0);
    CHECK_EQ(mrb_toplevel_restores(f.tl), 1);
    CHECK_MRB(f.mrb, "global_variables.include?(:$added)", "false");

    tl_close(&f);
}


TEST(toplevel_take_sets_a_runs_changes_aside_and_put_back_returns_them)
{
    char        err[MRB_ERR_MSG_LEN];
    mrb_value   aside, exc;
    tl_fixture  f;

    REQUIRE(tl_open(&f, 1) == 0);

    CHECK_MRB(f.mrb, "$waiting = :mine; Waiting = 5; nil", "nil");

    REQUIRE(mrb_toplevel_take(f.mrb, f.tl, &aside, err, sizeof(err)) == 0);
    CHECK(strcmp(err, "") == 0);
    CHECK(!mrb_nil_p(aside));
    mrb_gc_register(f.mrb, aside);

    /* another run meanwhile sees the recorded state */
    CHECK_MRB(f.mrb, "[global_variables.include?(:$waiting), "
              "Object.const_defined?(:Waiting)]", "[false, false]");

    CHECK_EQ(mrb_toplevel_put_back(f.mrb, f.tl, aside, &exc), 0);
    mrb_gc_unregister(f.mrb, aside);
    CHECK_MRB(f.mrb, "[$waiting, Waiting]", "[:mine, 5]");

    /* and the run's end removes them */
    CHECK_EQ(tl_restore(&f), 0);
    CHECK_MRB(f.mrb, "Object.const_defined?(:Waiting)", "false");

    tl_close(&f);
}


TEST(toplevel_take_with_nothing_changed_sets_nothing_aside)
{
    char        err[MRB_ERR_MSG_LEN];
    mrb_value   aside, exc;
    tl_fixture  f;

    REQUIRE(tl_open(&f, 1) == 0);

    REQUIRE(mrb_toplevel_take(f.mrb, f.tl, &aside, err, sizeof(err)) == 0);
    CHECK(mrb_nil_p(aside));
    CHECK_EQ(mrb_toplevel_put_back(f.mrb, f.tl, aside, &exc), 0);

    tl_close(&f);
}
