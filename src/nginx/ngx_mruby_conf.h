/*
 * What the http and stream modules share: scripts named by directives, and
 * the error log seen from mruby.
 */

#ifndef _NGX_MRUBY_CONF_H_INCLUDED_
#define _NGX_MRUBY_CONF_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include <mruby.h>

#include "mrb_interp.h"
#include "mrb_script.h"


/*
 * A script named by a directive.  Inline code and files with an explicit
 * policy are compiled when the directive is read; a file with no policy
 * waits in path until its block's mruby_cache is known (the block is
 * merged), see ngx_mruby_script_resolve().
 */
typedef struct {
    mrb_script  *script;
    ngx_str_t    path;         /* a file waiting for its policy, or empty */
    ngx_str_t    conf_file;    /* where the directive was written */
    ngx_uint_t   line;
} ngx_mruby_script_t;


/* "mruby_cache" values: the policy of file scripts without one of their own */
#define NGX_MRUBY_CACHE_UNSET  NGX_CONF_UNSET_UINT


/*
 * Reads a script directive: args[0] is a file and args[1] an optional
 * policy ("cache" = forever, "stat", "forever", "never"), or (code) args[0]
 * is inline Ruby.  Returns NGX_CONF_OK or an error for the directive.
 */
char *ngx_mruby_conf_script(ngx_conf_t *cf, ngx_str_t *args, ngx_uint_t nargs,
    ngx_uint_t code, ngx_mruby_script_t **sp);

/* Creates a waiting file script with policy; NGX_OK or NGX_ERROR (logged). */
ngx_int_t ngx_mruby_script_resolve(ngx_conf_t *cf, ngx_mruby_script_t *s,
    ngx_uint_t policy);

/* "mruby_cache on|off|stat|forever|never" into an ngx_uint_t policy. */
char *ngx_mruby_conf_set_cache(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* Writes msg at an MRB_LOG_* level to log. */
void ngx_mruby_log(ngx_log_t *log, int level, const char *msg, size_t len);

/* Server::LOG_STDERR .. LOG_DEBUG with nginx's numbers. */
void ngx_mruby_define_log_levels(mrb_state *mrb, struct RClass *c);

/* Runs startup scripts (init, init_worker, exit_worker) of an array of
 * ngx_mruby_script_t *, logging each failure under the directive's name. */
void ngx_mruby_run_startup(mrb_interp *interp, ngx_array_t *scripts,
    const char *directive, ngx_log_t *log);


#endif /* _NGX_MRUBY_CONF_H_INCLUDED_ */
