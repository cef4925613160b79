/*
 * The request-phase handlers: post_read, server_rewrite, rewrite, access,
 * content (and mruby_add_handler), log.  What a script asked for (output,
 * a return code, a redirect) becomes what the phase returns to nginx.
 */

#include "ngx_http_mruby_module.h"


static ngx_int_t ngx_http_mruby_phase(ngx_http_request_t *r,
    ngx_http_mruby_phase_e phase);
static ngx_int_t ngx_http_mruby_post_read_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_mruby_server_rewrite_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_mruby_rewrite_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_mruby_access_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_mruby_content_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_mruby_log_handler(ngx_http_request_t *r);


static const struct {
    ngx_http_phases       phase;
    ngx_http_handler_pt   handler;
} ngx_http_mruby_phases[] = {
    { NGX_HTTP_POST_READ_PHASE, ngx_http_mruby_post_read_handler },
    { NGX_HTTP_SERVER_REWRITE_PHASE, ngx_http_mruby_server_rewrite_handler },
    { NGX_HTTP_REWRITE_PHASE, ngx_http_mruby_rewrite_handler },
    { NGX_HTTP_ACCESS_PHASE, ngx_http_mruby_access_handler },
    { NGX_HTTP_CONTENT_PHASE, ngx_http_mruby_content_handler },
    { NGX_HTTP_LOG_PHASE, ngx_http_mruby_log_handler }
};


/* Registers a handler in each phase that some block has a script for. */
ngx_int_t
ngx_http_mruby_handler_init(ngx_conf_t *cf, ngx_http_mruby_main_conf_t *mmcf)
{
    ngx_uint_t                  i;
    ngx_http_handler_pt        *h;
    ngx_http_core_main_conf_t  *cmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    /* ngx_http_mruby_phases[] is in ngx_http_mruby_phase_e order */

    for (i = 0; i < sizeof(ngx_http_mruby_phases)
                    / sizeof(ngx_http_mruby_phases[0]); i++)
    {
        if (!(mmcf->handlers & (1 << i))) {
            continue;
        }

        h = ngx_array_push(&cmcf->phases[ngx_http_mruby_phases[i].phase]
                                .handlers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        *h = ngx_http_mruby_phases[i].handler;
    }

    return NGX_OK;
}


/* The status a response with a body goes out with. */
static ngx_uint_t
ngx_http_mruby_status(ngx_http_request_t *r, mrb_int result)
{
    if (mrb_http_valid_final_status(result)) {
        return (ngx_uint_t) result;
    }

    if (r->headers_out.status != 0) {
        return r->headers_out.status;
    }

    return NGX_HTTP_OK;
}


/* Sends the header (unless Nginx.send_header did) and what rputs wrote. */
static ngx_int_t
ngx_http_mruby_send(ngx_http_request_t *r, ngx_http_mruby_ctx_t *ctx,
    mrb_int result)
{
    ngx_int_t     rc;
    ngx_chain_t  *cl;

    if (!r->header_sent) {
        r->headers_out.status = ngx_http_mruby_status(r, result);
        r->headers_out.content_length_n = ctx->out_len;

        if (r->headers_out.content_type.len == 0
            && ngx_http_set_content_type(r) != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        rc = ngx_http_send_header(r);

        if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
            return rc;
        }

    } else if (r->header_only) {
        /*
         * Nginx.send_header went first, and the response takes no body
         * (HEAD, 204, 304, an auth_request subrequest): bytes sent now
         * would be read as the start of the next response.
         */
        ctx->out = NULL;
        ctx->last_out = &ctx->out;
        ctx->out_len = 0;
        return NGX_OK;
    }

    if (ctx->out == NULL) {
        return ngx_http_send_special(r, NGX_HTTP_LAST);
    }

    for (cl = ctx->out; cl->next; cl = cl->next) { /* void */ }

    cl->buf->last_buf = (r == r->main) ? 1 : 0;
    cl->buf->last_in_chain = 1;

    cl = ctx->out;
    ctx->out = NULL;
    ctx->last_out = &ctx->out;
    ctx->out_len = 0;

    return ngx_http_output_filter(r, cl);
}


/*
 * Nginx.redirect "/path" or "@name": an internal redirect, done once the
 * script has returned (nginx runs the phases of the new URI from within
 * the call).
 */
static ngx_int_t
ngx_http_mruby_internal_redirect(ngx_http_request_t *r,
    ngx_http_mruby_ctx_t *ctx)
{
    u_char     *q;
    ngx_str_t   uri, args;

    uri = ctx->redirect;

    /* ctx is zeroed by either redirect */

    if (uri.data[0] == '@') {
        return ngx_http_named_location(r, &uri);
    }

    /* a path without a query string keeps the request's, as nginx's own
     * rewrite does and the original did */
    args = r->args;

    q = ngx_strlchr(uri.data, uri.data + uri.len, '?');
    if (q != NULL) {
        args.data = q + 1;
        args.len = uri.data + uri.len - args.data;
        uri.len = q - uri.data;
    }

    return ngx_http_internal_redirect(r, &uri, &args);
}


/*
 * A script that has written output has answered, whatever it returned (the
 * rule on Apache too); declining after output says the script meant
 * something else, so it is logged.
 */
static void
ngx_http_mruby_check_declined_output(ngx_http_request_t *r,
    ngx_http_mruby_ctx_t *ctx, mrb_int result, unsigned returned)
{
    if (returned && result == NGX_DECLINED && ctx->out != NULL) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "mruby: the script wrote output and returned "
                      "DECLINED: the output is the response");
    }
}


