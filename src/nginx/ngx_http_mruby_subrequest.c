/*
 * Nginx::Async::HTTP: a script waits for a subrequest (any location: a
 * proxy_pass, a static file, another script) and reads its response.
 *
 * The subrequest is made in memory (NGX_HTTP_SUBREQUEST_IN_MEMORY): nginx's
 * postpone filter collects its body in one buffer of
 * subrequest_output_buffer_size (a larger body fails the subrequest, and
 * the script sees status 500... as nginx logs "too big subrequest
 * response").  When the subrequest is done nginx wakes its parent: the
 * parent's write handler (ngx_http_mruby_wait.c) resumes the script, which
 * reads status, headers and body from the finished subrequest (its memory
 * is the main request's pool).  An error status of the subrequest (404,
 * 503, 502 from an upstream that is down) is the script's to handle: it is
 * what `status` says.  When nginx ended the subrequest with its error page
 * the body is empty, as it was in the original: the page is nginx's, not
 * the location's answer.
 */

#include "ngx_http_mruby_module.h"
#include "mrb_api.h"
#include "mrb_http_check.h"
#include "mrb_wait.h"

#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/hash.h>
#include <mruby/string.h>
#include <mruby/variable.h>


static ngx_int_t
ngx_http_mruby_subrequest_done(ngx_http_request_t *sr, void *data,
    ngx_int_t rc)
{
    ngx_http_mruby_ctx_t  *ctx = data;

    /* called again after an error page: the first error status stays */
    if (rc >= NGX_HTTP_SPECIAL_RESPONSE && ctx->sr_rc == 0) {
        ctx->sr_rc = rc;
    }

    if (rc == NGX_ERROR && ctx->sr_rc == 0) {
        ctx->sr_rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->sr_done = 1;
    return rc;
}


/* "k=v&k2=v2" from a Hash, each key and value escaped as nginx does. */
static mrb_value
ngx_http_mruby_subrequest_args(mrb_state *mrb, mrb_value hash)
{
    mrb_value   keys, out, kv[2];
    mrb_int     i, j;
    size_t      len;
    uintptr_t   n;
    u_char     *p;

    keys = mrb_hash_keys(mrb, hash);
    out = mrb_str_new(mrb, NULL, 0);

    for (i = 0; i < RARRAY_LEN(keys); i++) {
        kv[0] = mrb_obj_as_string(mrb, RARRAY_PTR(keys)[i]);
        kv[1] = mrb_obj_as_string(mrb, mrb_hash_get(mrb, hash,
                                                    RARRAY_PTR(keys)[i]));
        if (i > 0) {
            mrb_str_cat_lit(mrb, out, "&");
        }

        for (j = 0; j < 2; j++) {
            if (j == 1) {
                mrb_str_cat_lit(mrb, out, "=");
            }

            n = ngx_escape_uri(NULL, (u_char *) RSTRING_PTR(kv[j]),
                               (size_t) RSTRING_LEN(kv[j]), NGX_ESCAPE_ARGS);
            len = (size_t) RSTRING_LEN(kv[j]) + 2 * n;

            /* grown first, filled after: nothing in between calls Ruby */
            mrb_str_resize(mrb, out, RSTRING_LEN(out) + (mrb_int) len);
            p = (u_char *) RSTRING_PTR(out) + RSTRING_LEN(out) - len;
            ngx_escape_uri(p, (u_char *) RSTRING_PTR(kv[j]),
                           (size_t) RSTRING_LEN(kv[j]), NGX_ESCAPE_ARGS);
        }
    }

    return out;
}


/* The finished subrequest as an Nginx::Async::HTTP::Response. */
static mrb_value
ngx_http_mruby_subrequest_response(mrb_state *mrb, ngx_http_request_t *sr,
    ngx_int_t rc)
{
    mrb_value         res, headers;
    ngx_uint_t        i, status;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;
    ngx_buf_t        *b;
    struct RClass    *http;

    http = mrb_module_get_under(mrb, mrb_module_get_under(mrb,
                                mrb_class_get(mrb, "Nginx"), "Async"),
                                "HTTP");
    res = mrb_obj_new(mrb, mrb_class_get_under(mrb, http, "Response"), 0,
                      NULL);

    status = sr->headers_out.status;
    if (rc != 0 && (status == 0 || status == NGX_HTTP_OK)) {
        status = (ngx_uint_t) rc;
    }
    if (status == 0) {
        status = NGX_HTTP_OK;
    }
    mrb_iv_set(mrb, res, mrb_intern_lit(mrb, "@status"),
               mrb_fixnum_value((mrb_int) status));

    /* rc: the subrequest ended in an error page (its handler's status) */
    b = (sr->out != NULL && rc == 0) ? sr->out->buf : NULL;
    mrb_iv_set(mrb, res, mrb_intern_lit(mrb, "@body"),
               (b != NULL && b->pos != NULL)
               ? mrb_str_new(mrb, (char *) b->pos, b->last - b->pos)
               : mrb_str_new(mrb, NULL, 0));

    headers = mrb_hash_new(mrb);
    mrb_iv_set(mrb, res, mrb_intern_lit(mrb, "@headers"), headers);

    if (sr->headers_out.content_type.len) {
        mrb_hash_set(mrb, headers, mrb_str_new_lit(mrb, "Content-Type"),
                     ngx_http_mruby_str(mrb, &sr->headers_out.content_type));
    }

    part = &sr->headers_out.headers.part;
    h = part->elts;

    for (i = 0; /* void */ ; i++) {
        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }
            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].hash == 0) {
            continue;
        }

        mrb_hash_set(mrb, headers, ngx_http_mruby_str(mrb, &h[i].key),
                     ngx_http_mruby_str(mrb, &h[i].value));
    }

    return res;
}


