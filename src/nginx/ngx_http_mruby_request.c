/*
 * Nginx::Request: a handle to the request of the current run.
 */

#include "ngx_http_mruby_module.h"

#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/hash.h>
#include <mruby/string.h>


#define ngx_http_mruby_str_getter(name, field)                                \
    static mrb_value                                                          \
    ngx_http_mruby_request_##name(mrb_state *mrb, mrb_value self)             \
    {                                                                         \
        ngx_http_request_t  *r = ngx_http_mruby_request(mrb);                 \
                                                                              \
        return ngx_http_mruby_str(mrb, &r->field);                            \
    }

ngx_http_mruby_str_getter(uri, uri)
ngx_http_mruby_str_getter(method, method_name)
ngx_http_mruby_str_getter(protocol, http_protocol)
ngx_http_mruby_str_getter(request_line, request_line)
ngx_http_mruby_str_getter(unparsed_uri, unparsed_uri)
ngx_http_mruby_str_getter(hostname, headers_in.server)


static mrb_value
ngx_http_mruby_request_args(mrb_state *mrb, mrb_value self)
{
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    /* "" without a query string, as the original answered */
    return mrb_str_new(mrb, (const char *) r->args.data, r->args.len);
}


/* What a setter's value is checked as (mrb_http_check.h's signature). */
typedef void (*ngx_http_mruby_check_pt)(mrb_state *mrb, const char *what,
    mrb_value value, mrb_http_str *out);


/* A method: an RFC 9110 token, as a header name is. */
static void
ngx_http_mruby_check_method(mrb_state *mrb, const char *what,
    mrb_value value, mrb_http_str *out)
{
    mrb_value  v = mrb_obj_as_string(mrb, value);

    if (!mrb_http_valid_header_name(RSTRING_PTR(v), RSTRING_LEN(v))) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR, "invalid %s (want an RFC 9110 "
                   "token)", what);
    }

    out->data = RSTRING_PTR(v);
    out->len = RSTRING_LEN(v);
}


/*
 * The setters of what nginx keeps of the request line: the value checked,
 * copied to the pool and stored in the request's field.
 *
 * uri= and args= change what nginx serves and forwards, and make its
 * unparsed URI stale; uri= in the rewrite phase also has the location
 * looked up again, the request internal, as after nginx's "rewrite ...
 * last".  request_line=, unparsed_uri=, method= and protocol= overwrite
 * what logs and $request show; the request is not parsed again.  The
 * checks are those of the wire check: a URI and a request line have no
 * control characters, an unparsed URI is a target, a method a token, a
 * protocol a header value.
 */
typedef struct {
    const char               *what;
    ngx_http_mruby_check_pt   check;
    size_t                    field;       /* offset of an ngx_str_t */
    unsigned                  stale:1;     /* r->unparsed_uri no longer */
    unsigned                  relocate:1;  /* the location is looked up */
} ngx_http_mruby_line_setter_t;


static mrb_value
ngx_http_mruby_request_set_line(mrb_state *mrb, mrb_value self,
    const ngx_http_mruby_line_setter_t *set)
{
    mrb_run_rec                *run;
    ngx_str_t                  *field;
    mrb_http_str                value;
    ngx_http_request_t         *r = ngx_http_mruby_request(mrb);
    ngx_http_mruby_run_data_t  *data;

    set->check(mrb, set->what, mrb_get_arg1(mrb), &value);
    field = (ngx_str_t *) ((char *) r + set->field);
    ngx_http_mruby_copy_checked(mrb, r, &value, field, set->what);

    if (set->relocate) {
        run = mrb_interp_run(mrb);
        data = run->data;

        if (data != NULL && data->phase == NGX_HTTP_MRUBY_REWRITE) {
            r->uri_changed = 1;
            r->internal = 1;
        }
    }

    if (set->stale) {
        r->valid_unparsed_uri = 0;
    }

    return self;
}