/*
 * What a script in a phase before content leaves to nginx: a response it
 * wrote, a redirect, a status code to answer with, or "go on".
 */
ngx_int_t
ngx_http_mruby_phase_done(ngx_http_request_t *r, ngx_http_mruby_ctx_t *ctx,
    ngx_http_mruby_phase_e phase, mrb_int result, unsigned returned)
{
    ngx_int_t  rc;

    ngx_http_mruby_check_declined_output(r, ctx, result, returned);

    if (ctx->redirect.len) {
        rc = ngx_http_mruby_internal_redirect(r, ctx);
        ngx_http_finalize_request(r, rc);
        return NGX_DONE;
    }

    if (ctx->out != NULL || r->header_sent) {
        rc = ngx_http_mruby_send(r, ctx, result);
        ngx_http_finalize_request(r, rc);
        return NGX_DONE;
    }

    switch (result) {

    case NGX_OK:
    case NGX_HTTP_OK:
        /* in the access phase: granted; elsewhere: go on */
        return (phase == NGX_HTTP_MRUBY_ACCESS) ? NGX_OK : NGX_DECLINED;

    case NGX_DECLINED:
    case NGX_AGAIN:
    case NGX_DONE:
        return NGX_DECLINED;

    case NGX_ERROR:
        return NGX_ERROR;

    default:
        if (mrb_http_valid_final_status(result)) {
            return (ngx_int_t) result;
        }

        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "mruby: invalid return code %i", (ngx_int_t) result);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
}


static void
ngx_http_mruby_body_read(ngx_http_request_t *r)
{
    ngx_http_mruby_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_mruby_module);

    ctx->body_read = 1;

    /* ngx_http_read_client_request_body() counted us as a user */
    r->main->count--;

    if (ctx->body_waiting) {
        ctx->body_waiting = 0;
        ngx_http_core_run_phases(r);
    }
}


/*
 * mruby_request_body_limit: NGX_OK, or 413 when the body is larger, known
 * from Content-Length before it is read and counted once it is (chunked).
 */
static ngx_int_t
ngx_http_mruby_body_limit(ngx_http_request_t *r)
{
    off_t                       len;
    ngx_chain_t                *cl;
    ngx_http_mruby_loc_conf_t  *mlcf;

    mlcf = ngx_http_get_module_loc_conf(r, ngx_http_mruby_module);

    if (mlcf->body_limit == 0) {
        return NGX_OK;
    }

    len = r->headers_in.content_length_n;

    if (r->request_body != NULL && r->request_body->bufs != NULL) {
        len = 0;

        for (cl = r->request_body->bufs; cl; cl = cl->next) {
            len += ngx_buf_size(cl->buf);
        }
    }

    if (len <= mlcf->body_limit) {
        return NGX_OK;
    }

    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "mruby: the request body (%O bytes) is larger than "
                  "mruby_request_body_limit (%O)", len, mlcf->body_limit);

    return NGX_HTTP_REQUEST_ENTITY_TOO_LARGE;
}


