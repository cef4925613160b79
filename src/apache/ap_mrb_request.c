/*
 * Apache::Request: a handle to the request the current script runs for.
 *
 * The object holds no pointer: every method asks the core for the current
 * run's request, so an object kept past its request cannot reach freed
 * memory, it only raises outside a request.
 */

#include <stddef.h>
#include <string.h>

#include <http_core.h>
#include <http_protocol.h>
#include <http_request.h>

#include <mruby.h>
#include <mruby/class.h>
#include <mruby/string.h>

#include "ap_mrb.h"

APLOG_USE_MODULE(mruby);


/* What a request keeps for its scripts, in its own pool. */
ap_mrb_req_ctx *
ap_mrb_req_ctx_get(request_rec *r)
{
    ap_mrb_req_ctx  *ctx = ap_get_module_config(r->request_config,
                                                &mruby_module);

    if (ctx == NULL) {
        ctx = apr_pcalloc(r->pool, sizeof(ap_mrb_req_ctx));
        ap_set_module_config(r->request_config, &mruby_module, ctx);
    }

    return ctx;
}


/*
 * The request's fields read through one getter per type, with the field's
 * offset in the table below: a String field (nil when NULL), an Integer
 * one (the flags as Integers, as the original gave them: 0 is true in
 * Ruby, compare with 1).
 */
AP_MRB_STR_FIELD_GETTER(ap_mrb_get_str_field, ap_mrb_request)


static mrb_value
ap_mrb_get_int_field(mrb_state *mrb, mrb_value self)
{
    size_t        offset = mrb_api_field_offset(mrb);
    request_rec  *r = ap_mrb_request(mrb);

    return mrb_int_value(mrb, *(int *) ((char *) r + offset));
}


/* String fields' setters; "nilable" ones may be set to nil (NULL). */
#define AP_MRB_STR_SET(field, spec)                                           \
    static mrb_value                                                          \
    ap_mrb_set_##field(mrb_state *mrb, mrb_value self)                        \
    {                                                                         \
        request_rec  *r = ap_mrb_request(mrb);                                \
        mrb_value     v;                                                      \
                                                                              \
        mrb_get_args(mrb, spec, &v);                                          \
        r->field = mrb_nil_p(v) ? NULL : ap_mrb_pstr(mrb, r->pool, v);        \
        return v;                                                             \
    }

/*
 * Fields that reach the client or, through mod_proxy, a backend: set
 * through a wire check of mrb_http_check.h (check), nil allowed when
 * nil_ok.
 */
#define AP_MRB_STR_SET_CHECKED(field, nil_ok, check, what)                    \
    static mrb_value                                                          \
    ap_mrb_set_##field(mrb_state *mrb, mrb_value self)                        \
    {                                                                         \
        request_rec   *r = ap_mrb_request(mrb);                               \
        mrb_value      v = mrb_get_arg1(mrb);                                 \
        mrb_http_str   s;                                                     \
                                                                              \
        if ((nil_ok) && mrb_nil_p(v)) {                                       \
            r->field = NULL;                                                  \
            return v;                                                         \
        }                                                                     \
                                                                              \
        check(mrb, what, v, &s);                                              \
        r->field = apr_pstrmemdup(r->pool, s.data, s.len);                    \
        return v;                                                             \
    }

/*
 * r.filename: a path, or "proxy:URL", which hands the request to mod_proxy
 * and whose URL goes into the request line to the backend: checked as a
 * redirect target (no space either), since a script may also turn off
 * mod_proxy's escaping of it (notes["proxy-nocanon"]).
 */
static void
ap_mrb_check_filename(mrb_state *mrb, const char *what, mrb_value v,
    mrb_http_str *out)
{
    v = mrb_obj_as_string(mrb, v);

    if (RSTRING_LEN(v) > 6 && memcmp(RSTRING_PTR(v), "proxy:", 6) == 0) {
        mrb_http_check_target(mrb, what, v, out);
    } else {
        mrb_http_check_uri(mrb, what, v, out);
    }
}