/* name= storing into r->field: its table entry and its method */
#define ngx_http_mruby_line_setter(name, check, field, stale, relocate)       \
    static const ngx_http_mruby_line_setter_t                                 \
        ngx_http_mruby_set_##name = {                                         \
            #name "=", check, offsetof(ngx_http_request_t, field),            \
            stale, relocate                                                   \
        };                                                                    \
                                                                              \
    static mrb_value                                                          \
    ngx_http_mruby_request_set_##name(mrb_state *mrb, mrb_value self)         \
    {                                                                         \
        return ngx_http_mruby_request_set_line(mrb, self,                     \
                                               &ngx_http_mruby_set_##name);   \
    }

/* name, check, field, stale, relocate */
ngx_http_mruby_line_setter(uri, mrb_http_check_uri, uri, 1, 1)
ngx_http_mruby_line_setter(args, mrb_http_check_args, args, 1, 0)
ngx_http_mruby_line_setter(request_line, mrb_http_check_uri, request_line,
                           0, 0)
ngx_http_mruby_line_setter(unparsed_uri, mrb_http_check_target, unparsed_uri,
                           0, 0)
ngx_http_mruby_line_setter(method, ngx_http_mruby_check_method, method_name,
                           0, 0)
ngx_http_mruby_line_setter(protocol, mrb_http_check_header_value,
                           http_protocol, 0, 0)


/* The original's read_body: kept for its scripts, as the body is read by
 * mruby_enable_read_request_body here. */
static mrb_value
ngx_http_mruby_request_read_body(mrb_state *mrb, mrb_value self)
{
    (void) ngx_http_mruby_request(mrb);
    return mrb_fixnum_value(NGX_OK);
}


static mrb_value
ngx_http_mruby_request_content_type(mrb_state *mrb, mrb_value self)
{
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    return ngx_http_mruby_str(mrb, &r->headers_out.content_type);
}


static mrb_value
ngx_http_mruby_request_set_content_type(mrb_state *mrb, mrb_value self)
{
    ngx_str_t            key, value;
    mrb_http_str         type;
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    mrb_http_check_header_value(mrb, "Content-Type", mrb_get_arg1(mrb),
                                &type);
    ngx_http_mruby_copy_checked(mrb, r, &type, &value, "content_type=");

    ngx_str_set(&key, "Content-Type");

    if (ngx_http_mruby_headers_out_set(r, &key, &value) != NGX_OK) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "content_type=: out of memory");
    }

    return self;
}


/* The Host header as sent (with its port), else the server's name. */
static mrb_value
ngx_http_mruby_request_authority(mrb_state *mrb, mrb_value self)
{
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    if (r->headers_in.host != NULL) {
        return ngx_http_mruby_str(mrb, &r->headers_in.host->value);
    }

    return ngx_http_mruby_str(mrb, &r->headers_in.server);
}


static mrb_value
ngx_http_mruby_request_filename(mrb_state *mrb, mrb_value self)
{
    size_t               root;
    u_char              *last;
    ngx_str_t            path;
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    last = ngx_http_map_uri_to_path(r, &path, &root, 0);
    if (last == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "filename: cannot map the URI");
    }

    return mrb_str_new(mrb, (const char *) path.data, last - path.data);
}


static mrb_value
ngx_http_mruby_request_user(mrb_state *mrb, mrb_value self)
{
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    if (r->headers_in.user.len == 0
        && ngx_http_auth_basic_user(r) != NGX_OK)
    {
        return mrb_nil_value();
    }

    return ngx_http_mruby_str(mrb, &r->headers_in.user);
}


static mrb_value
ngx_http_mruby_request_scheme(mrb_state *mrb, mrb_value self)
{
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

#if (NGX_HTTP_SSL)
    if (r->connection->ssl) {
        return mrb_str_new_lit(mrb, "https");
    }
#endif

    return mrb_str_new_lit(mrb, "http");
}


/*
 * The body that mruby_enable_read_request_body read, from memory or from
 * its temporary file; "" for a request without one, read or not.
 */
