/*
 * The top-level state a request run must leave as it found it.
 *
 * Recorded once per interpreter, when it is sealed (after the startup
 * scripts), and put back after every outermost request run:
 *
 *   - global variables and top-level instance variables a run added are
 *     removed (the values of those that existed stay as the run left them:
 *     a startup global is how scripts share on purpose);
 *   - the match globals ($~, $&, $`, $', $+, $1, ...) are never recorded:
 *     what the startup scripts matched is dropped when the interpreter is
 *     sealed, so every run that sets one added it, and it is removed when
 *     the run ends (taken aside while the run waits);
 *   - top-level constants (Object's) and the server class's constants are
 *     as they were: added ones removed, reassigned or removed ones restored
 *     (`Nginx = 5` cannot break the next request); instance and class
 *     variables of those two classes (kept in the same tables) are
 *     removed when added, and keep new values as globals do;
 *   - Kernel's methods and the server class's own (singleton) methods are
 *     as they were: added ones removed, redefined or removed ones restored;
 *   - the main object, Object, Kernel and the server class are unfrozen if
 *     a run froze them.
 *
 * What is not put back (docs/architecture.md, "Isolation", lists it): the
 * contents of objects (a Hash in a startup constant is shared on purpose),
 * new values of existing globals, methods of other classes (String#upcase),
 * constants nested deeper than the server class.
 */

#ifndef MRB_TOPLEVEL_H
#define MRB_TOPLEVEL_H

#include <mruby.h>
#include <mruby/irep.h>
#include <mruby/proc.h>

#include "mrb_irep_flags.h"

typedef struct mrb_toplevel_s  mrb_toplevel;

/*
 * Records the state of mrb as it is now; server_class is the adapter's
 * class (Apache, Nginx); always: compare the tables after every run (a
 * startup script left code that may change them).  Returns NULL when out
 * of memory.  Freed with mrb_toplevel_free before mrb_close.
 */
mrb_toplevel *mrb_toplevel_record(mrb_state *mrb, struct RClass *server_class,
    int always);
void mrb_toplevel_free(mrb_state *mrb, mrb_toplevel *tl);

/*
 * After an outermost run: puts back what the runs changed.  Cheap when
 * they changed nothing (a few loads and compares; a memcmp per recorded
 * table when a run could have changed one); otherwise it runs
 * protected: returns 0, or -1 with a message in err when restoring raised
 * (then the interpreter should not be reused).
 */
int mrb_toplevel_restore(mrb_state *mrb, mrb_toplevel *tl, char *err,
    size_t errlen);

/*
 * Which runs restore (mrb_toplevel_scan.c).  Sizes and frozen flags are
 * compared after every run; the values of the constant and method tables
 * only after runs whose bytecode could change them (or could have left
 * code that does: then after every later run of the interpreter too).
 */
#define MRB_TOPLEVEL_CHANGES  1   /* the run could change the tables */
#define MRB_TOPLEVEL_LEAVES   2   /* ... or leave code that changes them */

typedef struct mrb_toplevel_names_s  mrb_toplevel_names;

/* The method names the scan looks for in mrb; startup: without those
 * that only shape a class at startup (attr_reader, include, ...). */
mrb_toplevel_names *mrb_toplevel_names_new(mrb_state *mrb, int startup);
void mrb_toplevel_names_free(mrb_toplevel_names *names);

/* What proc's bytecode could do: MRB_TOPLEVEL_* bits, kept in its ireps'
 * flags after the first scan. */
int mrb_toplevel_scan(const mrb_toplevel_names *names,
    const struct RProc *proc);

/* Whether the methods or blocks a startup script leaves could change the
 * tables when a request calls them (then every run restores). */
int mrb_toplevel_startup_leaves(mrb_state *mrb, const struct RProc *proc);

/* The scan keeps its answer in bits of mrb_irep.flags: MRB_TOPLEVEL_IREP_*
 * (mrb_irep_flags.h). */

/* Whether proc is known to change nothing: a run's first test, inline. */
static inline int
mrb_toplevel_quiet(const struct RProc *proc)
{
    return MRB_PROC_CFUNC_P(proc)
           || (proc->body.irep->flags
               & (MRB_TOPLEVEL_IREP_SCANNED | MRB_TOPLEVEL_IREP_CHANGES))
              == MRB_TOPLEVEL_IREP_SCANNED;
}

/*
 * Around every run (nested ones too) that is not quiet: begin returns
 * what the run's bytecode could do, to be given to end when the run ends.
 */
int mrb_toplevel_run_begin(mrb_toplevel *tl, const struct RProc *proc);
void mrb_toplevel_run_end(mrb_toplevel *tl, int what);

/*
 * A run that waits (mrb_wait.c): while it is suspended and another run
 * starts, what it changed is taken aside and the tables put back as
 * recorded, so that the other runs neither see nor remove it; before it
 * resumes, it is put back.
 *
 * mrb_toplevel_take, where nothing may raise: costs what a run's end check
 * does when nothing changed (*aside nil).  Otherwise *aside is an Array of
 * what the run changed (added globals, top-level instance variables and
 * constants with their values, reassigned or removed constants, methods
 * and frozen flags), which the caller keeps reachable for the GC, and the
 * tables are as recorded; returns 0.  Returns -1 when the Array could not
 * be made (out of memory): *aside is the exception, and the tables are
 * put back all the same (what the run set is lost).  err says what failed
 * (also after a 0, when putting the tables back failed: the next restore
 * tries again); it is "" when nothing did.
 */
int mrb_toplevel_take(mrb_state *mrb, mrb_toplevel *tl, mrb_value *aside,
    char *err, size_t errlen);

/* Sets what mrb_toplevel_take took again (nil: nothing); returns 0, or -1
 * with the exception in *exc when that raised (out of memory: part of it
 * may be set, and the run's end removes it). */
int mrb_toplevel_put_back(mrb_state *mrb, mrb_toplevel *tl, mrb_value aside,
    mrb_value *exc);

/* Tells the next restore that a global was removed: sizes then lie. */
void mrb_toplevel_global_removed(mrb_toplevel *tl);

/* How many restores found something to put back (for tests). */
unsigned long mrb_toplevel_restores(const mrb_toplevel *tl);

/* How many restores compared the values of the tables (for tests). */
unsigned long mrb_toplevel_compares(const mrb_toplevel *tl);

#endif /* MRB_TOPLEVEL_H */
