/*
 * Scripts named by directives and the error log as mruby sees it: what the
 * http and stream modules share.
 */

#include "ngx_mruby_conf.h"


#define NGX_MRUBY_ERRLEN  1024


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
    char        *origin, err[NGX_MRUBY_ERRLEN];
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
    char  *path, err[NGX_MRUBY_ERRLEN];

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


void
ngx_mruby_log(ngx_log_t *log, int level, const char *msg, size_t len)
{
    /* MRB_LOG_* are syslog's numbers, one below nginx's NGX_LOG_* */

    ngx_log_error((ngx_uint_t) level + 1, log, 0, "%*s", len, msg);
}


void
ngx_mruby_define_log_levels(mrb_state *mrb, struct RClass *c)
{
    static const struct {
        const char  *name;
        mrb_int      level;
    } levels[] = {
        { "LOG_STDERR", NGX_LOG_STDERR },
        { "LOG_EMERG", NGX_LOG_EMERG },
        { "LOG_ALERT", NGX_LOG_ALERT },
        { "LOG_CRIT", NGX_LOG_CRIT },
        { "LOG_ERR", NGX_LOG_ERR },
        { "LOG_WARN", NGX_LOG_WARN },
        { "LOG_NOTICE", NGX_LOG_NOTICE },
        { "LOG_INFO", NGX_LOG_INFO },
        { "LOG_DEBUG", NGX_LOG_DEBUG }
    };

    ngx_uint_t  i;

    for (i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        mrb_define_const(mrb, c, levels[i].name,
                         mrb_fixnum_value(levels[i].level));
    }
}


void
ngx_mruby_run_startup(mrb_interp *interp, ngx_array_t *scripts,
    const char *directive, ngx_log_t *log)
{
    mrb_run              run;
    ngx_uint_t           i;
    ngx_mruby_script_t **s;

    s = scripts->elts;

    for (i = 0; i < scripts->nelts; i++) {
        mrb_run_init(&run, NULL, 0);
        run.startup = 1;

        if (mrb_script_run(interp, s[i]->script, &run) != 0) {
            ngx_log_error(NGX_LOG_ERR, log, 0, "mruby: %s: %s",
                          directive, run.error);
        }
    }
}
