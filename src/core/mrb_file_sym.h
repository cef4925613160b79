/*
 * An interpreter's symbols for script file names, each found or added in
 * O(1) whatever the size of its symbol table (see mrb_file_sym.c).
 */

#ifndef MRB_FILE_SYM_H
#define MRB_FILE_SYM_H

#include <mruby.h>

typedef struct mrb_file_syms_s  mrb_file_syms;

/*
 * The index of one state's symbol table, empty; NULL when out of memory.
 * Its state's owner frees it with mrb_file_syms_free.  With linked, a
 * name it adds is linked into mruby's buckets, for mruby's own lookups to
 * find (the compiler's: its parser looks the file name up); without, it
 * is not (an interpreter's: it names its files in debug records only),
 * so that mruby's lookups of other names never walk past file names
 * (mrb_file_sym.c).
 */
mrb_file_syms *mrb_file_syms_new(int linked);
void mrb_file_syms_free(mrb_file_syms *fs);

/* mrb's symbol for name, interned if new, as mrb_intern_cstr would give
 * it; fs is mrb's own.  May raise (out of memory). */
mrb_sym mrb_file_sym(mrb_state *mrb, mrb_file_syms *fs, const char *name);

/* The same outside any run (where a raise would abort): fs may be NULL
 * (then mruby's own lookup).  Returns 0 with *sym, or -1 out of memory. */
int mrb_file_sym_protected(mrb_state *mrb, mrb_file_syms *fs,
    const char *name, mrb_sym *sym);

#endif /* MRB_FILE_SYM_H */
