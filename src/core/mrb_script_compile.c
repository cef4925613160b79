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
 * the five lookups of the file name in the recompile and load of an edited
 * script were 90% of that request's CPU (perf on the nginx worker,
 * 2026-11-24; bench/watch_scale.py makes the scripts).  So:
 *
 * - a file is compiled in the process's compiler, a state of its own that
 *   is opened again once it has interned COMPILER_NAMES names since its
 *   first compile, not in the interpreter that runs it;
 * - the bytecode names its file by FILE_PLACEHOLDER, an inline symbol that
 *   no table holds, so a load looks up no file name; the loaded ireps are
 *   then given the interpreter's symbol for the file (interned at its first
 *   load there, then taken over from the version it replaces).
 *
 * The compiler's table still grows by a file name a compile, up to
 * COMPILER_NAMES names: the name is added through an index of that table
 * (mrb_file_sym.c) before the parser looks it up, and the parser then
 * finds it first in its bucket, where mruby's own lookup of a new name
 * would scan the whole table (two scans a compile: 22% of the
 * instructions of a script's first run, callgrind, 5,000 scripts).
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
#include <mruby/error.h>
#include <mruby/proc.h>

#include "mrb_file_sym.h"
#include "mrb_irep_check.h"
#include "mrb_irep_dstr.h"
#include "mrb_mruby_version.h"
#include "mrb_script.h"
#include "mrb_script_compile.h"

#define COMPILER_NAMES    1024
#define FILE_PLACEHOLDER  "f"

static mrb_state       *compiler;
static mrb_file_syms   *compiler_syms;          /* its index, or NULL */
static mrb_sym          compiler_names_from;    /* symidx after its first
                                                 * compile, or 0 */
static pthread_mutex_t  compiler_lock = PTHREAD_MUTEX_INITIALIZER;


typedef struct {
    const char               *src;
    size_t                    len;
    mrbc_context             *cxt;
    struct mrb_parser_state  *p;
    struct RProc             *proc;
} parse_job;


static mrb_value
parse_body(mrb_state *mrb, void *arg)
{
    parse_job  *job = arg;

    job->p = mrb_parse_nstring(mrb, job->src, job->len, job->cxt);
    if (job->p != NULL && job->p->nerr == 0) {
        job->proc = mrb_generate_code(mrb, job->p);
        if (job->proc != NULL) {
            mrb_irep_dstr_fuse(mrb, (mrb_irep *) job->proc->body.irep);
            mrb_irep_check_insert(mrb, (mrb_irep *) job->proc->body.irep);
        }
    }

    return mrb_nil_value();
}


/*
 * The context lives on the stack: under `never` this runs on every request,
 * and mrbc_context_new() and mrbc_filename() would allocate it and a copy
 * of the name each time.  The parser interns the name; what it allocates in
 * the context (the names of the top level's local variables)
 * mrbc_cleanup_local_variables() frees.  Out of memory raises in the code
 * generator (the parser catches its own): caught here, as the compiler has
 * no frame of its own to catch it and mruby would abort().
 */
struct RProc *
mrb_script_parse(mrb_state *mrb, const char *src, size_t len,
    const char *name, int line, char *err, size_t errlen)
{
    mrbc_context  cxt = { 0 };
    parse_job     job = { src, len, &cxt, NULL, NULL };
    mrb_bool      failed = FALSE;

    cxt.capture_errors = TRUE;
    cxt.no_exec = TRUE;
    cxt.filename = (char *) name;
    if (line > 1) {
        cxt.lineno = (uint16_t) line;
    }

    mrb_protect_error(mrb, parse_body, &job, &failed);

    if (failed || job.p == NULL) {
        job.proc = NULL;
        snprintf(err, errlen, "%s: out of memory compiling", name);
    } else if (job.p->nerr > 0) {
        snprintf(err, errlen, "%s:%d: %s", name,
                 (int) job.p->error_buffer[0].lineno,
                 job.p->error_buffer[0].message
                 ? job.p->error_buffer[0].message : "syntax error");
    } else if (job.proc == NULL) {
        snprintf(err, errlen, "%s: code generation failed", name);
    }

    if (job.p != NULL) {
        mrb_parser_free(job.p);
    }
    MRB_CCONTEXT_CLEANUP_LOCALS(mrb, &cxt);
    mrb->exc = NULL;
    return job.proc;
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


/*
 * Under compiler_lock: the compiler, opened if needed, or again once names
 * interned since its first compile passed COMPILER_NAMES.  Counted from
 * the first compile, not from the opening: a script of more names than
 * that would otherwise reopen it at each of its compiles.
 */
static mrb_state *
compiler_get_locked(void)
{
    if (compiler != NULL && compiler_names_from != 0
        && compiler->symidx - compiler_names_from > COMPILER_NAMES)
    {
        mrb_close(compiler);
        mrb_file_syms_free(compiler_syms);
        compiler = NULL;
        compiler_syms = NULL;
    }

    if (compiler == NULL) {
        compiler = MRB_OPEN_CORE();
        compiler_syms = compiler != NULL ? mrb_file_syms_new(1) : NULL;
        compiler_names_from = 0;
    }

    return compiler;
}


typedef struct {
    struct RProc  *proc;
    uint8_t       *dump;
    size_t         dump_len;
    int            rc;
} dump_job;


static mrb_value
dump_body(mrb_state *mrb, void *arg)
{
    dump_job  *job = arg;

    irep_file_set(job->proc->body.irep,
                  mrb_intern_lit(mrb, FILE_PLACEHOLDER));
    job->rc = mrb_dump_irep(mrb, job->proc->body.irep, MRB_DUMP_DEBUG_INFO,
                            &job->dump, &job->dump_len);

    return mrb_nil_value();
}


/* Returns 0, or -1 with err. */
static int
compile_locked(mrb_state *mrb, const char *src, size_t len, const char *name,
    int line, uint8_t **bin, size_t *bin_len, char *err, size_t errlen)
{
    dump_job   job = { NULL, NULL, 0, MRB_DUMP_GENERAL_FAILURE };
    mrb_bool   failed = FALSE;
    mrb_sym    file;
    int        ai = mrb_gc_arena_save(mrb);
    int        rc = -1;

    if (mrb_file_sym_protected(mrb, compiler_syms, name, &file) != 0) {
        snprintf(err, errlen, "%s: out of memory compiling", name);
        goto done;
    }

    job.proc = mrb_script_parse(mrb, src, len, name, line, err, errlen);
    if (job.proc == NULL) {
        goto done;
    }

    mrb_protect_error(mrb, dump_body, &job, &failed);
    mrb->exc = NULL;

    if (failed) {
        snprintf(err, errlen, "%s: out of memory compiling", name);
        goto done;
    }

    if (job.rc != MRB_DUMP_OK) {
        snprintf(err, errlen, "%s: cannot dump the bytecode", name);
        goto done;
    }

    /* Bytecode outlives the state that made it: copy it out. */
    *bin = malloc(job.dump_len);
    if (*bin == NULL) {
        snprintf(err, errlen, "%s: out of memory keeping the bytecode", name);
    } else {
        memcpy(*bin, job.dump, job.dump_len);
        *bin_len = job.dump_len;
        rc = 0;
    }

    mrb_free(mrb, job.dump);

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

        if (compiler_names_from == 0) {
            compiler_names_from = mrb->symidx;
        }
    }

    pthread_mutex_unlock(&compiler_lock);
    return rc;
}


mrb_state *
mrb_script_compiler_get(void)
{
    mrb_state  *mrb;

    pthread_mutex_lock(&compiler_lock);
    mrb = compiler_get_locked();
    pthread_mutex_unlock(&compiler_lock);

    return mrb;
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
        mrb_file_syms_free(compiler_syms);
        compiler = NULL;
        compiler_syms = NULL;
    }

    pthread_mutex_unlock(&compiler_lock);
}
