/*
 * The top-level state a request run must leave as it found it.
 *
 * Recorded once per interpreter, when it is sealed (after the startup
 * scripts), and put back after every outermost request run:
 *
 *   - global variables and top-level instance variables a run added are
 *     removed (the values of those that existed stay as the run left them:
 *     a startup global is how scripts share on purpose);
 *   - top-level constants (Object's) and the server class's constants are
 *     as they were: added ones removed, reassigned or removed ones restored
 *     (`Nginx = 5` cannot break the next request);
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

typedef struct mrb_toplevel_s  mrb_toplevel;

/*
 * Records the state of mrb as it is now; server_class is the adapter's
 * class (Apache, Nginx).  Returns NULL when out of memory.  Freed with
 * mrb_toplevel_free before mrb_close.
 */
mrb_toplevel *mrb_toplevel_record(mrb_state *mrb, struct RClass *server_class);
void mrb_toplevel_free(mrb_state *mrb, mrb_toplevel *tl);

/*
 * Puts back what a run changed.  Cheap when the run changed nothing (a few
 * loads and compares, a memcmp per recorded table); otherwise it runs
 * protected: returns 0, or -1 with a message in err when restoring raised
 * (then the interpreter should not be reused).
 */
int mrb_toplevel_restore(mrb_state *mrb, mrb_toplevel *tl, char *err,
    size_t errlen);

/* Tells the next restore that a global was removed: sizes then lie. */
void mrb_toplevel_global_removed(mrb_toplevel *tl);

/* How many restores found something to put back (for tests). */
unsigned long mrb_toplevel_restores(const mrb_toplevel *tl);

#endif /* MRB_TOPLEVEL_H */
