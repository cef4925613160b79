/*
 * The bits of mrb_irep.flags in which the core keeps what it found in a
 * script's bytecode, so that each irep is scanned once, not on every run:
 * the top-level scan's (mrb_toplevel_scan.c) and the wait scan's
 * (mrb_wait.c).  mruby 3.1.0 uses two bits of the byte (MRB_IREP_STATIC),
 * 4.0.0 a third (MRB_IREP_CONSOLIDATED), and none dumps the flags.  Every
 * bit is listed here, and the build fails if one overlaps another or
 * mruby's.
 */

#ifndef MRB_IREP_FLAGS_H
#define MRB_IREP_FLAGS_H

#include <mruby.h>
#include <mruby/irep.h>

#include "mrb_mruby_version.h"

/* mruby's own */
#ifdef MRB_IREP_CONSOLIDATED
#define MRB_IREP_MRUBY_FLAGS  (MRB_IREP_STATIC | MRB_IREP_CONSOLIDATED)
#else
#define MRB_IREP_MRUBY_FLAGS  MRB_IREP_STATIC
#endif

/* the top-level scan: what the code could leave, was scanned, changes */
#define MRB_TOPLEVEL_IREP_LEAVES   0x08
#define MRB_TOPLEVEL_IREP_SCANNED  0x10
#define MRB_TOPLEVEL_IREP_CHANGES  0x20

/* the wait scan: was scanned, names something that waits */
#define MRB_WAIT_IREP_SCANNED      0x40
#define MRB_WAIT_IREP_NAMES        0x80

/* disjoint bits: their sum has no carry, so it is their union */
#define MRB_IREP_FLAGS_SUM                                                  \
    (MRB_IREP_MRUBY_FLAGS + MRB_TOPLEVEL_IREP_LEAVES                        \
     + MRB_TOPLEVEL_IREP_SCANNED + MRB_TOPLEVEL_IREP_CHANGES                \
     + MRB_WAIT_IREP_SCANNED + MRB_WAIT_IREP_NAMES)
#define MRB_IREP_FLAGS_UNION                                                \
    (MRB_IREP_MRUBY_FLAGS | MRB_TOPLEVEL_IREP_LEAVES                        \
     | MRB_TOPLEVEL_IREP_SCANNED | MRB_TOPLEVEL_IREP_CHANGES                \
     | MRB_WAIT_IREP_SCANNED | MRB_WAIT_IREP_NAMES)

_Static_assert(MRB_IREP_FLAGS_SUM == MRB_IREP_FLAGS_UNION,
               "two users of mrb_irep.flags share a bit");
_Static_assert(MRB_IREP_FLAGS_UNION
               <= (1 << (8 * sizeof(((mrb_irep *) 0)->flags))) - 1,
               "an irep flag does not fit mrb_irep.flags");

#endif /* MRB_IREP_FLAGS_H */