static mrb_value
ngx_http_mruby_request_body(mrb_state *mrb, mrb_value self)
{
    off_t                len;
    char                *p;
    ssize_t              n;
    mrb_value            body;
    ngx_buf_t           *b;
    ngx_chain_t         *cl;
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    if (r->request_body == NULL) {
        if (r->headers_in.content_length_n <= 0 && !r->headers_in.chunked) {
            return mrb_str_new(mrb, NULL, 0);
        }

        mrb_raise(mrb, E_RUNTIME_ERROR,
                  "the request has a body, which nginx reads only for "
                  "locations with \"mruby_enable_read_request_body on\"");
    }

    len = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        len += ngx_buf_size(cl->buf);
    }

    body = mrb_str_new(mrb, NULL, (mrb_int) len);
    p = RSTRING_PTR(body);

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (ngx_buf_in_memory(b)) {
            p = (char *) ngx_cpymem(p, b->pos, b->last - b->pos);
            continue;
        }

        if (b->in_file) {
            n = ngx_read_file(b->file, (u_char *) p,
                              (size_t) (b->file_last - b->file_pos),
                              b->file_pos);

            if (n != b->file_last - b->file_pos) {
                mrb_raise(mrb, E_RUNTIME_ERROR,
                          "cannot read the request body's temporary file");
            }

            p += n;
        }
    }

    return body;
}


/* "a=1&b=x%20y" into {"a" => "1", "b" => "x y"} ("+" is a space). */
static mrb_value
ngx_http_mruby_parse_args(mrb_state *mrb, u_char *p, size_t len)
{
    u_char     *end, *amp, *eq, *dst, *src;
    mrb_value   hash, key, value, s;
    size_t      i;

    hash = mrb_hash_new(mrb);
    end = p + len;

    while (p < end) {
        amp = ngx_strlchr(p, end, '&');
        if (amp == NULL) {
            amp = end;
        }

        if (amp == p) {
            p++;
            continue;
        }

        eq = ngx_strlchr(p, amp, '=');

        key = mrb_nil_value();
        value = mrb_nil_value();

        for (i = 0; i < 2; i++) {
            u_char  *from = (i == 0) ? p : (eq ? eq + 1 : amp);
            u_char  *to = (i == 0) ? (eq ? eq : amp) : amp;
            u_char  *c;

            s = mrb_str_new(mrb, (const char *) from, to - from);
            src = (u_char *) RSTRING_PTR(s);

            for (c = src; c < src + RSTRING_LEN(s); c++) {
                if (*c == '+') {
                    *c = ' ';
                }
            }

            dst = src;
            ngx_unescape_uri(&dst, &src, RSTRING_LEN(s),
                             0);
            s = mrb_str_resize(mrb, s, dst - (u_char *) RSTRING_PTR(s));

            if (i == 0) {
                key = s;
            } else {
                value = s;
            }
        }

        mrb_hash_set(mrb, hash, key, value);
        p = amp + 1;
    }

    return hash;
}


static mrb_value
ngx_http_mruby_request_uri_args(mrb_state *mrb, mrb_value self)
{
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    return ngx_http_mruby_parse_args(mrb, r->args.data, r->args.len);
}


static mrb_value
ngx_http_mruby_request_post_args(mrb_state *mrb, mrb_value self)
{
    mrb_value  body;

    body = ngx_http_mruby_request_body(mrb, self);

    return ngx_http_mruby_parse_args(mrb, (u_char *) RSTRING_PTR(body),
                                     (size_t) RSTRING_LEN(body));
}


/*
 * r.uri_args = {"a" => "1"}: the query string from a Hash, escaped.  Every
 * key and value is converted first (to_s may run a script's code, which
 * could change the Hash or a String already measured), then measured, then
 * copied, with no call into Ruby between the last two.
 */
