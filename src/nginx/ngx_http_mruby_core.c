/*
 * The Nginx class: what the core's server class does not already have
 * (send_header, status_code=, redirect, versions, constants), and the
 * helpers the Ruby API of the http module shares.
 */

#include "ngx_http_mruby_module.h"

#include <mruby/class.h>
#include <mruby/string.h>


mrb_value
ngx_http_mruby_str(mrb_state *mrb, ngx_str_t *s)
{
    return mrb_str_new(mrb, (const char *) s->data, (mrb_int) s->len);
}


/* Copies String v into pool memory (binary safe). */
ngx_int_t
ngx_http_mruby_pstr(ngx_pool_t *pool, mrb_value v, ngx_str_t *s)
{
    s->len = (size_t) RSTRING_LEN(v);

    if (s->len == 0) {
        s->data = (u_char *) "";
        return NGX_OK;
    }

    s->data = ngx_pnalloc(pool, s->len);
    if (s->data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(s->data, RSTRING_PTR(v), s->len);

    return NGX_OK;
}


/* Copies bytes a wire check accepted into r's pool, or raises naming
 * what (the setter). */
void
ngx_http_mruby_copy_checked(mrb_state *mrb, ngx_http_request_t *r,
    const mrb_http_str *from, ngx_str_t *to, const char *what)
{
    to->len = from->len;
    to->data = (u_char *) "";

    if (from->len == 0) {
        return;
    }

    to->data = ngx_pnalloc(r->pool, from->len);
    if (to->data == NULL) {
        mrb_raisef(mrb, E_RUNTIME_ERROR, "%s: out of memory", what);
    }

    ngx_memcpy(to->data, from->data, from->len);
}


ngx_http_request_t *
ngx_http_mruby_request(mrb_state *mrb)
{
    /* raises outside a request, e.g. in mruby_init_worker or TLS */
    return mrb_interp_request(mrb);
}


/* The current run's data if it runs in phase, or raises naming what. */
ngx_http_mruby_run_data_t *
ngx_http_mruby_run_data(mrb_state *mrb, ngx_http_mruby_phase_e phase,
    const char *what)
{
    mrb_run_rec                *run;
    ngx_http_mruby_run_data_t  *data;

    run = mrb_interp_run(mrb);
    data = run ? run->data : NULL;

    if (data == NULL || data->phase != phase) {
        mrb_raisef(mrb, E_RUNTIME_ERROR, "%s", what);
    }

    return data;
}


/* Request phases up to content may still answer: their run data. */
static ngx_http_mruby_run_data_t *
ngx_http_mruby_answering_run(mrb_state *mrb, const char *what)
{
    mrb_run_rec                *run;
    ngx_http_mruby_run_data_t  *data;

    run = mrb_interp_run(mrb);
    data = run ? run->data : NULL;

    if (run == NULL || run->request == NULL || data == NULL
        || data->ctx == NULL || data->phase > NGX_HTTP_MRUBY_CONTENT)
    {
        mrb_raisef(mrb, E_RUNTIME_ERROR,
                   "%s: only in a request phase up to content", what);
    }

    return data;
}


static mrb_value
ngx_http_mruby_send_header(mrb_state *mrb, mrb_value self)
{
    mrb_int              status = 0;
    ngx_int_t            rc;
    ngx_http_request_t  *r;

    mrb_get_args(mrb, "|i", &status);

    (void) ngx_http_mruby_answering_run(mrb, "Nginx.send_header");
    r = ngx_http_mruby_request(mrb);

    if (r->header_sent) {
        mrb_raise(mrb, E_RUNTIME_ERROR,
                  "Nginx.send_header: the header is already sent");
    }

    if (status != 0) {
        mrb_http_check_final_status(mrb, status);
        r->headers_out.status = (ngx_uint_t) status;

    } else if (r->headers_out.status == 0) {
        r->headers_out.status = NGX_HTTP_OK;
    }

    /* the body that rputs adds later has no known length */
    r->headers_out.content_length_n = -1;

    if (r->headers_out.content_type.len == 0) {
        (void) ngx_http_set_content_type(r);
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK) {
        mrb_raisef(mrb, E_RUNTIME_ERROR,
                   "Nginx.send_header: sending the header failed (%d)",
                   (int) rc);
    }

    return mrb_fixnum_value(rc);
}


/*
 * Nginx.status_code = n (and r.status = n): the response's status, and
 * what the script returns, as Nginx.return(n) (one function in the
 * original): a phase before content ends with it.
 */
mrb_value
ngx_http_mruby_set_status(mrb_state *mrb, mrb_value self)
{
    mrb_int              status;
    mrb_run_rec         *run;
    ngx_http_request_t  *r;

    mrb_get_args(mrb, "i", &status);
    mrb_http_check_final_status(mrb, status);

    r = ngx_http_mruby_request(mrb);
    r->headers_out.status = (ngx_uint_t) status;

    run = mrb_interp_run(mrb);
    run->result = status;
    run->returned = 1;

    return mrb_fixnum_value(status);
}


mrb_value
ngx_http_mruby_get_status(mrb_state *mrb, mrb_value self)
{
    ngx_http_request_t  *r;

    r = ngx_http_mruby_request(mrb);

    return mrb_fixnum_value((mrb_int) r->headers_out.status);
}


/*
 * Nginx.redirect(uri, code = 302): a URL goes to the client as a
 * redirect with Location; a path ("/...") or a named location ("@name")
 * is an internal redirect.
 */
static mrb_value
ngx_http_mruby_redirect(mrb_state *mrb, mrb_value self)
{
    mrb_int                     code = NGX_HTTP_MOVED_TEMPORARILY;
    mrb_run_rec                *run;
    mrb_value                   uri;
    ngx_str_t                   key, value;
    const char                 *q;
    mrb_http_str                target;
    ngx_http_request_t         *r;
    ngx_http_mruby_run_data_t  *data;

    mrb_get_args(mrb, "o|i", &uri, &code);

    data = ngx_http_mruby_answering_run(mrb, "Nginx.redirect");
    run = mrb_interp_run(mrb);
    r = run->request;

    /* a path is looked up again, decoded as r.uri is, with its query
     * string as r.args; a URL goes to the client as it is, and a named
     * location has neither control characters nor spaces either */
    if (mrb_string_p(uri) && RSTRING_LEN(uri) > 0
        && RSTRING_PTR(uri)[0] == '/')
    {
        mrb_http_check_uri(mrb, "Nginx.redirect target", uri, &target);
        q = memchr(target.data, '?', target.len);

        if (q != NULL
            && !mrb_http_valid_args(q + 1, target.data + target.len - q - 1))
        {
            mrb_raise(mrb, E_ARGUMENT_ERROR, "invalid Nginx.redirect target "
                      "(a space in its query string)");
        }

    } else {
        mrb_http_check_target(mrb, "Nginx.redirect target", uri, &target);
    }

    ngx_http_mruby_copy_checked(mrb, r, &target, &value, "Nginx.redirect");

    if (value.data[0] == '/' || value.data[0] == '@') {
        data->ctx->redirect = value;
        return self;
    }

    if (code < 300 || code > 399) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR,
                   "Nginx.redirect: %i is not a redirect status", code);
    }

    ngx_str_set(&key, "Location");

    if (ngx_http_mruby_headers_out_set(r, &key, &value) != NGX_OK) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Nginx.redirect: out of memory");
    }

    run->result = code;
    run->returned = 1;

    return self;
}


