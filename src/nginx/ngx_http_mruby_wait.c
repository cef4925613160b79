/*
 * A request whose script waits (mrb_wait.h): the phase handler returns
 * NGX_DONE and holds a reference on the request; nginx's event loop wakes
 * the script (Async.sleep's timer), and when the script has ended its
 * phase ends as it would have: the content phase finalizes the request,
 * an earlier phase runs the phases again and its handler returns what the
 * script left.
 *
 * A client that goes away while the script waits terminates the request
 * (ngx_http_test_reading); its cleanup cancels the script (ensure clauses
 * run, the coroutine and its stack are freed) and removes the timer.  On
 * `nginx -s quit` or a reload the old worker waits for its sleeping
 * requests: their timers are not cancelable.
 */

#include "ngx_http_mruby_module.h"
#include "mrb_wait.h"


static void ngx_http_mruby_wake_handler(ngx_event_t *ev);
static void ngx_http_mruby_wait_wev(ngx_http_request_t *r);
static void ngx_http_mruby_wait_cleanup(void *data);


int
ngx_http_mruby_wake_after(mrb_run_rec *run, mrb_int msec)
{
    ngx_http_request_t         *r = run->request;
    ngx_http_mruby_run_data_t  *data = run->data;
    ngx_mruby_wake_t           *wake = &data->ctx->wake;

    wake->handler = ngx_http_mruby_wake_handler;
    wake->data = r;
    wake->ev.data = r->connection;
    wake->ev.log = r->connection->log;

    ngx_mruby_wake_timer(wake, msec);
    return 0;
}


/* A Redis reply (mrb_wait_fd): the socket as a connection of the event
 * loop, and the timer for the deadline; whichever comes first resumes. */
int
ngx_http_mruby_wake_on_fd(mrb_run_rec *run, int fd, int events, mrb_int msec,
    int *ready)
{
    ngx_http_request_t         *r = run->request;
    ngx_http_mruby_run_data_t  *data = run->data;
    ngx_http_mruby_ctx_t       *ctx = data->ctx;

    ngx_http_mruby_wake_after(run, msec);

    if (ngx_mruby_fd_watch(&ctx->fd_wait, &ctx->wake, fd, events, ready,
                           r->connection->log)
        != NGX_OK)
    {
        ngx_mruby_wake_stop(&ctx->wake);
        return -1;
    }

    return 0;
}


ngx_int_t
ngx_http_mruby_wait_begin(ngx_http_request_t *r, ngx_http_mruby_ctx_t *ctx,
    ngx_http_mruby_phase_e phase, mrb_run_rec *run)
{
    mrb_interp          *interp;
    ngx_http_cleanup_t  *cln;

    ctx->waiting = run->waiting;
    ctx->wait_phase = phase;
    ctx->resumed = 0;

    if (!ctx->wait_cleanup) {
        cln = ngx_http_cleanup_add(r, 0);
        if (cln == NULL) {
            interp = ngx_mruby_interp(&ngx_http_mruby_process,
                                      r->connection->log);
            ngx_mruby_wake_stop(&ctx->wake);
            ngx_mruby_fd_unwatch(&ctx->fd_wait);
            mrb_wait_cancel(interp, ctx->waiting);
            ctx->waiting = NULL;
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        cln->handler = ngx_http_mruby_wait_cleanup;
        cln->data = ctx;
        ctx->wait_cleanup = 1;
    }

    /* the reference the phase hands back when the script has ended */
    r->main->count++;

    /* nginx wakes the request when a subrequest ends; nothing else may
     * run its phases while the script waits */
    r->write_event_handler = ngx_http_mruby_wait_wev;

    if (r == r->main) {
        r->read_event_handler = ngx_http_test_reading;
    }

    return NGX_DONE;
}


/* The script has ended: its phase ends as it would have without a wait. */
static void
ngx_http_mruby_wait_end(ngx_http_request_t *r, ngx_http_mruby_ctx_t *ctx,
    mrb_state *mrb, int rc, mrb_run_rec *out)
{
    ngx_int_t  status;

    if (r == r->main) {
        r->read_event_handler = ngx_http_block_reading;
    }

    status = NGX_OK;

    if (ctx->wait_set != NULL) {
        /* the phase goes on: its next mruby_set, then nginx's */
        ngx_http_mruby_set_ended(r, ctx, mrb, rc, out);

    } else if (rc != 0) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0, "%s: %s",
                      ngx_http_mruby_process.name, out->error);
        status = r->header_sent ? NGX_ERROR : NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx->wait_phase == NGX_HTTP_MRUBY_CONTENT) {
        if (status == NGX_OK) {
            status = ngx_http_mruby_content_done(r, ctx, out->result,
                                                 out->returned);
        }

        if (status != NGX_DECLINED) {
            ngx_http_finalize_request(r, status);
            return;
        }

        /* the next content handler, as after reading the body */
        r->phase_handler++;
        r->write_event_handler = ngx_http_core_run_phases;
        ngx_http_core_run_phases(r);
        return;
    }

    ctx->resumed = 1;
    ctx->resumed_status = status;
    ctx->resumed_result = out->result;
    ctx->resumed_returned = out->returned;

    r->main->count--;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
}