static mrb_value
ngx_http_mruby_request_set_uri_args(mrb_state *mrb, mrb_value self)
{
    size_t               len;
    u_char              *p;
    mrb_int              i, n;
    mrb_value            hash, keys, values, parts, s;
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    mrb_get_args(mrb, "H", &hash);

    keys = mrb_hash_keys(mrb, hash);
    values = mrb_hash_values(mrb, hash);
    n = RARRAY_LEN(keys);
    parts = mrb_ary_new_capa(mrb, 2 * n);

    for (i = 0; i < n; i++) {
        mrb_ary_push(mrb, parts, mrb_obj_as_string(mrb, RARRAY_PTR(keys)[i]));
        mrb_ary_push(mrb, parts,
                     mrb_obj_as_string(mrb, RARRAY_PTR(values)[i]));
    }

    /* from here on nothing calls into Ruby */

    n = RARRAY_LEN(parts);
    len = 0;

    for (i = 0; i < n; i++) {
        s = RARRAY_PTR(parts)[i];
        len += 1 + ngx_escape_uri(NULL, (u_char *) RSTRING_PTR(s),
                                  RSTRING_LEN(s), NGX_ESCAPE_URI_COMPONENT)
                   * 2 + RSTRING_LEN(s);
    }

    p = ngx_pnalloc(r->pool, len + 1);
    if (p == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "uri_args=: out of memory");
    }

    r->args.data = p;

    for (i = 0; i < n; i++) {
        if (i > 0) {
            *p++ = (i % 2) ? '=' : '&';
        }

        s = RARRAY_PTR(parts)[i];
        p = (u_char *) ngx_escape_uri(p, (u_char *) RSTRING_PTR(s),
                                      RSTRING_LEN(s),
                                      NGX_ESCAPE_URI_COMPONENT);
    }

    r->args.len = p - r->args.data;
    r->valid_unparsed_uri = 0;

    return self;
}


/*
 * r.var, r.headers_in, r.headers_out: a new object of the class the method
 * was defined with (ngx_http_mruby_request_define), which has no state of
 * its own and no initialize to run.
 */
static mrb_value
ngx_http_mruby_request_object(mrb_state *mrb, mrb_value self)
{
    mrb_api_no_args(mrb);

    return mrb_obj_value(mrb_obj_alloc(mrb, MRB_TT_OBJECT,
                             mrb_class_ptr(mrb_api_method_value(mrb))));
}


/* As request_object, in a request only: what reads or sets its headers. */
static mrb_value
ngx_http_mruby_request_headers(mrb_state *mrb, mrb_value self)
{
    (void) ngx_http_mruby_request(mrb);

    return ngx_http_mruby_request_object(mrb, self);
}


static mrb_value
ngx_http_mruby_request_sub_request(mrb_state *mrb, mrb_value self)
{
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    return mrb_bool_value(r != r->main);
}


/*
 * nginx's own "internal" flag, set for the requests an "internal;" location
 * lets in: internal redirects (error_page, try_files' fallback,
 * Nginx.redirect, named locations), URIs changed by "rewrite" or r.uri=,
 * and subrequests.
 */
static mrb_value
ngx_http_mruby_request_internal(mrb_state *mrb, mrb_value self)
{
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    return mrb_bool_value(r->internal);
}


/* Nginx::Request.new: a handle, to nothing but the current request. */
static mrb_value
ngx_http_mruby_request_initialize(mrb_state *mrb, mrb_value self)
{
    mrb_api_no_args(mrb);
    return self;
}


