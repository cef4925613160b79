/*
 * The Ruby API of the stream module: Nginx::Stream (log, constants), and
 * the timers and descriptors a waiting stream script wakes on.
 */

#include "ngx_stream_mruby_module.h"
#include "mrb_wait.h"

#include <mruby/class.h>
#include <mruby/string.h>


static void
ngx_stream_mruby_wake_handler(ngx_event_t *ev)
{
    int                      rc;
    mrb_run_rec              out;
    mrb_interp              *interp;
    ngx_stream_mruby_ctx_t  *ctx = ((ngx_mruby_wake_t *) ev)->data;
    ngx_stream_session_t    *s = ctx->session;

    /* the deadline of a Redis reply: the socket is watched no more */
    ngx_mruby_fd_unwatch(&ctx->fd_wait);

    interp = ngx_mruby_interp(&ngx_stream_mruby_process, s->connection->log);
    if (interp == NULL || ctx->waiting == NULL) {
        return;
    }

    mrb_run_init(&out, s, NGX_DECLINED);
    rc = mrb_wait_resume(interp, ctx->waiting, &out);
    if (rc == MRB_RUN_WAITING) {
        return;
    }

    ctx->waiting = NULL;

    if (rc != 0) {
        ngx_log_error(NGX_LOG_ERR, s->connection->log, 0, "%s: %s",
                      ngx_stream_mruby_process.name, out.error);
    }

    ctx->status = rc != 0 ? NGX_ERROR : NGX_OK;
    ctx->result = out.result;
    ctx->resumed = 1;

    /* the access phase again: its handler returns what the script left */
    ngx_stream_core_run_phases(s);
}


/* Nginx::Stream::Async.sleep: the session's timer resumes the script. */
int
ngx_stream_mruby_wake_after(mrb_run_rec *run, mrb_int msec)
{
    ngx_stream_mruby_ctx_t  *ctx = run->data;

    ctx->wake.handler = ngx_stream_mruby_wake_handler;
    ctx->wake.data = ctx;
    ctx->wake.ev.data = ctx->session->connection;
    ctx->wake.ev.log = ctx->session->connection->log;

    ngx_mruby_wake_timer(&ctx->wake, msec);
    return 0;
}


/* A Redis reply in a stream script: the socket or the deadline resumes. */
int
ngx_stream_mruby_wake_on_fd(mrb_run_rec *run, int fd, int events, mrb_int msec,
    int *ready)
{
    ngx_stream_mruby_ctx_t  *ctx = run->data;

    ngx_stream_mruby_wake_after(run, msec);

    if (ngx_mruby_fd_watch(&ctx->fd_wait, &ctx->wake, fd, events, ready,
                           ctx->session->connection->log)
        != NGX_OK)
    {
        ngx_mruby_wake_stop(&ctx->wake);
        return -1;
    }

    return 0;
}


/* Nginx::Stream.log(level, msg), level as Nginx::Stream::LOG_*, msg.to_s */
static mrb_value
ngx_stream_mruby_log_m(mrb_state *mrb, mrb_value self)
{
    mrb_int      level;
    mrb_value    msg;
    mrb_interp  *interp;

    mrb_get_args(mrb, "io", &level, &msg);
    msg = mrb_obj_as_string(mrb, msg);

    if (level < NGX_LOG_EMERG) {
        level = NGX_LOG_EMERG;

    } else if (level > NGX_LOG_DEBUG) {
        level = NGX_LOG_DEBUG;
    }

    interp = mrb_interp_from_state(mrb);

    ngx_stream_mruby_server.log(mrb_interp_log_target(interp),
                                mrb_interp_run(mrb),
                                (int) level - NGX_LOG_EMERG, RSTRING_PTR(msg),
                                (size_t) RSTRING_LEN(msg));

    return self;
}


ngx_connection_t *
ngx_mruby_connection(mrb_state *mrb)
{
    ngx_stream_session_t  *s;

    s = mrb_interp_request(mrb);

    return s->connection;
}


/* Nginx::Stream.module_name, as Nginx.module_name */
static mrb_value
ngx_stream_mruby_module_name(mrb_state *mrb, mrb_value self)
{
    return mrb_str_new_cstr(mrb, ngx_stream_mruby_server.module_name);
}


static const mrb_api_method  ngx_stream_mruby_class_methods[] = {
    { "log", ngx_stream_mruby_log_m, MRB_ARGS_REQ(2) },
    { "errlogger", ngx_stream_mruby_log_m, MRB_ARGS_REQ(2) },
    { "add_listener", ngx_stream_mruby_add_listener, MRB_ARGS_REQ(1) },
    { "module_name", ngx_stream_mruby_module_name, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


struct RClass *
ngx_stream_mruby_stream_define(mrb_state *mrb, struct RClass *nginx)
{
    struct RClass  *stream;

    ngx_mruby_define_codes(mrb, nginx);

    stream = mrb_api_define_class(mrb, nginx, "Stream", NULL, NULL);

    ngx_mruby_define_codes(mrb, stream);

    mrb_api_define_class_methods(mrb, stream, ngx_stream_mruby_class_methods);

    /* Nginx::Stream::Async is the core's Nginx::Async (sleep, ...) */
    mrb_define_const(mrb, stream, "Async",
                     mrb_obj_value(mrb_module_get_under(mrb, nginx, "Async")));

    return stream;
}