AP_MRB_STR_SET(the_request, "S")
AP_MRB_STR_SET(protocol, "S")
AP_MRB_STR_SET(user, "S!")
AP_MRB_STR_SET(ap_auth_type, "S!")
AP_MRB_STR_SET_CHECKED(unparsed_uri, 0, mrb_http_check_target,
                       "unparsed_uri=")
AP_MRB_STR_SET_CHECKED(uri, 0, mrb_http_check_uri, "uri=")
AP_MRB_STR_SET_CHECKED(filename, 0, ap_mrb_check_filename, "filename=")
AP_MRB_STR_SET(canonical_filename, "S!")
AP_MRB_STR_SET_CHECKED(path_info, 1, mrb_http_check_uri, "path_info=")
AP_MRB_STR_SET_CHECKED(args, 1, mrb_http_check_args, "args=")
AP_MRB_STR_SET_CHECKED(hostname, 0, mrb_http_check_header_value, "Host")
AP_MRB_STR_SET_CHECKED(status_line, 1, mrb_http_check_header_value,
                       "status line")
AP_MRB_STR_SET_CHECKED(range, 1, mrb_http_check_header_value, "Range")
AP_MRB_STR_SET(handler, "S!")
AP_MRB_STR_SET_CHECKED(content_encoding, 1, mrb_http_check_header_value,
                       "Content-Encoding")
/* the default handler appends it to the ETag it sends */
AP_MRB_STR_SET_CHECKED(vlist_validator, 1, mrb_http_check_header_value,
                       "ETag")


/* Setting the method keeps method_number in step, as Apache reads both.
 * A method is a token (mod_proxy sends it on the request line). */
static mrb_value
ap_mrb_set_method(mrb_state *mrb, mrb_value self)
{
    request_rec  *r = ap_mrb_request(mrb);
    mrb_value     v;

    mrb_get_args(mrb, "S", &v);

    if (!mrb_http_valid_header_name(RSTRING_PTR(v), RSTRING_LEN(v))) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "invalid method= (want an RFC 9110 "
                  "token)");
    }

    r->method = ap_mrb_pstr(mrb, r->pool, v);
    r->method_number = ap_method_number_of(r->method);
    return v;
}


/* Through Apache, which also tells the filters the type changed. */
static mrb_value
ap_mrb_set_content_type(mrb_state *mrb, mrb_value self)
{
    request_rec   *r = ap_mrb_request(mrb);
    mrb_value      v = mrb_get_arg1(mrb);
    mrb_http_str   type;

    mrb_http_check_header_value(mrb, "Content-Type", v, &type);
    ap_set_content_type(r, apr_pstrmemdup(r->pool, type.data, type.len));
    return v;
}


static mrb_value
ap_mrb_get_document_root(mrb_state *mrb, mrb_value self)
{
    return ap_mrb_str(mrb, ap_document_root(ap_mrb_request(mrb)));
}


/* For this request only (as mass virtual hosting needs), not the server. */
static mrb_value
ap_mrb_set_document_root(mrb_state *mrb, mrb_value self)
{
    request_rec  *r = ap_mrb_request(mrb);
    mrb_value     v;

    mrb_get_args(mrb, "S", &v);
    ap_set_document_root(r, ap_mrb_pstr(mrb, r->pool, v));
    return v;
}


static mrb_value
ap_mrb_get_content_length(mrb_state *mrb, mrb_value self)
{
    return mrb_int_value(mrb, (mrb_int) ap_mrb_request(mrb)->clength);
}


static mrb_value
ap_mrb_set_content_length(mrb_state *mrb, mrb_value self)
{
    mrb_int  len;

    mrb_get_args(mrb, "i", &len);

    if (len < 0) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "content_length must not be "
                  "negative");
    }

    ap_set_content_length(ap_mrb_request(mrb), (apr_off_t) len);
    return mrb_int_value(mrb, len);
}


