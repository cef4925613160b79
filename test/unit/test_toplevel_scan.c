/*
 * Unit tests of the scan that decides which runs compare the top-level
 * tables (mrb_toplevel_scan.c): what it answers for a script's code.
 * test_lib_toplevel_scan.c lists the library methods it flags.
 */

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mruby.h>
#include <mruby/class.h>
#include <mruby/compile.h>
#include <mruby/proc.h>
#include "mrb_interp.h"
#include "mrb_interp_core.h"
#include "mrb_toplevel.h"
#include "unit.h"


static int
scan_write(mrb_run_rec *run, const char *data, size_t len)
{
    return 0;
}


static void
scan_logger(void *target, mrb_run_rec *run, int level, const char *msg,
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