static mrb_value
ngx_http_mruby_nginx_version(mrb_state *mrb, mrb_value self)
{
    return mrb_str_new_lit(mrb, NGINX_VERSION);
}


/* The version number alone, as the original gave it (the same as
 * nginx_version). */
static mrb_value
ngx_http_mruby_server_version(mrb_state *mrb, mrb_value self)
{
    return mrb_str_new_lit(mrb, NGINX_VERSION);
}


/* Nginx.var: a new Nginx::Var (the original's shortcut). */
static mrb_value
ngx_http_mruby_var(mrb_state *mrb, mrb_value self)
{
    return mrb_obj_new(mrb, mrb_class_get_under(mrb, mrb_class_ptr(self),
                                                "Var"), 0, NULL);
}


static mrb_value
ngx_http_mruby_configure(mrb_state *mrb, mrb_value self)
{
    return mrb_str_new_lit(mrb, NGX_CONFIGURE);
}


static const mrb_api_method  ngx_http_mruby_class_methods[] = {
    { "send_header", ngx_http_mruby_send_header, MRB_ARGS_OPT(1) },
    { "status_code=", ngx_http_mruby_set_status, MRB_ARGS_REQ(1) },
    { "status_code", ngx_http_mruby_get_status, MRB_ARGS_NONE() },
    { "redirect", ngx_http_mruby_redirect, MRB_ARGS_ARG(1, 1) },
    { "nginx_version", ngx_http_mruby_nginx_version, MRB_ARGS_NONE() },
    { "server_version", ngx_http_mruby_server_version, MRB_ARGS_NONE() },
    { "configure", ngx_http_mruby_configure, MRB_ARGS_NONE() },
    { "var", ngx_http_mruby_var, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


/* the http module's codes, beside the ones it shares with stream */
static const mrb_api_const  ngx_http_mruby_consts[] = {
    { "HTTPS_CERT_ERROR", NGX_HTTPS_CERT_ERROR },
    { "HTTPS_NO_CERT", NGX_HTTPS_NO_CERT },
    { "HTTP_NGINX_CODES", NGX_HTTP_NGINX_CODES },
    MRB_API_CONST_END
};


void
ngx_http_mruby_nginx_define(mrb_state *mrb, struct RClass *nginx)
{
    ngx_mruby_define_codes(mrb, nginx);
    mrb_api_define_consts(mrb, nginx, ngx_http_mruby_consts);

    /* the original's truth values for nginx variables ($var = "1") */
    mrb_define_const(mrb, nginx, "TRUE", mrb_str_new_lit(mrb, "1"));
    mrb_define_const(mrb, nginx, "FALSE", mrb_str_new_lit(mrb, "0"));

    mrb_api_define_class_methods(mrb, nginx, ngx_http_mruby_class_methods);
}
