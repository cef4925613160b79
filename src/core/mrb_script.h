/*
 * Scripts: a file or inline code, compiled to bytecode once per process and
 * loaded once into each interpreter that runs it.
 *
 * Cache policies (docs/architecture.md, "Scripts and their cache"):
 *   stat     recompile when the file changed (watched with inotify, see
 *            mrb_file_watch.h; stat() on every run where it cannot be),
 *            once the writer is done: edits apply with no restart; a
 *            change that does not compile (or a file removed) leaves the
 *            last version that compiled running, with one log line, unless
 *            the run says stat_on_error_fail;
 *   forever  compile at configuration time (the `cache` flag); a syntax
 *            error fails the configuration test;
 *   never    read and compile on every run, drop the bytecode after.
 * Inline code is always compiled at configuration time.
 *
 * Memory: scripts are malloc'd; the adapter frees them with mrb_script_free
 * from a cleanup of the pool that owns its configuration.
 */

#ifndef MRB_SCRIPT_H
#define MRB_SCRIPT_H

#include <stddef.h>
#include "mrb_interp.h"

typedef enum {
    MRB_CACHE_STAT = 0,
    MRB_CACHE_FOREVER,
    MRB_CACHE_NEVER
} mrb_cache_policy;

typedef struct mrb_script_s  mrb_script;

/* Parses "stat", "forever" or "never"; returns 0, or -1 if s is none. */
int mrb_cache_policy_parse(const char *s, mrb_cache_policy *policy);
const char *mrb_cache_policy_name(mrb_cache_policy policy);

/*
 * A file script.  Under MRB_CACHE_FOREVER the file is compiled now and a
 * missing file or syntax error returns NULL with "file:line: message" in
 * err.  Under stat and never a missing file is an error of each run, not of
 * the configuration; under stat a file that compiles is compiled now, so
 * that the processes forked later start with a version to go on with.
 */
mrb_script *mrb_script_from_file(const char *path, mrb_cache_policy policy,
    char *err, size_t errlen);

/*
 * Inline code, compiled now.  origin and line name where it was written
 * (the configuration file) for error messages and backtraces.
 */
mrb_script *mrb_script_from_code(const char *code, size_t len,
    const char *origin, int line, char *err, size_t errlen);

void mrb_script_free(mrb_script *script);

/* Frees the process's compiler (mrb_script_compile.h), which
 * configuration-time compiles open; the next compile opens it again.  Both
 * adapters call it once a configuration has been read (nginx before its
 * workers fork). */
void mrb_script_compiler_close(void);

/*
 * The script for a file named at request time (Apache's mruby-script
 * handler, nginx's mruby_add_handler): created on first use and kept for
 * the life of the process, one per path and policy.  NULL with err when
 * out of memory or, under `forever`, when the file does not compile.
 */
mrb_script *mrb_script_for_file(const char *path, mrb_cache_policy policy,
    char *err, size_t errlen);

/* The file path, or "origin:line" of inline code. */
const char *mrb_script_name(const mrb_script *script);
mrb_cache_policy mrb_script_policy(const mrb_script *script);

/*
 * A `stat` script whose file on disk does not run: it did not compile or
 * could not be read (then, if an older version compiled, that one runs,
 * unless the run asked for failures with stat_on_error_fail), or it is
 * still being written.  As seen by this process's runs.
 */
typedef struct {
    char    path[1024];
    char    reason[MRB_ERR_MSG_LEN];    /* "file:line: message",
                                           "file: cannot ..." */
    long    since;          /* time(): when that began */
    int     serving;        /* 1: an older version runs; 0: none (500) */
} mrb_script_stale;

/*
 * The next such script from *cursor on (0: the first); returns 1 with out
 * filled and *cursor moved past it, or 0 when there is none.
 */
int mrb_script_stale_next(unsigned *cursor, mrb_script_stale *out);

/*
 * What the `stat` files of this process (those named in the configuration
 * so far) need of the file watch: how many scripts, and how many watches
 * (each directory on the way once, and each file; symbolic links would
 * add their targets').  Returns 0, or -1 out of memory.
 */
int mrb_script_watch_needs(size_t *scripts, size_t *watches);

/* mrb_script_run (and mrb_wait_resume): the script is suspended, and
 * run->waiting is the waiting run (mrb_wait.h). */
#define MRB_RUN_WAITING  1

/*
 * Runs the script in interp as run.  Saves and restores the GC arena,
 * catches any exception, clears mrb->exc, and (unless run->startup) removes
 * the globals, top-level constants and instance variables the script added.
 * Returns 0; -1 with the one-line error in run->error; or, only when
 * run->may_wait, MRB_RUN_WAITING: the script waits (mrb_wait.h).
 */
int mrb_script_run(mrb_interp *interp, mrb_script *script, mrb_run_rec *run);

/*
 * Whether a run of the script in interp that may wait would go on a
 * coroutine: its code names something that waits (mrb_wait_core.h), or a
 * startup script's did.  Loads the script into interp when it is not yet.
 * 1 also for a script compiled on every run (`never` files) and for one
 * that cannot be loaded: only their runs can tell.
 */
int mrb_script_names_wait(mrb_interp *interp, mrb_script *script);

#endif /* MRB_SCRIPT_H */
