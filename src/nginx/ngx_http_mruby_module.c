/*
 * The http module: configuration structures, what nginx gives the core
 * (mrb_server), the interpreter of each worker process, mruby_init in the
 * master, and one script run for a request.
 */

#include "ngx_http_mruby_module.h"
#include "mrb_alloc.h"
#include "mrb_metrics.h"
#include "mrb_shdict.h"
#include "mrb_wait.h"


static ngx_int_t ngx_http_mruby_preconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_mruby_postconfiguration(ngx_conf_t *cf);
static void *ngx_http_mruby_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_mruby_create_srv_conf(ngx_conf_t *cf);
static void *ngx_http_mruby_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_mruby_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_mruby_init_module(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_mruby_init_process(ngx_cycle_t *cycle);
static void ngx_http_mruby_exit_process(ngx_cycle_t *cycle);


static ngx_http_module_t  ngx_http_mruby_module_ctx = {
    ngx_http_mruby_preconfiguration,       /* preconfiguration */
    ngx_http_mruby_postconfiguration,      /* postconfiguration */

    ngx_http_mruby_create_main_conf,       /* create main configuration */
    NULL,                                  /* init main configuration */

    ngx_http_mruby_create_srv_conf,        /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_mruby_create_loc_conf,        /* create location configuration */
    ngx_http_mruby_merge_loc_conf          /* merge location configuration */
};


ngx_module_t  ngx_http_mruby_module = {
    NGX_MODULE_V1,
    &ngx_http_mruby_module_ctx,            /* module context */
    ngx_http_mruby_commands,               /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    ngx_http_mruby_init_module,            /* init module */
    ngx_http_mruby_init_process,           /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_mruby_exit_process,           /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/*
 * What nginx gives the core (mrb_server): the classes of the Ruby API, the
 * response body, the error log, and the timers and descriptors a waiting
 * script wakes on (ngx_http_mruby_wait.c).
 */

static int
ngx_http_mruby_write(mrb_run_rec *run, const char *p, size_t len)
{
    ngx_buf_t                  *b;
    ngx_chain_t                *cl;
    ngx_http_request_t         *r;
    ngx_http_mruby_ctx_t       *ctx;
    ngx_http_mruby_run_data_t  *data;

    data = run->data;

    if (data == NULL || data->ctx == NULL
        || data->phase > NGX_HTTP_MRUBY_CONTENT)
    {
        return -1;  /* the log phase, filters, mruby_set: no body to add to */
    }

    if (len == 0) {
        return 0;
    }

    r = run->request;
    ctx = data->ctx;

    b = ngx_create_temp_buf(r->pool, len);
    cl = ngx_alloc_chain_link(r->pool);

    if (b == NULL || cl == NULL) {
        return -1;
    }

    b->last = ngx_cpymem(b->last, p, len);

    cl->buf = b;
    cl->next = NULL;

    *ctx->last_out = cl;
    ctx->last_out = &cl->next;
    ctx->out_len += len;

    return 0;
}


/* The log of the run's request or connection, else the target's. */
static ngx_log_t *
ngx_http_mruby_log_of(void *log_target, mrb_run_rec *run)
{
    ngx_log_t                  *log;
    ngx_http_request_t         *r;
    ngx_http_mruby_run_data_t  *data;

    log = log_target ? log_target : ngx_cycle->log;

    if (run != NULL && run->request != NULL) {
        r = run->request;
        log = r->connection->log;

    } else if (run != NULL && run->data != NULL) {
        data = run->data;
        if (data->connection != NULL) {
            log = data->connection->log;
        }
    }

    return log;
}


ngx_mruby_log_hooks(ngx_http_mruby_log, ngx_http_mruby_log_enabled,
                    ngx_http_mruby_log_fds, ngx_http_mruby_log_of)


static void
ngx_http_mruby_define(mrb_state *mrb, struct RClass *nginx)
{
    ngx_http_mruby_nginx_define(mrb, nginx);
    ngx_http_mruby_headers_define(mrb, nginx);
    ngx_http_mruby_var_define(mrb, nginx);
    ngx_http_mruby_request_define(mrb, nginx);  /* after the two above */
    ngx_http_mruby_connection_define(mrb, nginx);
    ngx_http_mruby_filter_define(mrb, nginx);
    ngx_http_mruby_ssl_define(mrb, nginx);
    ngx_http_mruby_subrequest_define(mrb, nginx);
    ngx_http_mruby_upstream_define(mrb, nginx);
}


const mrb_server  ngx_http_mruby_server =
    ngx_mruby_server(ngx_http_mruby_define, ngx_http_mruby_write,
                     ngx_http_mruby_log, ngx_http_mruby_log_enabled,
                     ngx_http_mruby_log_fds, ngx_http_mruby_wake_after,
                     ngx_http_mruby_wake_on_fd);


/*
 * What the module's log lines are called, and the worker process's
 * interpreter: one for every script and request.
 */
ngx_mruby_process_t  ngx_http_mruby_process = {
    &ngx_http_mruby_server,
    "mruby",
    "mruby_init",
    "mruby_init_worker",
    "mruby_exit_worker",
    NULL
};


static ngx_int_t
ngx_http_mruby_preconfiguration(ngx_conf_t *cf)
{
    /* zones that this configuration does not declare again go at its end */
    mrb_shdict_config_begin();

    return NGX_OK;
}


static ngx_int_t
ngx_http_mruby_postconfiguration(ngx_conf_t *cf)
{
    ngx_http_mruby_main_conf_t  *mmcf;

    mmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_mruby_module);

    if (ngx_http_mruby_ssl_init(cf) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_mruby_handler_init(cf, mmcf);
}


static void *
ngx_http_mruby_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_mruby_main_conf_t  *mmcf;

    /*
     * set by ngx_pcalloc():
     *
     *     mmcf->handlers = 0;
     */

    mmcf = ngx_mruby_create_main_conf(cf, sizeof(ngx_http_mruby_main_conf_t));
    if (mmcf == NULL) {
        return NULL;
    }

    mmcf->stack_size = NGX_CONF_UNSET_SIZE;
    return mmcf;
}


static void *
ngx_http_mruby_create_srv_conf(ngx_conf_t *cf)
{
    /*
     * set by ngx_pcalloc():
     *
     *     mscf->ssl_handshake = NULL;
     *     mscf->keepalive = 0;
     */

    return ngx_pcalloc(cf->pool, sizeof(ngx_http_mruby_srv_conf_t));
}


static void *
ngx_http_mruby_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_mruby_loc_conf_t  *mlcf;

    mlcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_mruby_loc_conf_t));
    if (mlcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     mlcf->handlers[] = NULL;
     *     mlcf->sets = NULL;
     */

    mlcf->cache = NGX_MRUBY_CACHE_UNSET;
    mlcf->stat_on_error = NGX_CONF_UNSET_UINT;
    mlcf->read_body = NGX_CONF_UNSET;
    mlcf->add_handler = NGX_CONF_UNSET;
    mlcf->body_limit = NGX_CONF_UNSET;
    mlcf->filter_limit = NGX_CONF_UNSET;
    mlcf->slow_log = NGX_CONF_UNSET_MSEC;
    mlcf->run_memory = NGX_CONF_UNSET_SIZE;
    mlcf->run_timeout = NGX_CONF_UNSET_MSEC;

    return mlcf;
}