/*
 * mruby_enable_read_request_body before a script of a phase before
 * content: NGX_OK once the body is there, NGX_DONE while it is coming (the
 * phase is run again then), or an error status.
 */
static ngx_int_t
ngx_http_mruby_read_body(ngx_http_request_t *r, ngx_http_mruby_ctx_t *ctx)
{
    ngx_int_t  rc;

    if (ctx->body_read) {
        return ngx_http_mruby_body_limit(r);
    }

    if (ctx->body_waiting) {
        return NGX_DONE;
    }

    rc = ngx_http_mruby_body_limit(r);
    if (rc != NGX_OK) {
        return rc;
    }

    r->request_body_in_single_buf = 1;

    rc = ngx_http_read_client_request_body(r, ngx_http_mruby_body_read);

    if (rc == NGX_ERROR || rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    if (rc == NGX_AGAIN) {
        ctx->body_waiting = 1;
        return NGX_DONE;
    }

    return ngx_http_mruby_body_limit(r);
}


/*
 * Runs s in phase, with the request's ctx (NULL in the log phase): NGX_OK
 * and run->result, NGX_AGAIN when the script waits (a phase up to content:
 * its data lives in ctx, and run->waiting is the waiting run), or the
 * status to end the phase with.
 */
static ngx_int_t
ngx_http_mruby_phase_run(ngx_http_request_t *r, ngx_mruby_script_t *s,
    ngx_http_mruby_phase_e phase, ngx_http_mruby_ctx_t *ctx, mrb_int dflt,
    mrb_run_rec *run)
{
    ngx_int_t                   rc;
    ngx_http_mruby_run_data_t   local, *data;

    data = (ctx != NULL && phase <= NGX_HTTP_MRUBY_CONTENT) ? &ctx->data
                                                            : &local;
    ngx_memzero(data, sizeof(ngx_http_mruby_run_data_t));
    data->phase = phase;
    data->ctx = ctx;

    rc = ngx_http_mruby_run(r, s, data, run, dflt);

    if (rc == NGX_AGAIN) {
        return NGX_AGAIN;
    }

    run->data = NULL;  /* local is gone with this frame */

    if (rc != NGX_OK) {
        return r->header_sent ? NGX_ERROR : NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return NGX_OK;
}


/*
 * The rewrite phases: the block's script, then its mruby_set scripts that
 * may wait (ngx_http_mruby_sets_run), before nginx's rewrite directives.
 */
static ngx_int_t
ngx_http_mruby_rewrite_phase(ngx_http_request_t *r,
    ngx_http_mruby_phase_e phase)
{
    ngx_int_t                   rc;
    ngx_http_mruby_ctx_t       *ctx;
    ngx_http_mruby_loc_conf_t  *mlcf;

    mlcf = ngx_http_get_module_loc_conf(r, ngx_http_mruby_module);

    if (mlcf->sets == NULL) {
        return ngx_http_mruby_phase(r, phase);
    }

    ctx = ngx_http_mruby_get_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx->resumed && ctx->wait_phase == phase && ctx->wait_set != NULL) {
        /* an mruby_set script waited and has ended: the next ones */
        ctx->resumed = 0;
        ctx->wait_set = NULL;

    } else {
        rc = ngx_http_mruby_phase(r, phase);
        if (rc != NGX_DECLINED) {
            return rc;
        }
    }

    return ngx_http_mruby_sets_run(r, ctx, phase);
}


static ngx_int_t
ngx_http_mruby_phase(ngx_http_request_t *r, ngx_http_mruby_phase_e phase)
{
    mrb_run_rec                 run;
    ngx_int_t                   rc;
    ngx_mruby_script_t         *s;
    ngx_http_mruby_ctx_t       *ctx;
    ngx_http_mruby_loc_conf_t  *mlcf;

    mlcf = ngx_http_get_module_loc_conf(r, ngx_http_mruby_module);

    s = mlcf->handlers[phase];
    if (s == NULL) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_mruby_get_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx->resumed && ctx->wait_phase == phase) {
        /* the script waited and has ended: nginx runs the phase again */
        ctx->resumed = 0;
        if (ctx->resumed_status != NGX_OK) {
            return ctx->resumed_status;
        }
        return ngx_http_mruby_phase_done(r, ctx, phase, ctx->resumed_result,
                                         ctx->resumed_returned);
    }

    if (mlcf->read_body && phase != NGX_HTTP_MRUBY_POST_READ) {
        rc = ngx_http_mruby_read_body(r, ctx);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    rc = ngx_http_mruby_phase_run(r, s, phase, ctx, NGX_DECLINED, &run);

    if (rc == NGX_AGAIN) {
        return ngx_http_mruby_wait_begin(r, ctx, phase, &run);
    }

    if (rc != NGX_OK) {
        return rc;
    }

    return ngx_http_mruby_phase_done(r, ctx, phase, run.result, run.returned);
}


/* The handlers of the phases before content, one per phase. */
#define ngx_http_mruby_phase_handler(name, phase)                             \
    static ngx_int_t                                                          \
    name(ngx_http_request_t *r)                                               \
    {                                                                         \
        return ngx_http_mruby_phase(r, phase);                                \
    }

ngx_http_mruby_phase_handler(ngx_http_mruby_post_read_handler,
                             NGX_HTTP_MRUBY_POST_READ)

static ngx_int_t
ngx_http_mruby_server_rewrite_handler(ngx_http_request_t *r)
{
    return ngx_http_mruby_rewrite_phase(r, NGX_HTTP_MRUBY_SERVER_REWRITE);
}


static ngx_int_t
ngx_http_mruby_rewrite_handler(ngx_http_request_t *r)
{
    return ngx_http_mruby_rewrite_phase(r, NGX_HTTP_MRUBY_REWRITE);
}

ngx_http_mruby_phase_handler(ngx_http_mruby_access_handler,
                             NGX_HTTP_MRUBY_ACCESS)


/* mruby_add_handler: whether the URI names a script (ends in .rb). */
static ngx_int_t
ngx_http_mruby_uri_is_script(ngx_http_request_t *r)
{
    return r->uri.len >= 4
           && ngx_strncmp(r->uri.data + r->uri.len - 3, ".rb", 3) == 0;
}


/*
 * mruby_add_handler: the script is the .rb file the URI maps to, cached
 * for the life of the worker with the block's policy.  NULL: not ours.
 */
static ngx_mruby_script_t *
ngx_http_mruby_uri_script(ngx_http_request_t *r,
    ngx_http_mruby_loc_conf_t *mlcf, ngx_int_t *status)
{
    char                 err[MRB_ERR_MSG_LEN];
    size_t               root;
    ngx_str_t            path;
    ngx_file_info_t      fi;
    ngx_mruby_script_t  *s;

    if (!ngx_http_mruby_uri_is_script(r)) {
        return NULL;
    }

    if (ngx_http_map_uri_to_path(r, &path, &root, 0) == NULL) {
        *status = NGX_HTTP_INTERNAL_SERVER_ERROR;
        return NULL;
    }

    if (ngx_file_info(path.data, &fi) == NGX_FILE_ERROR
        || !ngx_is_file(&fi))
    {
        *status = NGX_HTTP_NOT_FOUND;
        return NULL;
    }

    s = ngx_pcalloc(r->pool, sizeof(ngx_mruby_script_t));
    if (s == NULL) {
        *status = NGX_HTTP_INTERNAL_SERVER_ERROR;
        return NULL;
    }

    s->script = mrb_script_for_file((char *) path.data,
                                    mlcf->cache == NGX_MRUBY_CACHE_UNSET
                                    ? MRB_CACHE_STAT
                                    : (mrb_cache_policy) mlcf->cache,
                                    err, sizeof(err));
    if (s->script == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0, "mruby: %s", err);
        *status = NGX_HTTP_INTERNAL_SERVER_ERROR;
        return NULL;
    }

    return s;
}


