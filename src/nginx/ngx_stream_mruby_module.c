/*
 * The stream module: directives, what nginx gives the core (mrb_server),
 * the worker's interpreter, and the access phase handler that runs
 * mruby_stream scripts.
 */

#include "ngx_stream_mruby_module.h"
#include "mrb_alloc.h"
#include "mrb_wait.h"


static ngx_int_t ngx_stream_mruby_postconfiguration(ngx_conf_t *cf);
static void *ngx_stream_mruby_create_main_conf(ngx_conf_t *cf);
static void *ngx_stream_mruby_create_srv_conf(ngx_conf_t *cf);
static char *ngx_stream_mruby_merge_srv_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_stream_mruby_handler(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_stream_mruby_init_module(ngx_cycle_t *cycle);
static ngx_int_t ngx_stream_mruby_init_process(ngx_cycle_t *cycle);
static void ngx_stream_mruby_exit_process(ngx_cycle_t *cycle);


#define ngx_stream_mruby_startup_commands(name, field)                        \
    ngx_mruby_startup_commands(name, NGX_STREAM_MAIN_CONF,                    \
                               NGX_STREAM_MAIN_CONF_OFFSET, field)


static ngx_command_t  ngx_stream_mruby_commands[] = {

    ngx_stream_mruby_startup_commands("mruby_stream_init", init),
    ngx_stream_mruby_startup_commands("mruby_stream_init_worker",
                                      init_worker),
    ngx_stream_mruby_startup_commands("mruby_stream_exit_worker",
                                      exit_worker),
    ngx_mruby_cache_dir_command("mruby_stream_cache_dir",
                                NGX_STREAM_MAIN_CONF,
                                NGX_STREAM_MAIN_CONF_OFFSET),

    { ngx_string("mruby_stream"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_TAKE12,
      ngx_stream_mruby_handler,
      NGX_STREAM_SRV_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("mruby_stream_server_context_code"),
      NGX_STREAM_SRV_CONF|NGX_CONF_TAKE1,
      ngx_stream_mruby_server_context,
      NGX_STREAM_SRV_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("mruby_run_memory"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_STREAM_SRV_CONF_OFFSET,
      offsetof(ngx_stream_mruby_srv_conf_t, run_memory),
      NULL },

    { ngx_string("mruby_run_timeout"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_STREAM_SRV_CONF_OFFSET,
      offsetof(ngx_stream_mruby_srv_conf_t, run_timeout),
      &ngx_mruby_run_timeout_post },

    { ngx_string("mruby_stream_code"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_TAKE1,
      ngx_stream_mruby_handler,
      NGX_STREAM_SRV_CONF_OFFSET,
      0,
      NGX_MRUBY_CONF_CODE },

      ngx_null_command
};


static ngx_stream_module_t  ngx_stream_mruby_module_ctx = {
    NULL,                                  /* preconfiguration */
    ngx_stream_mruby_postconfiguration,    /* postconfiguration */

    ngx_stream_mruby_create_main_conf,     /* create main configuration */
    NULL,                                  /* init main configuration */

    ngx_stream_mruby_create_srv_conf,      /* create server configuration */
    ngx_stream_mruby_merge_srv_conf        /* merge server configuration */
};


ngx_module_t  ngx_stream_mruby_module = {
    NGX_MODULE_V1,
    &ngx_stream_mruby_module_ctx,          /* module context */
    ngx_stream_mruby_commands,             /* module directives */
    NGX_STREAM_MODULE,                     /* module type */
    NULL,                                  /* init master */
    ngx_stream_mruby_init_module,          /* init module */
    ngx_stream_mruby_init_process,         /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_stream_mruby_exit_process,         /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/*
 * What nginx gives the core (mrb_server) for stream scripts: the classes,
 * no response body, the error log, and the timers and descriptors a
 * waiting script wakes on (ngx_stream_mruby_core.c).
 */

static int
ngx_stream_mruby_write(mrb_run_rec *run, const char *data, size_t len)
{
    return -1;  /* a stream has no response body to add to */
}


/* The log of the run's session, else the target's. */
static ngx_log_t *
ngx_stream_mruby_log_of(void *log_target, mrb_run_rec *run)
{
    ngx_stream_session_t  *s;

    if (run != NULL && run->request != NULL) {
        s = run->request;
        return s->connection->log;
    }

    return log_target ? log_target : ngx_cycle->log;
}


ngx_mruby_log_hooks(ngx_stream_mruby_log, ngx_stream_mruby_log_enabled,
                    ngx_stream_mruby_log_fds, ngx_stream_mruby_log_of)


static void
ngx_stream_mruby_define(mrb_state *mrb, struct RClass *nginx)
{
    struct RClass  *stream;

    stream = ngx_stream_mruby_stream_define(mrb, nginx);
    ngx_stream_mruby_connection_define(mrb, stream);
}


const mrb_server  ngx_stream_mruby_server =
    ngx_mruby_server(ngx_stream_mruby_define, ngx_stream_mruby_write,
                     ngx_stream_mruby_log, ngx_stream_mruby_log_enabled,
                     ngx_stream_mruby_log_fds, ngx_stream_mruby_wake_after,
                     ngx_stream_mruby_wake_on_fd);


/* What the module's log lines are called, and the worker's interpreter. */
ngx_mruby_process_t  ngx_stream_mruby_process = {
    &ngx_stream_mruby_server,
    "mruby_stream",
    "mruby_stream_init",
    "mruby_stream_init_worker",
    "mruby_stream_exit_worker",
    NULL
};


static void *
ngx_stream_mruby_create_main_conf(ngx_conf_t *cf)
{
    return ngx_mruby_create_main_conf(cf, sizeof(ngx_mruby_main_conf_t));
}


static void *
ngx_stream_mruby_create_srv_conf(ngx_conf_t *cf)
{
    ngx_stream_mruby_srv_conf_t  *mscf;

    /*
     * set by ngx_pcalloc():
     *
     *     mscf->handler = NULL;
     */

    mscf = ngx_pcalloc(cf->pool, sizeof(ngx_stream_mruby_srv_conf_t));
    if (mscf == NULL) {
        return NULL;
    }

    mscf->run_memory = NGX_CONF_UNSET_SIZE;
    mscf->run_timeout = NGX_CONF_UNSET_MSEC;
    return mscf;
}


static char *
ngx_stream_mruby_merge_srv_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_stream_mruby_srv_conf_t *prev = parent;
    ngx_stream_mruby_srv_conf_t *conf = child;

    if (conf->handler == NULL) {
        conf->handler = prev->handler;
    }

    ngx_conf_merge_size_value(conf->run_memory, prev->run_memory,
                              MRB_RUN_MEMORY_DEFAULT);
    ngx_conf_merge_msec_value(conf->run_timeout, prev->run_timeout,
                              MRB_RUN_TIMEOUT_DEFAULT_MS);

    /* a file without a policy of its own is "stat" */

    if (conf->handler != NULL
        && ngx_mruby_script_resolve(cf, conf->handler, MRB_CACHE_STAT)
           != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_stream_mruby_handler(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_stream_mruby_srv_conf_t *mscf = conf;

    ngx_mruby_main_conf_t  *mmcf;

    mmcf = ngx_stream_conf_get_module_main_conf(cf, ngx_stream_mruby_module);

    return ngx_mruby_conf_set_script(cf, cmd->post == NGX_MRUBY_CONF_CODE,
                                     &mscf->handler, mmcf);
}


/*
 * What the script returned: Nginx::Stream::OK (or 200) accepts the
 * connection, DECLINED (the default) lets the other access checks decide,
 * ABORT denies it, a 4xx/5xx status ends the session with that status.
 */
static ngx_int_t
ngx_stream_mruby_access_rc(ngx_stream_session_t *s, mrb_int result)
{
    switch (result) {

    case NGX_OK:
    case NGX_STREAM_OK:
        return NGX_OK;

    case NGX_DECLINED:
        return NGX_DECLINED;

    case NGX_ABORT:
        return NGX_STREAM_FORBIDDEN;

    case NGX_ERROR:
        return NGX_ERROR;

    default:
        if (result >= 400 && result < 600) {
            return (ngx_int_t) result;
        }

        ngx_log_error(NGX_LOG_ERR, s->connection->log, 0,
                      "mruby_stream: invalid return code %i",
                      (ngx_int_t) result);
        return NGX_ERROR;
    }
}


/* The session goes while its script waits: end the script now. */
static void
ngx_stream_mruby_wait_cleanup(void *data)
{
    ngx_stream_mruby_ctx_t  *ctx = data;

    ngx_mruby_wait_end(&ngx_stream_mruby_process, &ctx->wake, &ctx->fd_wait,
                       &ctx->waiting);
}


/*
 * The script may wait (Nginx::Stream::Async.sleep): the handler returns
 * NGX_AGAIN, the session's timer resumes the script, and when it has ended
 * the phases run again and this handler returns what it left.
 */
static ngx_int_t
ngx_stream_mruby_access_handler(ngx_stream_session_t *s)
{
    mrb_run_rec                   run;
    ngx_int_t                     rc;
    ngx_pool_cleanup_t           *cln;
    ngx_stream_mruby_ctx_t       *ctx;
    ngx_stream_mruby_srv_conf_t  *mscf;

    mscf = ngx_stream_get_module_srv_conf(s, ngx_stream_mruby_module);

    if (mscf->handler == NULL) {
        return NGX_DECLINED;
    }

    ctx = ngx_stream_get_module_ctx(s, ngx_stream_mruby_module);

    if (ctx != NULL && ctx->resumed) {
        ctx->resumed = 0;
        if (ctx->status != NGX_OK) {
            return NGX_ERROR;
        }
        return ngx_stream_mruby_access_rc(s, ctx->result);
    }

    if (ctx == NULL) {
        ctx = ngx_pcalloc(s->connection->pool,
                          sizeof(ngx_stream_mruby_ctx_t));
        if (ctx == NULL) {
            return NGX_ERROR;
        }
        ctx->session = s;
        ngx_stream_set_ctx(s, ctx, ngx_stream_mruby_module);
    }

    mrb_run_init(&run, s, NGX_DECLINED);
    run.data = ctx;
    run.may_wait = 1;
    run.memory_limit = mscf->run_memory;
    run.timeout_ms = (uint32_t) mscf->run_timeout;

    rc = ngx_mruby_run(&ngx_stream_mruby_process, mscf->handler, &run,
                       s->connection->log);

    if (rc == NGX_AGAIN) {
        ctx->waiting = run.waiting;

        cln = ngx_pool_cleanup_add(s->connection->pool, 0);
        if (cln == NULL) {
            ngx_stream_mruby_wait_cleanup(ctx);
            return NGX_ERROR;
        }
        cln->handler = ngx_stream_mruby_wait_cleanup;
        cln->data = ctx;
        return NGX_AGAIN;
    }

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_stream_mruby_access_rc(s, run.result);
}


static ngx_int_t
ngx_stream_mruby_postconfiguration(ngx_conf_t *cf)
{
    ngx_stream_handler_pt         *h;
    ngx_stream_core_main_conf_t   *cmcf;
    ngx_mruby_main_conf_t         *mmcf;

    mmcf = ngx_stream_conf_get_module_main_conf(cf, ngx_stream_mruby_module);

    if (!mmcf->enabled) {
        return NGX_OK;
    }

    cmcf = ngx_stream_conf_get_module_main_conf(cf, ngx_stream_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_STREAM_ACCESS_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_stream_mruby_access_handler;

    return NGX_OK;
}


static ngx_mruby_main_conf_t *
ngx_stream_mruby_main_conf(ngx_cycle_t *cycle)
{
    ngx_stream_conf_ctx_t  *ctx;

    ctx = (ngx_stream_conf_ctx_t *) cycle->conf_ctx[ngx_stream_module.index];
    if (ctx == NULL) {
        return NULL;
    }

    return ctx->main_conf[ngx_stream_mruby_module.ctx_index];
}


static ngx_int_t
ngx_stream_mruby_init_module(ngx_cycle_t *cycle)
{
    return ngx_mruby_init_master(&ngx_stream_mruby_process,
                                 ngx_stream_mruby_main_conf(cycle), cycle);
}


static ngx_int_t
ngx_stream_mruby_init_process(ngx_cycle_t *cycle)
{
    return ngx_mruby_init_worker(&ngx_stream_mruby_process,
                                 ngx_stream_mruby_main_conf(cycle), cycle);
}


static void
ngx_stream_mruby_exit_process(ngx_cycle_t *cycle)
{
    ngx_mruby_exit_worker(&ngx_stream_mruby_process,
                          ngx_stream_mruby_main_conf(cycle), cycle);
}