/* A 1xx here would go out as the response's status, then the body. */
static mrb_value
ap_mrb_set_status(mrb_state *mrb, mrb_value self)
{
    mrb_int  v;

    mrb_get_args(mrb, "i", &v);
    mrb_http_check_final_status(mrb, v);
    ap_mrb_request(mrb)->status = (int) v;
    return mrb_int_value(mrb, v);
}


static mrb_value
ap_mrb_set_proxyreq(mrb_state *mrb, mrb_value self)
{
    mrb_int  v;

    mrb_get_args(mrb, "i", &v);
    ap_mrb_request(mrb)->proxyreq = (int) v;
    return mrb_int_value(mrb, v);
}


static mrb_value
ap_mrb_get_scheme(mrb_state *mrb, mrb_value self)
{
    return ap_mrb_str(mrb, ap_http_scheme(ap_mrb_request(mrb)));
}


/* When the request line was read, as seconds since the epoch. */
static mrb_value
ap_mrb_get_request_time(mrb_state *mrb, mrb_value self)
{
    apr_time_t  t = ap_mrb_request(mrb)->request_time;

    return mrb_float_value(mrb, (mrb_float) t / APR_USEC_PER_SEC);
}


/* Seconds spent on the request so far. */
static mrb_value
ap_mrb_get_response_time(mrb_state *mrb, mrb_value self)
{
    apr_time_t  t = apr_time_now() - ap_mrb_request(mrb)->request_time;

    return mrb_float_value(mrb, (mrb_float) t / APR_USEC_PER_SEC);
}


/*
 * Reads the request body into ctx: OK, or the HTTP status to answer (413
 * past mrubyRequestBodyLimit, which is known before reading when the
 * client sent a Content-Length, or past Apache's LimitRequestBody).
 * Through the input filters, as ap_get_client_block, but keeping the
 * status their error maps to, which it drops (500 for one of their own,
 * such as a failed mrubyInputFilter script).
 */
static int
ap_mrb_read_body(request_rec *r, ap_mrb_req_ctx *ctx, apr_off_t limit)
{
    apr_bucket_brigade  *in, *body;
    apr_bucket          *e;
    apr_status_t         rv;
    apr_off_t            total;
    const char          *data;
    apr_size_t           len;
    int                  rc, eos;

    rc = ap_setup_client_block(r, REQUEST_CHUNKED_DECHUNK);
    if (rc != OK) {
        return rc;
    }

    if (limit > 0 && r->remaining > limit) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "the request body "
                      "(%" APR_OFF_T_FMT " bytes) is larger than "
                      "mrubyRequestBodyLimit (%" APR_OFF_T_FMT ")",
                      r->remaining, limit);
        return HTTP_REQUEST_ENTITY_TOO_LARGE;
    }

    if (!ap_should_client_block(r)) {
        return OK;
    }

    in = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    body = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    total = 0;
    eos = 0;
    rc = OK;

    while (!eos && rc == OK) {
        rv = ap_get_brigade(r->input_filters, in, AP_MODE_READBYTES,
                            APR_BLOCK_READ, HUGE_STRING_LEN);
        if (rv != APR_SUCCESS) {
            rc = ap_map_http_request_error(rv, HTTP_INTERNAL_SERVER_ERROR);
            break;
        }

        for (e = APR_BRIGADE_FIRST(in); e != APR_BRIGADE_SENTINEL(in);
             e = APR_BUCKET_NEXT(e))
        {
            if (APR_BUCKET_IS_EOS(e)) {
                eos = 1;
                break;
            }

            if (APR_BUCKET_IS_METADATA(e)) {
                continue;
            }

            rv = apr_bucket_read(e, &data, &len, APR_BLOCK_READ);
            if (rv != APR_SUCCESS) {
                rc = ap_map_http_request_error(rv,
                                               HTTP_INTERNAL_SERVER_ERROR);
                break;
            }

            total += len;

            if (limit > 0 && total > limit) {
                ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "the request "
                              "body is larger than mrubyRequestBodyLimit "
                              "(%" APR_OFF_T_FMT ")", limit);
                rc = HTTP_REQUEST_ENTITY_TOO_LARGE;
                break;
            }

            apr_brigade_write(body, NULL, NULL, data, len);
        }

        apr_brigade_cleanup(in);
    }

    if (rc == OK
        && apr_brigade_pflatten(body, &ctx->body, &ctx->body_len, r->pool)
           != APR_SUCCESS)
    {
        rc = HTTP_INTERNAL_SERVER_ERROR;
    }

    apr_brigade_destroy(in);
    apr_brigade_destroy(body);
    return rc;
}