static ngx_int_t
ngx_http_mruby_content_run(ngx_http_request_t *r)
{
    mrb_run_rec                 run;
    ngx_int_t                   status;
    ngx_mruby_script_t         *s;
    ngx_http_mruby_ctx_t       *ctx;
    ngx_http_mruby_loc_conf_t  *mlcf;

    mlcf = ngx_http_get_module_loc_conf(r, ngx_http_mruby_module);

    s = mlcf->handlers[NGX_HTTP_MRUBY_CONTENT];

    if (s == NULL) {
        status = NGX_DECLINED;
        s = ngx_http_mruby_uri_script(r, mlcf, &status);
        if (s == NULL) {
            return status;
        }
    }

    ctx = ngx_http_mruby_get_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    status = ngx_http_mruby_phase_run(r, s, NGX_HTTP_MRUBY_CONTENT, ctx,
                                      NGX_OK, &run);

    if (status == NGX_AGAIN) {
        return ngx_http_mruby_wait_begin(r, ctx, NGX_HTTP_MRUBY_CONTENT, &run);
    }

    if (status != NGX_OK) {
        return status;
    }

    return ngx_http_mruby_content_done(r, ctx, run.result, run.returned);
}


/* What a content script that ended with result leaves to nginx. */
ngx_int_t
ngx_http_mruby_content_done(ngx_http_request_t *r, ngx_http_mruby_ctx_t *ctx,
    mrb_int result, unsigned returned)
{
    ngx_http_mruby_check_declined_output(r, ctx, result, returned);

    if (ctx->redirect.len) {
        return ngx_http_mruby_internal_redirect(r, ctx);
    }

    if (ctx->out != NULL || r->header_sent) {
        return ngx_http_mruby_send(r, ctx, result);
    }

    if (returned && result == NGX_HTTP_OK) {
        /* the original's answer: HTTP_OK promises a body (Nginx::OK, or
         * no return at all, is an empty 200) */
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "mruby: status code is 200, but response body is "
                      "empty: 500 instead");
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    switch (result) {

    case NGX_OK:
    case NGX_DONE:
        /* a script that wrote nothing: an empty response */
        return ngx_http_mruby_send(r, ctx, result);

    case NGX_DECLINED:
        /* the next content handler (static files, index, ...) */
        return NGX_DECLINED;

    case NGX_ERROR:
        return NGX_ERROR;

    default:
        if (result >= 200 && result < 300
            && result != NGX_HTTP_CREATED
            && result != NGX_HTTP_NO_CONTENT)
        {
            return ngx_http_mruby_send(r, ctx, result);
        }

        if (mrb_http_valid_final_status(result)) {
            /* nginx answers: its error page, a redirect with Location */
            return (ngx_int_t) result;
        }

        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "mruby: invalid return code %i",
                      (ngx_int_t) result);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
}


