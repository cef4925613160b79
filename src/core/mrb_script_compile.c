/*
 * Compiling a script to bytecode.
 *
 * mruby 3.1 interns names in a table of 256 buckets whose entries link to
 * the previous one of their bucket by an 8-bit offset; past 254 entries the
 * link gives up and a lookup scans every older entry.  Each script adds its
 * file name to the table of every state that compiles or loads it (the
 * parser's file name, each irep's debug record), so in an interpreter that
 * has run N scripts a lookup of a name that is neither built in nor inline
 * (at most 5 letters or digits) scans up to N entries: with 10,000 scripts,
 * the three lookups of the file name in the recompile and load of an edited
 * script were 90% of that request's time, 4-9 ms of it at 100,000.  So:
 *
 * - a file is compiled in the process's compiler, a state of its own that
 *   is opened again once it has interned COMPILER_NAMES names, not in the
 *   interpreter that runs it;
 * - the bytecode names its file by FILE_PLACEHOLDER, an inline symbol that
 *   no table holds, so a load looks up no file name; the loaded ireps are
 *   then given the interpreter's symbol for the file (interned at its first
 *   load there, then taken over from the version it replaces).
 *
 * A compile and a load of an edited script then cost the same whatever the
 * number of scripts.  (Names a script uses that are neither built in nor
 * inline are still looked up in the interpreter's table when it loads.)
 */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mruby.h>
#include <mruby/compile.h>
#include <mruby/irep.h>
#include <mruby/debug.h>
#include <mruby/dump.h>
#include <mruby/proc.h>

#include "mrb_mruby_version.h"
#include "mrb_script.h"
#include "mrb_script_compile.h"

#define COMPILER_NAMES    1024
#define FILE_PLACEHOLDER  "f"

static mrb_state       *compiler;
static mrb_sym          compiler_opened_at;     /* its symidx when opened */
static pthread_mutex_t  compiler_lock = PTHREAD_MUTEX_INITIALIZER;


/*
 * The context lives on the stack: under `never` this runs on every request,
 * and mrbc_context_new() and mrbc_filename() would allocate it and a copy
 * of the name each time.  The parser interns the name; what it allocates in
 * the context (the names of the top level's local variables)
 * mrbc_cleanup_local_variables() frees.
 */
struct RProc *
mrb_script_parse(mrb_state *mrb, const char *src, size_t len,
    const char *name, int line, char *err, size_t errlen)
{
    mrbc_context              cxt = { 0 };
    struct mrb_parser_state  *p;
    struct RProc             *proc = NULL;

    cxt.capture_errors = TRUE;
    cxt.no_exec = TRUE;
    cxt.filename = (char *) name;
    if (line > 1) {
        cxt.lineno = (uint16_t) line;
    }

    p = mrb_parse_nstring(mrb, src, len, &cxt);

    if (p == NULL) {
        snprintf(err, errlen, "%s: out of memory compiling", name);
    } else if (p->nerr > 0) {
        snprintf(err, errlen, "%s:%d: %s", name,
                 (int) p->error_buffer[0].lineno,
                 p->error_buffer[0].message ? p->error_buffer[0].message
                                            : "syntax error");
    } else {
        proc = mrb_generate_code(mrb, p);
        if (proc == NULL) {
            snprintf(err, errlen, "%s: code generation failed", name);
        }
    }

    if (p != NULL) {
        mrb_parser_free(p);
    }
    mrbc_cleanup_local_variables(mrb, &cxt);
    mrb->exc = NULL;
    return proc;
}


static void
irep_file_set(const mrb_irep *irep, mrb_sym file)
{
    mrb_irep_debug_info  *debug = irep->debug_info;
    uint16_t              i;

    if (debug != NULL) {
        for (i = 0; i < debug->flen; i++) {
            debug->files[i]->filename_sym = file;
        }
    }

    for (i = 0; i < irep->rlen; i++) {
        irep_file_set(irep->reps[i], file);
    }
}


void
mrb_script_file_set(struct RProc *proc, mrb_sym file)
{
    irep_file_set(proc->body.irep, file);
}


mrb_sym
mrb_script_file_get(const struct RProc *proc)
{
    const mrb_irep_debug_info  *debug = proc->body.irep->debug_info;

    if (debug == NULL || debug->flen == 0) {
        return 0;
    }

    return debug->files[0]->filename_sym;
}


/* Under compiler_lock: the compiler, opened if needed. */
static mrb_state *
compiler_get_locked(void)
{
    if (compiler == NULL) {
        compiler = mrb_open_core(mrb_default_allocf, NULL);
        if (compiler != NULL) {
            compiler_opened_at = compiler->symidx;
        }
    }

    return compiler;
}


static int
compile_locked(mrb_state *mrb, const char *src, size_t len, const char *name,
    int line, uint8_t **bin, size_t *bin_len, char *err, size_t errlen)
{
    struct RProc  *proc;
    uint8_t       *dump;
    size_t         dump_len;
    int            ai = mrb_gc_arena_save(mrb);
    int            rc = -1;

    proc = mrb_script_parse(mrb, src, len, name, line, err, errlen);
    if (proc == NULL) {
        goto done;
    }

    irep_file_set(proc->body.irep, mrb_intern_lit(mrb, FILE_PLACEHOLDER));

    if (mrb_dump_irep(mrb, proc->body.irep, MRB_DUMP_DEBUG_INFO, &dump,
                      &dump_len) != MRB_DUMP_OK)
    {
        snprintf(err, errlen, "%s: cannot dump the bytecode", name);
        goto done;
    }

    /* Bytecode outlives the state that made it: copy it out. */
    *bin = malloc(dump_len);
    if (*bin == NULL) {
        snprintf(err, errlen, "%s: out of memory keeping the bytecode", name);
    } else {
        memcpy(*bin, dump, dump_len);
        *bin_len = dump_len;
        rc = 0;
    }

    mrb_free(mrb, dump);

done:
    mrb_gc_arena_restore(mrb, ai);
    return rc;
}


int
mrb_script_compile(const char *src, size_t len, const char *name, int line,
    uint8_t **bin, size_t *bin_len, char *err, size_t errlen)
{
    mrb_state  *mrb;
    int         rc = -1;

    pthread_mutex_lock(&compiler_lock);

    mrb = compiler_get_locked();
    if (mrb == NULL) {
        snprintf(err, errlen, "%s: cannot create the mruby compiler", name);
    } else {
        rc = compile_locked(mrb, src, len, name, line, bin, bin_len, err,
                            errlen);

        if (mrb->symidx - compiler_opened_at > COMPILER_NAMES) {
            mrb_close(mrb);
            compiler = NULL;
        }
    }

    pthread_mutex_unlock(&compiler_lock);
    return rc;
}


/*
 * Apache unloads and reloads its modules on every restart: a compiler kept
 * across configurations would be lost with the module's statics.
 */
void
mrb_script_compiler_close(void)
{
    pthread_mutex_lock(&compiler_lock);

    if (compiler != NULL) {
        mrb_close(compiler);
        compiler = NULL;
    }

    pthread_mutex_unlock(&compiler_lock);
}
