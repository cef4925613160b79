/*
 * Scripts named by directives, and the directives that the http and stream
 * modules share.
 */

#include "ngx_mruby.h"
#include "mrb_alloc.h"
#include "mrb_run_budget.h"

#include <mruby/hash.h>
#include <mruby/string.h>


ngx_conf_enum_t  ngx_mruby_stat_on_error_values[] = {
    { ngx_string("keep"), NGX_MRUBY_STAT_ON_ERROR_KEEP },
    { ngx_string("fail"), NGX_MRUBY_STAT_ON_ERROR_FAIL },
    { ngx_null_string, 0 }
};


static char *
ngx_mruby_run_timeout_check(ngx_conf_t *cf, void *post, void *data)
{
    ngx_msec_t  *ms = data;

    if (*ms > MRB_RUN_TIMEOUT_MAX_MS) {
        return "must be at most 1d (0: no time budget)";
    }

    return NGX_CONF_OK;
}

ngx_conf_post_t  ngx_mruby_run_timeout_post = { ngx_mruby_run_timeout_check };


static void
ngx_mruby_script_cleanup(void *data)
{
    mrb_script_free(data);
}


/* Hands script to the configuration's pool: freed when the cycle goes. */
static ngx_int_t
ngx_mruby_script_keep(ngx_conf_t *cf, mrb_script *script)
{
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        mrb_script_free(script);
        return NGX_ERROR;
    }

    cln->handler = ngx_mruby_script_cleanup;
    cln->data = script;

    return NGX_OK;
}


static char *
ngx_mruby_conf_cstr(ngx_conf_t *cf, ngx_str_t *s)
{
    u_char  *p;

    p = ngx_pnalloc(cf->pool, s->len + 1);
    if (p == NULL) {
        return NULL;
    }

    ngx_cpystrn(p, s->data, s->len + 1);

    return (char *) p;
}