/*
 * Nginx::Async::HTTP.sub_request(path[, args]): waits for the response of
 * a subrequest to path (with args: a query String, or a Hash escaped into
 * one) and returns it (also Nginx::Async::HTTP.last_response).
 */
static mrb_value
ngx_http_mruby_sub_request(mrb_state *mrb, mrb_value self)
{
    mrb_run_rec                  *run;
    mrb_value                     path, args = mrb_nil_value();
    mrb_http_str                  u, a = { NULL, 0 };
    ngx_str_t                     uri, qs;
    ngx_http_request_t           *r, *sr;
    ngx_http_mruby_ctx_t         *ctx;
    ngx_http_mruby_run_data_t    *data;
    ngx_http_post_subrequest_t   *ps;

    mrb_get_args(mrb, "o|o", &path, &args);

    run = mrb_wait_check(mrb, "sub_request");
    r = run->request;
    data = run->data;
    ctx = data->ctx;

    if (mrb_hash_p(args)) {
        args = ngx_http_mruby_subrequest_args(mrb, args);
    }

    /* both converted before either pointer is taken: args.to_s may
       change path's buffer */
    path = mrb_obj_as_string(mrb, path);
    if (!mrb_nil_p(args)) {
        args = mrb_obj_as_string(mrb, args);
    }

    mrb_http_check_uri(mrb, "sub_request", path, &u);
    if (!mrb_nil_p(args)) {
        mrb_http_check_args(mrb, "sub_request", args, &a);
    }

    if (u.len == 0 || u.data[0] != '/') {
        mrb_raise(mrb, E_ARGUMENT_ERROR,
                  "sub_request: the path must start with /");
    }

    /* nothing below calls Ruby until the wait */

    uri.len = u.len;
    uri.data = ngx_pnalloc(r->pool, u.len);
    qs.len = a.len;
    qs.data = a.len ? ngx_pnalloc(r->pool, a.len) : NULL;
    ps = ngx_palloc(r->pool, sizeof(ngx_http_post_subrequest_t));

    if (uri.data == NULL || (a.len && qs.data == NULL) || ps == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "sub_request: out of memory");
    }

    ngx_memcpy(uri.data, u.data, u.len);
    if (a.len) {
        ngx_memcpy(qs.data, a.data, a.len);
    }

    ps->handler = ngx_http_mruby_subrequest_done;
    ps->data = ctx;

    ctx->sr_done = 0;
    ctx->sr_rc = 0;

    if (ngx_http_subrequest(r, &uri, a.len ? &qs : NULL, &sr, ps,
                            NGX_HTTP_SUBREQUEST_IN_MEMORY
                            | NGX_HTTP_SUBREQUEST_WAITED)
        != NGX_OK)
    {
        mrb_raise(mrb, E_RUNTIME_ERROR,
                  "sub_request: nginx cannot make the subrequest (too many "
                  "subrequests, or out of memory)");
    }

    ctx->sr_waiting = 1;
    mrb_wait(mrb);
    ctx->sr_waiting = 0;

    ctx->sr_last = sr;
    return ngx_http_mruby_subrequest_response(mrb, sr, ctx->sr_rc);
}


/* The request's last subrequest response, or nil (made again each time:
 * the request's memory holds it, not the interpreter, which other
 * requests share). */
static mrb_value
ngx_http_mruby_last_response(mrb_state *mrb, mrb_value self)
{
    mrb_run_rec                *run = mrb_interp_run(mrb);
    ngx_http_mruby_run_data_t  *data = run ? run->data : NULL;

    if (data == NULL || data->ctx == NULL || data->ctx->sr_last == NULL) {
        return mrb_nil_value();
    }

    return ngx_http_mruby_subrequest_response(mrb, data->ctx->sr_last,
                                              data->ctx->sr_rc);
}


static mrb_value
ngx_http_mruby_response_status(mrb_state *mrb, mrb_value self)
{
    return mrb_iv_get(mrb, self, mrb_intern_lit(mrb, "@status"));
}


static mrb_value
ngx_http_mruby_response_body(mrb_state *mrb, mrb_value self)
{
    return mrb_iv_get(mrb, self, mrb_intern_lit(mrb, "@body"));
}


static mrb_value
ngx_http_mruby_response_headers(mrb_state *mrb, mrb_value self)
{
    return mrb_iv_get(mrb, self, mrb_intern_lit(mrb, "@headers"));
}


static const mrb_api_method  ngx_http_mruby_async_http_methods[] = {
    { "sub_request", ngx_http_mruby_sub_request,
      MRB_ARGS_REQ(1) | MRB_ARGS_OPT(1) },
    { "last_response", ngx_http_mruby_last_response, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};

static const mrb_api_method  ngx_http_mruby_response_methods[] = {
    { "status", ngx_http_mruby_response_status, MRB_ARGS_NONE() },
    { "body", ngx_http_mruby_response_body, MRB_ARGS_NONE() },
    { "headers", ngx_http_mruby_response_headers, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


void
ngx_http_mruby_subrequest_define(mrb_state *mrb, struct RClass *nginx)
{
    struct RClass  *async, *http;

    async = mrb_module_get_under(mrb, nginx, "Async");
    http = mrb_api_define_module(mrb, async, "HTTP",
                                 ngx_http_mruby_async_http_methods);
    mrb_api_define_class(mrb, http, "Response", mrb->object_class,
                         ngx_http_mruby_response_methods);
}