static char *
ngx_http_mruby_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_mruby_loc_conf_t *prev = parent;
    ngx_http_mruby_loc_conf_t *conf = child;

    char  *rv;

    if (conf->cache == NGX_MRUBY_CACHE_UNSET) {
        conf->cache = prev->cache;
    }

    ngx_conf_merge_uint_value(conf->stat_on_error, prev->stat_on_error,
                              NGX_MRUBY_STAT_ON_ERROR_KEEP);
    ngx_conf_merge_value(conf->read_body, prev->read_body, 0);
    ngx_conf_merge_value(conf->add_handler, prev->add_handler, 0);
    ngx_conf_merge_off_value(conf->body_limit, prev->body_limit,
                             MRB_HTTP_BODY_LIMIT_DEFAULT);
    ngx_conf_merge_off_value(conf->filter_limit, prev->filter_limit,
                             MRB_HTTP_FILTER_BODY_LIMIT_DEFAULT);
    ngx_conf_merge_msec_value(conf->slow_log, prev->slow_log, 0);
    conf->slow_ns = (int64_t) conf->slow_log * 1000000;
    ngx_conf_merge_size_value(conf->run_memory, prev->run_memory,
                              MRB_RUN_MEMORY_DEFAULT);
    ngx_conf_merge_msec_value(conf->run_timeout, prev->run_timeout,
                              MRB_RUN_TIMEOUT_DEFAULT_MS);

    rv = ngx_http_mruby_merge_handlers(cf, prev, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    return ngx_http_mruby_merge_sets(cf, prev, conf);
}


