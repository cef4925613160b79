/*
 * mruby_output_header_filter and mruby_output_body_filter, and
 * Nginx::Filter.
 *
 * A body filter sees the whole body at once: the response's buffers are
 * copied and released as they come (so an upstream's buffers keep moving,
 * chunked or not) and the header is held back until the last one, when the
 * script runs.  So a script may change the body, its length and the
 * headers, and its exception still turns into a 500.
 */

#include "ngx_http_mruby_module.h"

#include <mruby/class.h>
#include <mruby/string.h>


typedef struct {
    ngx_chain_t   *body;          /* copies of the response's buffers */
    ngx_chain_t  **last;
    size_t         len;

    ngx_str_t      replaced;      /* Filter#body= */
    unsigned       is_replaced:1;

    unsigned       buffering:1;   /* the header waits for the body */
    unsigned       pass:1;        /* our own error response */
} ngx_http_mruby_filter_ctx_t;


static ngx_int_t ngx_http_mruby_filter_init(ngx_conf_t *cf);


static ngx_http_module_t  ngx_http_mruby_filter_module_ctx = {
    NULL,                                  /* preconfiguration */
    ngx_http_mruby_filter_init,            /* postconfiguration */

    NULL,                                  /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    NULL,                                  /* create location configuration */
    NULL                                   /* merge location configuration */
};


ngx_module_t  ngx_http_mruby_filter_module = {
    NGX_MODULE_V1,
    &ngx_http_mruby_filter_module_ctx,     /* module context */
    NULL,                                  /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;


/* Answers 500 instead of the response a filter script failed on. */
static ngx_int_t
ngx_http_mruby_filter_fail(ngx_http_request_t *r,
    ngx_http_mruby_filter_ctx_t *ctx)
{
    ctx->pass = 1;
    ctx->buffering = 0;

    return ngx_http_filter_finalize_request(r, &ngx_http_mruby_filter_module,
                                            NGX_HTTP_INTERNAL_SERVER_ERROR);
}


/*
 * Runs a filter script: NGX_OK, the response's status changed if it
 * returned one, or NGX_ERROR (logged).
 */
static ngx_int_t
ngx_http_mruby_filter_run(ngx_http_request_t *r, ngx_mruby_script_t *s,
    ngx_http_mruby_phase_e phase, ngx_http_mruby_filter_ctx_t *ctx)
{
    mrb_run_rec                run;
    ngx_int_t                  rc;
    ngx_http_mruby_run_data_t  data;

    ngx_memzero(&data, sizeof(data));
    data.phase = phase;
    data.filter = ctx;  /* Nginx::Filter, in the body filter only */

    rc = ngx_http_mruby_run(r, s, &data, &run, NGX_DECLINED);
    if (rc != NGX_OK) {
        return rc;
    }

    if (run.returned && run.result >= 100 && run.result < 1000) {
        r->headers_out.status = (ngx_uint_t) run.result;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_mruby_header_filter(ngx_http_request_t *r)
{
    ngx_mruby_script_t           *hs, *bs;
    ngx_http_mruby_loc_conf_t    *mlcf;
    ngx_http_mruby_filter_ctx_t  *ctx;

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    mlcf = ngx_http_get_module_loc_conf(r, ngx_http_mruby_module);

    hs = mlcf->handlers[NGX_HTTP_MRUBY_HEADER_FILTER];
    bs = mlcf->handlers[NGX_HTTP_MRUBY_BODY_FILTER];

    if (hs == NULL && bs == NULL) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_mruby_filter_module);

    if (ctx != NULL && ctx->pass) {
        return ngx_http_next_header_filter(r);
    }

    if (ctx == NULL) {
        ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_mruby_filter_ctx_t));
        if (ctx == NULL) {
            return NGX_ERROR;
        }

        ctx->last = &ctx->body;
        ngx_http_set_ctx(r, ctx, ngx_http_mruby_filter_module);
    }

    if (hs != NULL
        && ngx_http_mruby_filter_run(r, hs, NGX_HTTP_MRUBY_HEADER_FILTER, ctx)
           != NGX_OK)
    {
        return ngx_http_mruby_filter_fail(r, ctx);
    }

    if (bs == NULL) {
        return ngx_http_next_header_filter(r);
    }

    /*
     * The script may make a different body each time: the original's
     * validators would let a client or cache keep content it has never
     * seen (sub_filter drops them too), on a HEAD as on a GET.
     */
    ngx_http_clear_last_modified(r);
    ngx_http_clear_etag(r);

    if (r->header_only) {
        return ngx_http_next_header_filter(r);
    }

    ctx->buffering = 1;

    r->filter_need_in_memory = 1;
    r->allow_ranges = 0;

    ngx_http_clear_content_length(r);
    ngx_http_clear_accept_ranges(r);

    return NGX_OK;
}


