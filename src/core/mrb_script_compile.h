/*
 * Compiling a script to bytecode, apart from the interpreters that run it
 * (mrb_script_compile.c says why).
 */

#ifndef MRB_SCRIPT_COMPILE_H
#define MRB_SCRIPT_COMPILE_H

#include <stddef.h>
#include <stdint.h>

#include <mruby.h>

/*
 * Parses and generates code in mrb: the proc, with the run's time checks
 * in its loops and blocks (mrb_irep_check.h), or NULL with
 * "name:line: message" in err.  line: the first line of src (inline code),
 * 0 or 1 for a file.
 */
struct RProc *mrb_script_parse(mrb_state *mrb, const char *src, size_t len,
    const char *name, int line, char *err, size_t errlen);

/*
 * Compiles src in the process's compiler (mrb_script_compiler_close in
 * mrb_script.h frees it; the next compile opens another).  The bytecode names its file
 * by a placeholder: after loading it, name the file with
 * mrb_script_file_set.  *bin is malloc'd, the caller frees it.  Any
 * thread.  Returns 0, or -1 with err.
 */
int mrb_script_compile(const char *src, size_t len, const char *name,
    int line, uint8_t **bin, size_t *bin_len, char *err, size_t errlen);

/* The process's compiler, opened if needed (NULL if it cannot be): for
 * the unit tests, which give it a failing allocator. */
mrb_state *mrb_script_compiler_get(void);

/* The symbol in mrb that the ireps of proc name their file by, or 0. */
mrb_sym mrb_script_file_get(const struct RProc *proc);

/*
 * Names the file of proc, loaded from the bytecode of
 * mrb_script_compile, file in all its ireps (backtraces, caller).
 */
void mrb_script_file_set(struct RProc *proc, mrb_sym file);

#endif /* MRB_SCRIPT_COMPILE_H */