/*
 * The request body, read from the client on first use and kept for the
 * request's other scripts: a body can be read only once.  A body that
 * could not be read raises each time, and the request is answered with
 * the status reading it gave (413 past a limit) unless the script rescues.
 */
static mrb_value
ap_mrb_get_body(mrb_state *mrb, mrb_value self)
{
    request_rec         *r = ap_mrb_request(mrb);
    ap_mrb_req_ctx      *ctx = ap_mrb_req_ctx_get(r);
    ap_mrb_run_kind     *kind;
    int                  rc;

    /* the body is what the filter is making: it cannot read it */
    kind = mrb_interp_run(mrb)->data;
    if (kind != NULL && *kind == AP_MRB_RUN_INPUT_FILTER) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "r.body is the filter's input in an "
                  "mrubyInputFilter script: use Apache::Filter#body");
    }

    if (!ctx->body_read && ctx->body_status == 0) {
        rc = ap_mrb_read_body(r, ctx, ap_mrb_body_limit(r));

        if (rc == OK) {
            ctx->body_read = 1;
        } else {
            ctx->body_status = rc;
            r->connection->keepalive = AP_CONN_CLOSE;
        }
    }

    if (ctx->body_status != 0) {
        mrb_raisef(mrb, E_RUNTIME_ERROR, "error reading the request body "
                   "(HTTP status %d%s)", ctx->body_status,
                   ctx->body_status == HTTP_REQUEST_ENTITY_TOO_LARGE
                   ? ": larger than mrubyRequestBodyLimit or LimitRequestBody"
                   : "");
    }

    return mrb_str_new(mrb, ctx->body, (mrb_int) ctx->body_len);
}


/*
 * r.headers_in, r.notes, r.finfo ...: a new object of the class the method
 * was defined with (ap_mrb_define_request), found without a lookup by
 * name.
 */
static mrb_value
ap_mrb_request_object(mrb_state *mrb, mrb_value self)
{
    (void) ap_mrb_request(mrb);
    mrb_api_no_args(mrb);

    return mrb_obj_new(mrb, mrb_class_ptr(mrb_api_method_value(mrb)), 0,
                       NULL);
}

/* The methods of Apache::Request that answer an object of a class under
 * Apache, and that class. */
static const struct {
    const char  *name;
    const char  *class_name;
} ap_mrb_request_objects[] = {
    { "headers_in", "Headers_in" },
    { "headers_out", "Headers_out" },
    { "err_headers_out", "Err_headers_out" },
    { "notes", "Notes" },
    { "subprocess_env", "Subprocess_env" },
    { "finfo", "Finfo" },
};


/* As the original: true when r->main is set, that is for a subrequest
 * (the same as sub_request?; the name reads the other way). */
static mrb_value
ap_mrb_is_main(mrb_state *mrb, mrb_value self)
{
    return mrb_bool_value(ap_mrb_request(mrb)->main != NULL);
}


static mrb_value
ap_mrb_is_sub_request(mrb_state *mrb, mrb_value self)
{
    return mrb_bool_value(ap_mrb_request(mrb)->main != NULL);
}