static char *
ngx_mruby_conf_code(ngx_conf_t *cf, ngx_str_t *code, ngx_mruby_script_t *s)
{
    char        *origin, err[MRB_ERR_MSG_LEN];
    ngx_uint_t   line, i;

    origin = ngx_mruby_conf_cstr(cf, &s->conf_file);
    if (origin == NULL) {
        return NGX_CONF_ERROR;
    }

    /*
     * nginx has read up to the ";" when it calls us: the code starts as
     * many lines earlier as it has newlines, so that errors and backtraces
     * name the configuration lines the code is written on.
     */

    line = s->line;

    for (i = 0; i < code->len && line > 1; i++) {
        if (code->data[i] == '\n') {
            line--;
        }
    }

    s->script = mrb_script_from_code((char *) code->data, code->len, origin,
                                     (int) line, err, sizeof(err));
    if (s->script == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", err);
        return NGX_CONF_ERROR;
    }

    if (ngx_mruby_script_keep(cf, s->script) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_mruby_policy_parse(ngx_str_t *value, ngx_uint_t *policy)
{
    mrb_cache_policy  p;

    if (value->len == 5 && ngx_strncmp(value->data, "cache", 5) == 0) {
        *policy = MRB_CACHE_FOREVER;
        return NGX_OK;
    }

    /* cf->args strings are NUL-terminated */

    if (mrb_cache_policy_parse((char *) value->data, &p) != 0) {
        return NGX_ERROR;
    }

    *policy = p;

    return NGX_OK;
}


char *
ngx_mruby_conf_script(ngx_conf_t *cf, ngx_str_t *args, ngx_uint_t nargs,
    ngx_uint_t code, ngx_mruby_script_t **sp)
{
    ngx_uint_t           policy;
    ngx_mruby_script_t  *s;

    s = ngx_pcalloc(cf->pool, sizeof(ngx_mruby_script_t));
    if (s == NULL) {
        return NGX_CONF_ERROR;
    }

    s->conf_file = cf->conf_file->file.name;
    s->line = cf->conf_file->line;
    *sp = s;

    if (code) {
        return ngx_mruby_conf_code(cf, &args[0], s);
    }

    s->path = args[0];

    if (ngx_conf_full_name(cf->cycle, &s->path, 0) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (nargs < 2) {
        /* the block's mruby_cache decides, once the block is merged */
        return NGX_CONF_OK;
    }

    if (ngx_mruby_policy_parse(&args[1], &policy) != NGX_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid cache policy \"%V\": use \"cache\", "
                           "\"stat\", \"forever\" or \"never\"", &args[1]);
        return NGX_CONF_ERROR;
    }

    if (ngx_mruby_script_resolve(cf, s, policy) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


ngx_int_t
ngx_mruby_script_resolve(ngx_conf_t *cf, ngx_mruby_script_t *s,
    ngx_uint_t policy)
{
    char  *path, err[MRB_ERR_MSG_LEN];

    if (s->script != NULL) {
        return NGX_OK;
    }

    path = ngx_mruby_conf_cstr(cf, &s->path);
    if (path == NULL) {
        return NGX_ERROR;
    }

    if (policy == NGX_MRUBY_CACHE_UNSET) {
        policy = MRB_CACHE_STAT;
    }

    s->script = mrb_script_from_file(path, (mrb_cache_policy) policy, err,
                                     sizeof(err));
    if (s->script == NULL) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0, "%s in %V:%ui",
                      err, &s->conf_file, s->line);
        return NGX_ERROR;
    }

    ngx_str_null(&s->path);

    return ngx_mruby_script_keep(cf, s->script);
}


char *
ngx_mruby_conf_set_cache(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char        *p = conf;
    ngx_str_t   *value;
    ngx_uint_t  *policy;

    policy = (ngx_uint_t *) (p + cmd->offset);

    if (*policy != NGX_MRUBY_CACHE_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "on") == 0) {
        *policy = MRB_CACHE_FOREVER;

    } else if (ngx_strcmp(value[1].data, "off") == 0) {
        *policy = MRB_CACHE_STAT;

    } else if (ngx_mruby_policy_parse(&value[1], policy) != NGX_OK
               || ngx_strcmp(value[1].data, "cache") == 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\": use \"on\" (forever), "
                           "\"off\" (stat), \"stat\", \"forever\" or "
                           "\"never\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


char *
ngx_mruby_conf_set_script(ngx_conf_t *cf, ngx_uint_t code,
    ngx_mruby_script_t **sp, ngx_mruby_main_conf_t *mcf)
{
    char       *rv;
    ngx_str_t  *value;

    if (*sp != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    rv = ngx_mruby_conf_script(cf, &value[1], cf->args->nelts - 1, code, sp);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    mcf->enabled = 1;

    return NGX_CONF_OK;
}


void *
ngx_mruby_create_main_conf(ngx_conf_t *cf, size_t size)
{
    ngx_mruby_main_conf_t  *mcf;

    mcf = ngx_pcalloc(cf->pool, size);
    if (mcf == NULL) {
        return NULL;
    }

    if (ngx_array_init(&mcf->init, cf->pool, 1, sizeof(void *)) != NGX_OK
        || ngx_array_init(&mcf->init_worker, cf->pool, 1, sizeof(void *))
           != NGX_OK
        || ngx_array_init(&mcf->exit_worker, cf->pool, 1, sizeof(void *))
           != NGX_OK)
    {
        return NULL;
    }

    return mcf;
}


char *
ngx_mruby_conf_set_cache_dir(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char       *rv;
    ngx_str_t  *dir;

    rv = ngx_conf_set_str_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    dir = (ngx_str_t *) ((char *) conf + cmd->offset);

    if (ngx_conf_full_name(cf->cycle, dir, 0) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


char *
ngx_mruby_conf_set_startup(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_mruby_main_conf_t *mcf = conf;

    char                 *rv;
    ngx_str_t            *value;
    ngx_array_t          *scripts;
    ngx_mruby_script_t  **sp;

    scripts = (ngx_array_t *) ((char *) conf + cmd->offset);

    sp = ngx_array_push(scripts);
    if (sp == NULL) {
        return NGX_CONF_ERROR;
    }

    value = cf->args->elts;

    rv = ngx_mruby_conf_script(cf, &value[1], cf->args->nelts - 1,
                               cmd->post == NGX_MRUBY_CONF_CODE, sp);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    /* no block above main: a file without a policy of its own is "stat" */

    if (ngx_mruby_script_resolve(cf, *sp, MRB_CACHE_STAT) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (scripts != &mcf->init) {
        mcf->enabled = 1;
    }

    return NGX_CONF_OK;
}


/*
 * Code a directive runs while nginx reads the configuration (the server
 * context directives), in an interpreter of its own closed right after;
 * ngx_mruby_conf_running() is cf meanwhile.  nginx reads its
 * configuration in one thread.
 */
static ngx_conf_t  *ngx_mruby_conf_cf;


ngx_conf_t *
ngx_mruby_conf_running(void)
{
    return ngx_mruby_conf_cf;
}


char *
ngx_mruby_conf_run_code(ngx_conf_t *cf, const mrb_server *server)
{
    char                 err[MRB_ERR_MSG_LEN], *rv;
    mrb_run_rec          run;
    ngx_str_t           *value;
    mrb_interp          *interp;
    ngx_mruby_script_t  *s;

    value = cf->args->elts;

    rv = ngx_mruby_conf_script(cf, &value[1], 1, 1, &s);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    interp = mrb_interp_open(server, cf->log, err, sizeof(err));
    if (interp == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", err);
        return NGX_CONF_ERROR;
    }

    mrb_run_init(&run, NULL, 0);
    run.startup = 1;
    run.memory_limit = MRB_RUN_STARTUP_MEMORY;

    ngx_mruby_conf_cf = cf;
    rv = mrb_script_run(interp, s->script, &run) == 0 ? NGX_CONF_OK
                                                      : NGX_CONF_ERROR;
    ngx_mruby_conf_cf = NULL;

    if (rv != NGX_CONF_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", run.error);
    }

    mrb_interp_close(interp);
    return rv;
}


void
ngx_mruby_conf_listen_url(mrb_state *mrb, const char *what, mrb_value opts,
    ngx_url_t *u, mrb_value *address)
{
    ngx_conf_t  *cf = ngx_mruby_conf_cf;

    if (cf == NULL) {
        mrb_raisef(mrb, E_RUNTIME_ERROR, "%s: only while the configuration "
                   "is read (in a server context directive)", what);
    }

    *address = mrb_obj_as_string(mrb, mrb_hash_get(mrb, opts,
                   mrb_symbol_value(mrb_intern_lit(mrb, "address"))));

    ngx_memzero(u, sizeof(ngx_url_t));

    u->url.len = RSTRING_LEN(*address);
    u->url.data = ngx_pnalloc(cf->pool, u->url.len + 1);
    if (u->url.data == NULL) {
        mrb_raisef(mrb, E_RUNTIME_ERROR, "%s: out of memory", what);
    }

    ngx_memcpy(u->url.data, RSTRING_PTR(*address), u->url.len);
    u->url.data[u->url.len] = '\0';

    u->listen = 1;
    u->default_port = 80;

    if (ngx_parse_url(cf->pool, u) != NGX_OK) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR, "%s: %s in \"%v\"", what,
                   u->err ? u->err : "invalid address", *address);
    }
}