/*
 * The body is there: run the script.  A script that declines leaves the
 * request to the next content handler: step past ours before the phases
 * run again, or they would start at this handler, whose body is read, and
 * call it back without end.
 */
static void
ngx_http_mruby_content_body_read(ngx_http_request_t *r)
{
    ngx_int_t  rc;

    rc = ngx_http_mruby_body_limit(r);

    if (rc != NGX_OK) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    rc = ngx_http_mruby_content_run(r);

    if (rc != NGX_DECLINED) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    /* the next handler's answer is finalized by the content phase, and
       that stands for the reference the body reading took */

    r->phase_handler++;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
}


static ngx_int_t
ngx_http_mruby_content_handler(ngx_http_request_t *r)
{
    ngx_int_t                   rc;
    ngx_http_mruby_loc_conf_t  *mlcf;

    mlcf = ngx_http_get_module_loc_conf(r, ngx_http_mruby_module);

    /* no script will run: leave the body to the handler that answers */

    if (mlcf->handlers[NGX_HTTP_MRUBY_CONTENT] == NULL
        && !(mlcf->add_handler && ngx_http_mruby_uri_is_script(r)))
    {
        return NGX_DECLINED;
    }

    if (!mlcf->read_body) {
        return ngx_http_mruby_content_run(r);
    }

    rc = ngx_http_mruby_body_limit(r);
    if (rc != NGX_OK) {
        return rc;
    }

    rc = ngx_http_read_client_request_body(r,
                                           ngx_http_mruby_content_body_read);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


static ngx_int_t
ngx_http_mruby_log_handler(ngx_http_request_t *r)
{
    mrb_run_rec                 run;
    ngx_mruby_script_t         *s;
    ngx_http_mruby_ctx_t       *ctx;
    ngx_http_mruby_loc_conf_t  *mlcf;

    mlcf = ngx_http_get_module_loc_conf(r, ngx_http_mruby_module);

    s = mlcf->handlers[NGX_HTTP_MRUBY_LOG];
    if (s == NULL) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_mruby_module);

    /* the response is gone: an error is only logged */

    (void) ngx_http_mruby_phase_run(r, s, NGX_HTTP_MRUBY_LOG, ctx, NGX_OK,
                                    &run);

    return NGX_OK;
}