static mrb_value
ap_mrb_is_internal_redirect(mrb_state *mrb, mrb_value self)
{
    return mrb_bool_value(ap_mrb_request(mrb)->prev != NULL);
}


/* A request an internal redirect replaced (r->next set). */
static mrb_value
ap_mrb_is_external_redirect(mrb_state *mrb, mrb_value self)
{
    return mrb_bool_value(ap_mrb_request(mrb)->next != NULL);
}


/*
 * r.run_handler: runs the handler phase now (ap_invoke_handler), as the
 * original did, and returns its status; one that failed is logged and the
 * connection marked aborted, so nothing more is sent on it.
 */
static mrb_value
ap_mrb_run_handler(mrb_state *mrb, mrb_value self)
{
    request_rec  *r = ap_mrb_request(mrb);
    int           rc;

    rc = ap_invoke_handler(r);

    if (rc != OK && rc != DONE) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "run_handler: the "
                      "handler answered %d", rc);
        r->connection->aborted = 1;
    }

    return mrb_int_value(mrb, rc);
}


/* r.log(level, message): the error log, with this request's client. */
static mrb_value
ap_mrb_request_log(mrb_state *mrb, mrb_value self)
{
    request_rec  *r = ap_mrb_request(mrb);
    mrb_int       level;
    mrb_value     msg;

    mrb_get_args(mrb, "io", &level, &msg);
    msg = mrb_obj_as_string(mrb, msg);

    if (level < APLOG_EMERG) {
        level = APLOG_EMERG;
    } else if (level > APLOG_TRACE8) {
        level = APLOG_TRACE8;
    }

    ap_log_rerror(APLOG_MARK, (int) level, 0, r, "%.*s",
                  (int) RSTRING_LEN(msg), RSTRING_PTR(msg));
    return self;
}


/*
 * Hands the request to mod_proxy as a reverse proxy to url, as
 * mod_rewrite's [P] flag does; call it from translate_name and return OK.
 * A query string in url replaces the request's; without one the client's
 * query string goes to the backend (mod_proxy appends r->args).
 */
static mrb_value
ap_mrb_reverse_proxy(mrb_state *mrb, mrb_value self)
{
    request_rec   *r = ap_mrb_request(mrb);
    mrb_value      url = mrb_get_arg1(mrb);
    mrb_http_str   target;
    char          *u, *q;

    mrb_http_check_target(mrb, "reverse_proxy URL", url, &target);
    u = apr_pstrmemdup(r->pool, target.data, target.len);

    q = strchr(u, '?');
    if (q != NULL) {
        *q++ = '\0';
        r->args = *q ? q : NULL;
    }

    r->filename = apr_pstrcat(r->pool, "proxy:", u, NULL);
    r->proxyreq = PROXYREQ_REVERSE;
    r->handler = "proxy-server";
    return url;
}


#define AP_MRB_STR_RW(name)                                                   \
    { #name, ap_mrb_get_str_field, ap_mrb_set_##name,                         \
      offsetof(request_rec, name) }