static ngx_mruby_main_conf_t *
ngx_http_mruby_main_conf(ngx_cycle_t *cycle)
{
    ngx_http_mruby_main_conf_t  *mmcf;

    mmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_mruby_module);

    return mmcf ? &mmcf->common : NULL;
}


/*
 * The new cycle is in use (its listening sockets are open): its shared
 * dictionaries become the ones scripts find; then mruby_init, once in the
 * master, in an interpreter of its own.
 */
/* The cycle that opened the metrics table is gone. */
static void
ngx_http_mruby_metrics_close(void *data)
{
    mrb_metrics_close();
}


static ngx_int_t
ngx_http_mruby_init_module(ngx_cycle_t *cycle)
{
    char                 err[MRB_ERR_MSG_LEN];
    ngx_pool_cleanup_t  *cln;

    mrb_shdict_config_end();

    /* until this cycle goes; without it nothing is counted, nginx serves */
    if (mrb_metrics_open(err, sizeof(err)) != 0) {
        ngx_log_error(NGX_LOG_ALERT, cycle->log, 0, "%s", err);

    } else {
        cln = ngx_pool_cleanup_add(cycle->pool, 0);
        if (cln == NULL) {
            mrb_metrics_close();
            return NGX_ERROR;
        }
        cln->handler = ngx_http_mruby_metrics_close;
    }

    return ngx_mruby_init_master(&ngx_http_mruby_process,
                                 ngx_http_mruby_main_conf(cycle), cycle);
}


static ngx_int_t
ngx_http_mruby_init_process(ngx_cycle_t *cycle)
{
    ngx_http_mruby_main_conf_t  *mmcf;
    char                         err[MRB_ERR_MSG_LEN];

    if (mrb_metrics_attach(err, sizeof(err)) != 0) {
        ngx_log_error(NGX_LOG_WARN, cycle->log, 0, "%s", err);
    }

    mmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_mruby_module);
    if (mmcf != NULL && mmcf->stack_size != NGX_CONF_UNSET_SIZE) {
        mrb_wait_set_stack_size(mmcf->stack_size);
    }

    return ngx_mruby_init_worker(&ngx_http_mruby_process,
                                 ngx_http_mruby_main_conf(cycle), cycle);
}


static void
ngx_http_mruby_exit_process(ngx_cycle_t *cycle)
{
    ngx_mruby_exit_worker(&ngx_http_mruby_process,
                          ngx_http_mruby_main_conf(cycle), cycle);
}


ngx_http_mruby_ctx_t *
ngx_http_mruby_get_ctx(ngx_http_request_t *r)
{
    ngx_http_mruby_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_mruby_module);
    if (ctx != NULL) {
        return ctx;
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_mruby_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    ctx->last_out = &ctx->out;

    ngx_http_set_ctx(r, ctx, ngx_http_mruby_module);

    return ctx;
}


/*
 * Runs s for r.  NGX_OK, or NGX_ERROR after one error-log line with the
 * exception's class, message and backtrace.
 */
ngx_int_t
ngx_http_mruby_run(ngx_http_request_t *r, ngx_mruby_script_t *s,
    ngx_http_mruby_run_data_t *data, mrb_run_rec *run, mrb_int dflt)
{
    ngx_http_mruby_loc_conf_t  *mlcf;

    mlcf = ngx_http_get_module_loc_conf(r, ngx_http_mruby_module);

    mrb_run_init(run, r, dflt);
    run->data = data;
    run->phase = ngx_http_mruby_phase_names[data->phase];
    run->slow_ns = mlcf->slow_ns;
    run->stat_on_error_fail = mlcf->stat_on_error
                              == NGX_MRUBY_STAT_ON_ERROR_FAIL;
    run->memory_limit = mlcf->run_memory;
    run->timeout_ms = (uint32_t) mlcf->run_timeout;

    /* a phase up to content keeps its data in ctx: its script may wait */
    run->may_wait = data->ctx != NULL && data == &data->ctx->data;

    /* an mruby_set script's value is its variable's */
    run->want_value = data->phase == NGX_HTTP_MRUBY_SET;

    return ngx_mruby_run(&ngx_http_mruby_process, s, run, r->connection->log);
}