/* Copies the data of in and marks it sent; *last when the body is whole. */
static ngx_int_t
ngx_http_mruby_filter_collect(ngx_http_request_t *r,
    ngx_http_mruby_filter_ctx_t *ctx, ngx_chain_t *in, ngx_uint_t *last)
{
    size_t        size;
    ngx_buf_t    *b, *copy;
    ngx_chain_t  *cl, *ln;

    for (cl = in; cl; cl = cl->next) {
        b = cl->buf;

        if (b->last_buf || b->last_in_chain) {
            *last = 1;
        }

        if (!ngx_buf_in_memory(b)) {
            if (ngx_buf_size(b) != 0) {
                ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                              "mruby body filter: a buffer not in memory");
                return NGX_ERROR;
            }

            continue;
        }

        size = b->last - b->pos;

        if (size) {
            copy = ngx_create_temp_buf(r->pool, size);
            ln = ngx_alloc_chain_link(r->pool);

            if (copy == NULL || ln == NULL) {
                return NGX_ERROR;
            }

            copy->last = ngx_cpymem(copy->pos, b->pos, size);

            ln->buf = copy;
            ln->next = NULL;
            *ctx->last = ln;
            ctx->last = &ln->next;
            ctx->len += size;
        }

        b->pos = b->last;

        if (b->in_file) {
            b->file_pos = b->file_last;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_mruby_filter_send(ngx_http_request_t *r,
    ngx_http_mruby_filter_ctx_t *ctx)
{
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t  *out, *cl;

    if (ctx->is_replaced || ctx->body == NULL) {
        b = ngx_calloc_buf(r->pool);
        out = ngx_alloc_chain_link(r->pool);

        if (b == NULL || out == NULL) {
            return NGX_ERROR;
        }

        if (ctx->is_replaced && ctx->replaced.len) {
            b->pos = ctx->replaced.data;
            b->last = ctx->replaced.data + ctx->replaced.len;
            b->memory = 1;
        }

        out->buf = b;
        out->next = NULL;

        r->headers_out.content_length_n = ctx->is_replaced
                                          ? (off_t) ctx->replaced.len : 0;

    } else {
        out = ctx->body;
        r->headers_out.content_length_n = (off_t) ctx->len;
    }

    for (cl = out; cl->next; cl = cl->next) { /* void */ }

    cl->buf->last_buf = 1;
    cl->buf->last_in_chain = 1;

    rc = ngx_http_next_header_filter(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    return ngx_http_next_body_filter(r, out);
}


static ngx_int_t
ngx_http_mruby_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_uint_t                    last;
    ngx_http_mruby_loc_conf_t    *mlcf;
    ngx_http_mruby_filter_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_mruby_filter_module);

    if (ctx == NULL || !ctx->buffering) {
        return ngx_http_next_body_filter(r, in);
    }

    last = 0;

    if (ngx_http_mruby_filter_collect(r, ctx, in, &last) != NGX_OK) {
        return NGX_ERROR;
    }

    mlcf = ngx_http_get_module_loc_conf(r, ngx_http_mruby_module);

    /* rather than hold a response of any size, answer 500 in its place
     * (its header waits for the body), as image_filter does past its
     * buffer */
    if (mlcf->filter_limit > 0 && (off_t) ctx->len > mlcf->filter_limit) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0, "mruby body "
                      "filter: the response body is larger than "
                      "mruby_output_body_filter_limit (%O bytes): answered "
                      "500 instead", mlcf->filter_limit);
        return ngx_http_mruby_filter_fail(r, ctx);
    }

    if (!last) {
        return NGX_OK;
    }

    ctx->buffering = 0;

    if (ngx_http_mruby_filter_run(r,
                                  mlcf->handlers[NGX_HTTP_MRUBY_BODY_FILTER],
                                  NGX_HTTP_MRUBY_BODY_FILTER, ctx)
        != NGX_OK)
    {
        return ngx_http_mruby_filter_fail(r, ctx);
    }

    return ngx_http_mruby_filter_send(r, ctx);
}


/*
 * nginx's not_modified filter comes before ours in the header filter chain
 * (a filter module of our kind is placed before the copy filter), so it
 * would answer 304 by the original's ETag or Last-Modified before the body
 * script has made the body.  A location with a body filter switches it off
 * before content is made, in the precontent phase.
 */