#define AP_MRB_STR_RO(name)                                                   \
    { #name, ap_mrb_get_str_field, NULL, offsetof(request_rec, name) }
#define AP_MRB_INT_RW(name)                                                   \
    { #name, ap_mrb_get_int_field, ap_mrb_set_##name,                         \
      offsetof(request_rec, name) }
#define AP_MRB_INT_RO(name)                                                   \
    { #name, ap_mrb_get_int_field, NULL, offsetof(request_rec, name) }

static const mrb_api_field  ap_mrb_request_fields[] = {
    AP_MRB_STR_RW(the_request),
    AP_MRB_STR_RW(protocol),
    AP_MRB_STR_RW(user),
    AP_MRB_STR_RW(ap_auth_type),
    AP_MRB_STR_RW(unparsed_uri),
    AP_MRB_STR_RW(uri),
    AP_MRB_STR_RW(filename),
    AP_MRB_STR_RW(canonical_filename),
    AP_MRB_STR_RW(path_info),
    AP_MRB_STR_RW(args),
    AP_MRB_STR_RW(hostname),
    AP_MRB_STR_RW(status_line),
    AP_MRB_STR_RW(method),
    AP_MRB_STR_RW(range),
    AP_MRB_STR_RW(content_type),
    AP_MRB_STR_RW(handler),
    AP_MRB_STR_RW(content_encoding),
    AP_MRB_STR_RW(vlist_validator),
    AP_MRB_INT_RW(proxyreq),
    AP_MRB_INT_RW(status),

    AP_MRB_INT_RO(header_only),
    AP_MRB_INT_RO(proto_num),
    AP_MRB_INT_RO(method_number),
    AP_MRB_INT_RO(chunked),
    AP_MRB_INT_RO(assbackwards),
    AP_MRB_INT_RO(read_body),
    AP_MRB_INT_RO(read_chunked),
    AP_MRB_INT_RO(used_path_info),
    AP_MRB_INT_RO(eos_sent),
    AP_MRB_INT_RO(no_cache),
    AP_MRB_INT_RO(no_local_copy),

    MRB_API_FIELD_END
};


#define AP_MRB_RW(name)  { #name, ap_mrb_get_##name, ap_mrb_set_##name }
#define AP_MRB_RO(name)  { #name, ap_mrb_get_##name, NULL }

static const mrb_api_attr  ap_mrb_request_attrs[] = {
    AP_MRB_RW(document_root),
    AP_MRB_RW(content_length),

    AP_MRB_RO(scheme),
    AP_MRB_RO(request_time),
    AP_MRB_RO(response_time),
    AP_MRB_RO(body),

    MRB_API_ATTR_END
};


/* Apache::Request.new: a handle, to nothing but the current request. */
static mrb_value
ap_mrb_request_initialize(mrb_state *mrb, mrb_value self)
{
    mrb_api_no_args(mrb);
    return self;
}


static const mrb_api_method  ap_mrb_request_methods[] = {
    { "initialize", ap_mrb_request_initialize, MRB_ARGS_NONE() },
    { "main?", ap_mrb_is_main, MRB_ARGS_NONE() },
    { "sub_request?", ap_mrb_is_sub_request, MRB_ARGS_NONE() },
    { "prev?", ap_mrb_is_internal_redirect, MRB_ARGS_NONE() },
    { "internal_redirect?", ap_mrb_is_internal_redirect, MRB_ARGS_NONE() },
    { "next?", ap_mrb_is_external_redirect, MRB_ARGS_NONE() },
    { "external_redirect?", ap_mrb_is_external_redirect, MRB_ARGS_NONE() },
    { "run_handler", ap_mrb_run_handler, MRB_ARGS_NONE() },
    { "log", ap_mrb_request_log, MRB_ARGS_REQ(2) },
    { "error_log", ap_mrb_request_log, MRB_ARGS_REQ(2) },
    { "reverse_proxy", ap_mrb_reverse_proxy, MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};


void
ap_mrb_define_request(mrb_state *mrb, struct RClass *apache)
{
    size_t          i;
    struct RClass  *c, *made;

    c = mrb_api_define_class(mrb, apache, "Request", NULL,
                             ap_mrb_request_methods);
    mrb_api_define_fields(mrb, c, ap_mrb_request_fields);
    mrb_api_define_attrs(mrb, c, ap_mrb_request_attrs);
    mrb_api_define_new(mrb, c, ap_mrb_request_initialize);

    for (i = 0; i < sizeof(ap_mrb_request_objects)
                    / sizeof(ap_mrb_request_objects[0]); i++)
    {
        made = mrb_class_get_under(mrb, apache,
                                   ap_mrb_request_objects[i].class_name);
        mrb_api_define_method_with(mrb, c, ap_mrb_request_objects[i].name,
                                   ap_mrb_request_object,
                                   mrb_obj_value(made));
    }
}