static const mrb_api_method  ngx_http_mruby_request_methods[] = {
    { "initialize", ngx_http_mruby_request_initialize, MRB_ARGS_NONE() },
    { "uri", ngx_http_mruby_request_uri, MRB_ARGS_NONE() },
    { "uri=", ngx_http_mruby_request_set_uri, MRB_ARGS_REQ(1) },
    { "args", ngx_http_mruby_request_args, MRB_ARGS_NONE() },
    { "args=", ngx_http_mruby_request_set_args, MRB_ARGS_REQ(1) },
    { "method", ngx_http_mruby_request_method, MRB_ARGS_NONE() },
    { "protocol", ngx_http_mruby_request_protocol, MRB_ARGS_NONE() },
    { "content_type", ngx_http_mruby_request_content_type, MRB_ARGS_NONE() },
    { "content_type=", ngx_http_mruby_request_set_content_type,
      MRB_ARGS_REQ(1) },
    { "request_line", ngx_http_mruby_request_request_line, MRB_ARGS_NONE() },
    { "request_line=", ngx_http_mruby_request_set_request_line,
      MRB_ARGS_REQ(1) },
    { "unparsed_uri", ngx_http_mruby_request_unparsed_uri, MRB_ARGS_NONE() },
    { "unparsed_uri=", ngx_http_mruby_request_set_unparsed_uri,
      MRB_ARGS_REQ(1) },
    { "method=", ngx_http_mruby_request_set_method, MRB_ARGS_REQ(1) },
    { "protocol=", ngx_http_mruby_request_set_protocol, MRB_ARGS_REQ(1) },
    { "read_body", ngx_http_mruby_request_read_body, MRB_ARGS_NONE() },
    { "hostname", ngx_http_mruby_request_hostname, MRB_ARGS_NONE() },
    { "authority", ngx_http_mruby_request_authority, MRB_ARGS_NONE() },
    { "filename", ngx_http_mruby_request_filename, MRB_ARGS_NONE() },
    { "user", ngx_http_mruby_request_user, MRB_ARGS_NONE() },
    { "scheme", ngx_http_mruby_request_scheme, MRB_ARGS_NONE() },
    { "document_root", ngx_http_mruby_document_root, MRB_ARGS_NONE() },
    { "body", ngx_http_mruby_request_body, MRB_ARGS_NONE() },
    { "get_body", ngx_http_mruby_request_body, MRB_ARGS_NONE() },
    { "uri_args", ngx_http_mruby_request_uri_args, MRB_ARGS_NONE() },
    { "uri_args=", ngx_http_mruby_request_set_uri_args, MRB_ARGS_REQ(1) },
    { "post_args", ngx_http_mruby_request_post_args, MRB_ARGS_NONE() },
    /* r.status / r.status = 404, as on Apache: Nginx.status_code */
    { "status", ngx_http_mruby_get_status, MRB_ARGS_NONE() },
    { "status=", ngx_http_mruby_set_status, MRB_ARGS_REQ(1) },
    { "sub_request?", ngx_http_mruby_request_sub_request, MRB_ARGS_NONE() },
    { "internal?", ngx_http_mruby_request_internal, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


/* The methods that answer a new object of a class under Nginx, defined
 * before the Request. */
static const struct {
    const char    *name;
    const char    *class_name;
    mrb_func_t     func;
} ngx_http_mruby_request_objects[] = {
    { "var", "Var", ngx_http_mruby_request_object },
    { "headers_in", "Headers_in", ngx_http_mruby_request_headers },
    { "headers_out", "Headers_out", ngx_http_mruby_request_headers },
};


void
ngx_http_mruby_request_define(mrb_state *mrb, struct RClass *nginx)
{
    size_t          i;
    struct RClass  *c, *made;

    c = mrb_api_define_class(mrb, nginx, "Request", NULL,
                             ngx_http_mruby_request_methods);
    mrb_api_define_new(mrb, c, ngx_http_mruby_request_initialize);

    for (i = 0; i < sizeof(ngx_http_mruby_request_objects)
                    / sizeof(ngx_http_mruby_request_objects[0]); i++)
    {
        made = mrb_class_get_under(mrb, nginx,
                   ngx_http_mruby_request_objects[i].class_name);
        mrb_api_define_method_with(mrb, c,
            ngx_http_mruby_request_objects[i].name,
            ngx_http_mruby_request_objects[i].func, mrb_obj_value(made));
    }
}
