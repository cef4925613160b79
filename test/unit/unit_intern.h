/*
 * Counts the lookups of one name in mruby's symbol tables: test_core is
 * linked with -Wl,--wrap for the intern functions that mruby's parser,
 * code generator and loader call (calls inside mruby's symbol.c are not
 * wrapped, so each lookup counts once).
 */

#ifndef UNIT_INTERN_H
#define UNIT_INTERN_H

#include <mruby.h>

/* Counts the lookups of name in mrb (NULL: stops counting) from now on. */
void unit_intern_watch(mrb_state *mrb, const char *name);

/* The lookups of the watched name since unit_intern_watch. */
unsigned unit_intern_count(void);

/* Those of them that did not find it and added it: in mruby 3.1 and 3.3,
 * a lookup that does not find a name has scanned every older one. */
unsigned unit_intern_misses(void);

#endif /* UNIT_INTERN_H */
