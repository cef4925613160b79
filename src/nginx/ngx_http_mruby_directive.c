/*
 * The http module's directives.
 */

#include "ngx_http_mruby_module.h"
#include "mrb_shdict.h"
#include "mrb_coro.h"


#define NGX_HTTP_MRUBY_ANY_CONF                                               \
    (NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_HTTP_LIF_CONF)


static char *ngx_http_mruby_handler(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_mruby_ssl_handshake(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_mruby_add_handler(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_mruby_set_stack_size(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_mruby_shared_dict(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_mruby_output_filter_removed(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);


/* The file form and the inline form of a script directive. */
#define ngx_http_mruby_script_commands(name, contexts, set, conf, phase)      \
    { ngx_string(name),                                                       \
      contexts|NGX_CONF_TAKE12,                                               \
      set,                                                                    \
      conf,                                                                   \
      0,                                                                      \
      NGX_HTTP_MRUBY_CMD(phase, 0) },                                         \
    { ngx_string(name "_code"),                                               \
      contexts|NGX_CONF_TAKE1,                                                \
      set,                                                                    \
      conf,                                                                   \
      0,                                                                      \
      NGX_HTTP_MRUBY_CMD(phase, 1) }

/* A per-location handler. */
#define ngx_http_mruby_handler_commands(name, contexts, phase)                \
    ngx_http_mruby_script_commands(name, contexts, ngx_http_mruby_handler,    \
                                   NGX_HTTP_LOC_CONF_OFFSET, phase)

#define ngx_http_mruby_startup_commands(name, field)                          \
    ngx_mruby_startup_commands(name, NGX_HTTP_MAIN_CONF,                      \
                               NGX_HTTP_MAIN_CONF_OFFSET, field)


ngx_command_t  ngx_http_mruby_commands[] = {

    ngx_http_mruby_startup_commands("mruby_init", init),
    ngx_http_mruby_startup_commands("mruby_init_worker", init_worker),
    ngx_http_mruby_startup_commands("mruby_exit_worker", exit_worker),

    ngx_http_mruby_handler_commands("mruby_post_read_handler",
        NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF, NGX_HTTP_MRUBY_POST_READ),
    ngx_http_mruby_handler_commands("mruby_server_rewrite_handler",
        NGX_HTTP_MRUBY_ANY_CONF, NGX_HTTP_MRUBY_SERVER_REWRITE),
    ngx_http_mruby_handler_commands("mruby_rewrite_handler",
        NGX_HTTP_MRUBY_ANY_CONF, NGX_HTTP_MRUBY_REWRITE),
    ngx_http_mruby_handler_commands("mruby_access_handler",
        NGX_HTTP_MRUBY_ANY_CONF, NGX_HTTP_MRUBY_ACCESS),
    ngx_http_mruby_handler_commands("mruby_content_handler",
        NGX_HTTP_MRUBY_ANY_CONF, NGX_HTTP_MRUBY_CONTENT),
    ngx_http_mruby_handler_commands("mruby_log_handler",
        NGX_HTTP_MRUBY_ANY_CONF, NGX_HTTP_MRUBY_LOG),
    ngx_http_mruby_handler_commands("mruby_output_header_filter",
        NGX_HTTP_MRUBY_ANY_CONF, NGX_HTTP_MRUBY_HEADER_FILTER),
    ngx_http_mruby_handler_commands("mruby_output_body_filter",
        NGX_HTTP_MRUBY_ANY_CONF, NGX_HTTP_MRUBY_BODY_FILTER),

    { ngx_string("mruby_output_filter"),
      NGX_HTTP_MRUBY_ANY_CONF|NGX_CONF_TAKE12,
      ngx_http_mruby_output_filter_removed,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("mruby_output_filter_code"),
      NGX_HTTP_MRUBY_ANY_CONF|NGX_CONF_TAKE12,
      ngx_http_mruby_output_filter_removed,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("mruby_upstream_keepalive"),
      NGX_HTTP_UPS_CONF|NGX_CONF_TAKE1,
      ngx_http_mruby_upstream_keepalive,
      NGX_HTTP_SRV_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("mruby_server_context_handler_code"),
      NGX_HTTP_SRV_CONF|NGX_CONF_TAKE1,
      ngx_http_mruby_server_context,
      NGX_HTTP_SRV_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("mruby_set"),
      NGX_HTTP_MRUBY_ANY_CONF|NGX_CONF_TAKE23,
      ngx_http_mruby_set,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NGX_HTTP_MRUBY_CMD(NGX_HTTP_MRUBY_SET, 0) },

    { ngx_string("mruby_set_code"),
      NGX_HTTP_MRUBY_ANY_CONF|NGX_CONF_TAKE2,
      ngx_http_mruby_set,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NGX_HTTP_MRUBY_CMD(NGX_HTTP_MRUBY_SET, 1) },

    ngx_http_mruby_script_commands("mruby_ssl_handshake_handler",
        NGX_HTTP_SRV_CONF, ngx_http_mruby_ssl_handshake,
        NGX_HTTP_SRV_CONF_OFFSET, NGX_HTTP_MRUBY_SSL_HANDSHAKE),

    { ngx_string("mruby_metrics"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_mruby_metrics,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("mruby_add_handler"),
      NGX_HTTP_MRUBY_ANY_CONF|NGX_CONF_FLAG,
      ngx_http_mruby_add_handler,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_mruby_loc_conf_t, add_handler),
      NULL },

    { ngx_string("mruby_enable_read_request_body"),
      NGX_HTTP_MRUBY_ANY_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_mruby_loc_conf_t, read_body),
      NULL },

    { ngx_string("mruby_slow_log"),
      NGX_HTTP_MRUBY_ANY_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_mruby_loc_conf_t, slow_log),
      NULL },

    { ngx_string("mruby_request_body_limit"),
      NGX_HTTP_MRUBY_ANY_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_off_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_mruby_loc_conf_t, body_limit),
      NULL },

    { ngx_string("mruby_output_body_filter_limit"),
      NGX_HTTP_MRUBY_ANY_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_off_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_mruby_loc_conf_t, filter_limit),
      NULL },

    { ngx_string("mruby_run_memory"),
      NGX_HTTP_MRUBY_ANY_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_mruby_loc_conf_t, run_memory),
      NULL },

    { ngx_string("mruby_run_timeout"),
      NGX_HTTP_MRUBY_ANY_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_mruby_loc_conf_t, run_timeout),
      &ngx_mruby_run_timeout_post },

    { ngx_string("mruby_stack_size"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_mruby_set_stack_size,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_mruby_main_conf_t, stack_size),
      NULL },

    ngx_mruby_cache_dir_command("mruby_cache_dir", NGX_HTTP_MAIN_CONF,
                                NGX_HTTP_MAIN_CONF_OFFSET),

    { ngx_string("mruby_cache"),
      NGX_HTTP_MRUBY_ANY_CONF|NGX_CONF_TAKE1,
      ngx_mruby_conf_set_cache,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_mruby_loc_conf_t, cache),
      NULL },

    { ngx_string("mruby_stat_on_error"),
      NGX_HTTP_MRUBY_ANY_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_mruby_loc_conf_t, stat_on_error),
      ngx_mruby_stat_on_error_values },

    { ngx_string("mruby_shared_dict"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_mruby_shared_dict,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static char *
ngx_http_mruby_handler(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_mruby_loc_conf_t *mlcf = conf;

    ngx_uint_t                   phase;
    ngx_http_mruby_main_conf_t  *mmcf;

    phase = ngx_http_mruby_cmd_phase(cmd->post);

    /* refused where it would be accepted and never run */

    if (phase == NGX_HTTP_MRUBY_SERVER_REWRITE
        && (cf->cmd_type & (NGX_HTTP_LOC_CONF|NGX_HTTP_LIF_CONF)))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"%V\" cannot run in a "
                           "location: the server rewrite phase comes before "
                           "a location is chosen (use it at server level, or "
                           "mruby_rewrite_handler here)", &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (phase == NGX_HTTP_MRUBY_REWRITE
        && (cf->cmd_type & NGX_HTTP_LIF_CONF))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"%V\" cannot run inside "
                           "\"if\": the location's rewrite script runs before "
                           "nginx evaluates \"if\" (test the condition in the "
                           "script)", &cmd->name);
        return NGX_CONF_ERROR;
    }

    mmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_mruby_module);
    mmcf->handlers |= 1 << phase;

    return ngx_mruby_conf_set_script(cf, ngx_http_mruby_cmd_code(cmd->post),
                                     &mlcf->handlers[phase], &mmcf->common);
}