static ngx_int_t
ngx_http_mruby_filter_precontent(ngx_http_request_t *r)
{
    ngx_http_mruby_loc_conf_t  *mlcf;

    mlcf = ngx_http_get_module_loc_conf(r, ngx_http_mruby_module);

    if (mlcf->handlers[NGX_HTTP_MRUBY_BODY_FILTER] != NULL) {
        r->disable_not_modified = 1;
    }

    return NGX_DECLINED;
}


static ngx_int_t
ngx_http_mruby_filter_init(ngx_conf_t *cf)
{
    ngx_http_handler_pt         *h;
    ngx_http_core_main_conf_t   *cmcf;
    ngx_http_mruby_main_conf_t  *mmcf;

    mmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_mruby_module);

    if (mmcf->handlers & (1 << NGX_HTTP_MRUBY_HEADER_FILTER
                          | 1 << NGX_HTTP_MRUBY_BODY_FILTER))
    {
        ngx_http_next_header_filter = ngx_http_top_header_filter;
        ngx_http_top_header_filter = ngx_http_mruby_header_filter;

        ngx_http_next_body_filter = ngx_http_top_body_filter;
        ngx_http_top_body_filter = ngx_http_mruby_body_filter;
    }

    if (mmcf->handlers & (1 << NGX_HTTP_MRUBY_BODY_FILTER)) {
        cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

        h = ngx_array_push(&cmcf->phases[NGX_HTTP_PRECONTENT_PHASE].handlers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        *h = ngx_http_mruby_filter_precontent;
    }

    return NGX_OK;
}


/* Nginx::Filter */


static ngx_http_mruby_filter_ctx_t *
ngx_http_mruby_filter_ctx(mrb_state *mrb)
{
    ngx_http_mruby_run_data_t  *data;

    data = ngx_http_mruby_run_data(mrb, NGX_HTTP_MRUBY_BODY_FILTER,
               "Nginx::Filter: only in mruby_output_body_filter");

    return data->filter;
}


static mrb_value
ngx_http_mruby_filter_body(mrb_state *mrb, mrb_value self)
{
    char                         *p;
    mrb_value                     body;
    ngx_chain_t                  *cl;
    ngx_http_mruby_filter_ctx_t  *ctx;

    ctx = ngx_http_mruby_filter_ctx(mrb);

    if (ctx->is_replaced) {
        return ngx_http_mruby_str(mrb, &ctx->replaced);
    }

    body = mrb_str_new(mrb, NULL, (mrb_int) ctx->len);
    p = RSTRING_PTR(body);

    for (cl = ctx->body; cl; cl = cl->next) {
        p = (char *) ngx_cpymem(p, cl->buf->pos,
                                cl->buf->last - cl->buf->pos);
    }

    return body;
}


static mrb_value
ngx_http_mruby_filter_set_body(mrb_state *mrb, mrb_value self)
{
    mrb_value                     body;
    ngx_http_request_t           *r;
    ngx_http_mruby_filter_ctx_t  *ctx;

    body = mrb_obj_as_string(mrb, mrb_get_arg1(mrb));

    ctx = ngx_http_mruby_filter_ctx(mrb);
    r = ngx_http_mruby_request(mrb);

    if (ngx_http_mruby_pstr(r->pool, body, &ctx->replaced) != NGX_OK) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Nginx::Filter#body=: out of memory");
    }

    ctx->is_replaced = 1;

    return body;
}


/* output reads the body, and output(str), as in the original, sets it. */
static mrb_value
ngx_http_mruby_filter_output(mrb_state *mrb, mrb_value self)
{
    return mrb_get_argc(mrb) == 0 ? ngx_http_mruby_filter_body(mrb, self)
                                  : ngx_http_mruby_filter_set_body(mrb, self);
}


static const mrb_api_method  ngx_http_mruby_filter_methods[] = {
    { "body", ngx_http_mruby_filter_body, MRB_ARGS_NONE() },
    { "body=", ngx_http_mruby_filter_set_body, MRB_ARGS_REQ(1) },
    { "output", ngx_http_mruby_filter_output, MRB_ARGS_OPT(1) },
    { "output=", ngx_http_mruby_filter_set_body, MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};


void
ngx_http_mruby_filter_define(mrb_state *mrb, struct RClass *nginx)
{
    mrb_api_define_class(mrb, nginx, "Filter", NULL,
                         ngx_http_mruby_filter_methods);
}