/* Resumes the script of r; when it has ended, its phase ends. */
static void
ngx_http_mruby_wait_resume(ngx_http_request_t *r, ngx_http_mruby_ctx_t *ctx)
{
    int          rc, ai;
    mrb_state   *mrb;
    mrb_run_rec  out;
    mrb_interp  *interp;

    interp = ngx_mruby_interp(&ngx_http_mruby_process, r->connection->log);
    if (interp == NULL || ctx->waiting == NULL) {
        return;
    }

    mrb = mrb_interp_state(interp);
    ai = mrb_gc_arena_save(mrb);

    mrb_run_init(&out, r, 0);
    out.want_value = ctx->wait_set != NULL;
    rc = mrb_wait_resume(interp, ctx->waiting, &out);

    if (rc != MRB_RUN_WAITING) {
        ctx->waiting = NULL;
        r->write_event_handler = ngx_http_core_run_phases;
        ngx_http_mruby_wait_end(r, ctx, mrb, rc, &out);
    }

    mrb_gc_arena_restore(mrb, ai);
}


static void
ngx_http_mruby_wake_handler(ngx_event_t *ev)
{
    ngx_connection_t      *c;
    ngx_http_request_t    *r;
    ngx_http_mruby_ctx_t  *ctx;

    r = ((ngx_mruby_wake_t *) ev)->data;
    c = r->connection;
    ctx = ngx_http_get_module_ctx(r, ngx_http_mruby_module);

    if (ctx != NULL) {
        /* the deadline of a Redis reply: the socket is watched no more */
        ngx_mruby_fd_unwatch(&ctx->fd_wait);
        ngx_http_mruby_wait_resume(r, ctx);
    }

    ngx_http_run_posted_requests(c);
}


/* The request's write handler while its script waits: resumes it when
 * the subrequest it waits for has ended, and does nothing otherwise. */
static void
ngx_http_mruby_wait_wev(ngx_http_request_t *r)
{
    ngx_http_mruby_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_mruby_module);

    if (ctx != NULL && ctx->sr_waiting && ctx->sr_done) {
        ctx->sr_done = 0;
        ngx_http_mruby_wait_resume(r, ctx);
    }
}


/*
 * The request goes (a client that left, a timeout, the worker's end)
 * while its script waits: end the script now.
 */
static void
ngx_http_mruby_wait_cleanup(void *data)
{
    ngx_http_mruby_ctx_t  *ctx = data;

    ngx_mruby_wait_end(&ngx_http_mruby_process, &ctx->wake, &ctx->fd_wait,
                       &ctx->waiting);
}