static char *
ngx_http_mruby_ssl_handshake(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_mruby_srv_conf_t *mscf = conf;

    ngx_http_mruby_main_conf_t  *mmcf;

    mmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_mruby_module);

    return ngx_mruby_conf_set_script(cf, ngx_http_mruby_cmd_code(cmd->post),
                                     &mscf->ssl_handshake, &mmcf->common);
}


/*
 * mruby_output_filter(_code): the original removed these and refused them
 * with a pointer to their successors; so does this module, rather than
 * leave nginx's "unknown directive".
 */
static char *
ngx_http_mruby_output_filter_removed(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    return "was removed (as in the original ngx_mruby): use "
           "mruby_output_body_filter(_code) for the body and "
           "mruby_output_header_filter(_code) for the header";
}


static char *
ngx_http_mruby_add_handler(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char                        *rv;
    ngx_http_mruby_main_conf_t  *mmcf;

    rv = ngx_conf_set_flag_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    /* the content handler runs the .rb file a URI maps to */

    mmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_mruby_module);
    mmcf->handlers |= 1 << NGX_HTTP_MRUBY_CONTENT;
    mmcf->common.enabled = 1;

    return NGX_CONF_OK;
}


static char *
ngx_http_mruby_shared_dict(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char        err[MRB_ERR_MSG_LEN];
    size_t      size;
    ngx_str_t  *value;

    value = cf->args->elts;

    /* cf->args strings are NUL-terminated */

    if (mrb_shdict_parse_size((char *) value[2].data, &size) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid size \"%V\" (e.g. 1m, 512k, 65536)",
                           &value[2]);
        return NGX_CONF_ERROR;
    }

    if (mrb_shdict_zone_add((char *) value[1].data, size, err, sizeof(err))
        != 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", err);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * A file script of a block waits for the block's mruby_cache; it is
 * created here, when the block is merged: first the parent's own (the
 * http block is never merged into anything), then this block's.
 */
char *
ngx_http_mruby_merge_handlers(ngx_conf_t *cf, ngx_http_mruby_loc_conf_t *prev,
    ngx_http_mruby_loc_conf_t *conf)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_MRUBY_NHANDLERS; i++) {

        if (prev->handlers[i] != NULL
            && ngx_mruby_script_resolve(cf, prev->handlers[i], prev->cache)
               != NGX_OK)
        {
            return NGX_CONF_ERROR;
        }

        if (conf->handlers[i] == NULL) {
            conf->handlers[i] = prev->handlers[i];
            continue;
        }

        if (ngx_mruby_script_resolve(cf, conf->handlers[i], conf->cache)
            != NGX_OK)
        {
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;
}


/*
 * mruby_stack_size 256k: the machine stack each script that may wait runs
 * on (reserved address space; only what a script touches costs memory).
 */
static char *
ngx_http_mruby_set_stack_size(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char                        *rv;
    ngx_http_mruby_main_conf_t  *mmcf = conf;

    rv = ngx_conf_set_size_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    if (mmcf->stack_size < MRB_CORO_STACK_MIN
        || mmcf->stack_size > 64 * 1024 * 1024)
    {
        return "must be from 64k to 64m";
    }

    return NGX_CONF_OK;
}
