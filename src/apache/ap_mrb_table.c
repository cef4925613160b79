/*
 * The request's tables as Ruby objects: Apache::Headers_in, Headers_out,
 * Err_headers_out, Notes, Subprocess_env and Env (subprocess_env with the
 * CGI variables added), all with [], []=, add, delete and all.
 *
 * An object knows which table it stands for, not which request: it always
 * reaches the current run's request.
 */

#include <string.h>

#include <httpd.h>
#include <util_script.h>

#include <mruby.h>
#include <mruby/class.h>
#include <mruby/data.h>
#include <mruby/hash.h>
#include <mruby/string.h>

#include "ap_mrb.h"

typedef enum {
    AP_MRB_HEADERS_IN = 1,
    AP_MRB_HEADERS_OUT,
    AP_MRB_ERR_HEADERS_OUT,
    AP_MRB_NOTES,
    AP_MRB_SUBPROCESS_ENV,
    AP_MRB_ENV
} ap_mrb_table_kind;

/* DATA_PTR holds the kind; there is nothing to free. */
static const mrb_data_type ap_mrb_table_type = { "Apache::Table", NULL };


static apr_table_t *
ap_mrb_table_get(mrb_state *mrb, mrb_value self, request_rec **rp)
{
    request_rec     *r = ap_mrb_request(mrb);
    ap_mrb_req_ctx  *ctx;
    void            *kind = mrb_data_get_ptr(mrb, self, &ap_mrb_table_type);

    *rp = r;

    switch ((ap_mrb_table_kind) (uintptr_t) kind) {

    case AP_MRB_HEADERS_IN:
        return r->headers_in;

    case AP_MRB_HEADERS_OUT:
        return r->headers_out;

    case AP_MRB_ERR_HEADERS_OUT:
        return r->err_headers_out;

    case AP_MRB_NOTES:
        return r->notes;

    case AP_MRB_SUBPROCESS_ENV:
        return r->subprocess_env;

    case AP_MRB_ENV:
        /* What a CGI script would see; the script-related variables need
         * the request mapped to a file first. */
        ctx = ap_mrb_req_ctx_get(r);
        if (!ctx->cgi_env && r->filename != NULL) {
            ap_add_common_vars(r);
            ap_add_cgi_vars(r);
            ctx->cgi_env = 1;
        }
        return r->subprocess_env;
    }

    mrb_raise(mrb, E_TYPE_ERROR, "uninitialized Apache table object");
    return NULL;
}


static mrb_value
ap_mrb_table_init(mrb_state *mrb, mrb_value self, ap_mrb_table_kind kind)
{
    DATA_TYPE(self) = &ap_mrb_table_type;
    DATA_PTR(self) = (void *) (uintptr_t) kind;
    return self;
}

#define AP_MRB_TABLE_INIT(fn, kind)                                           \
    static mrb_value                                                          \
    fn(mrb_state *mrb, mrb_value self)                                        \
    {                                                                         \
        return ap_mrb_table_init(mrb, self, kind);                            \
    }

AP_MRB_TABLE_INIT(ap_mrb_headers_in_init, AP_MRB_HEADERS_IN)
AP_MRB_TABLE_INIT(ap_mrb_headers_out_init, AP_MRB_HEADERS_OUT)
AP_MRB_TABLE_INIT(ap_mrb_err_headers_out_init, AP_MRB_ERR_HEADERS_OUT)
AP_MRB_TABLE_INIT(ap_mrb_notes_init, AP_MRB_NOTES)
AP_MRB_TABLE_INIT(ap_mrb_subprocess_env_init, AP_MRB_SUBPROCESS_ENV)
AP_MRB_TABLE_INIT(ap_mrb_env_init, AP_MRB_ENV)


/* The key argument of [] and delete, as a C string (raising for a NUL
 * in it), read without mrb_get_args' format parsing. */
static const char *
ap_mrb_table_key(mrb_state *mrb)
{
    (void) mrb_api_argc(mrb, 1, 1);

    return mrb_string_cstr(mrb, mrb_ensure_string_type(mrb,
                                                       mrb_get_argv(mrb)[0]));
}


static mrb_value
ap_mrb_table_aref(mrb_state *mrb, mrb_value self)
{
    request_rec  *r;
    apr_table_t  *t = ap_mrb_table_get(mrb, self, &r);

    return ap_mrb_str(mrb, apr_table_get(t, ap_mrb_table_key(mrb)));
}


/*
 * The key and value of t[key] = value and t.add: for the header tables
 * through the wire check, for the others Strings without NUL.  value NULL:
 * nil (only when nil_ok).
 */
static void
ap_mrb_table_args(mrb_state *mrb, mrb_value self, request_rec *r,
    int nil_ok, char **k, char **v)
{
    mrb_value     key, val;
    mrb_http_str  name, value;

    switch ((ap_mrb_table_kind) (uintptr_t) DATA_PTR(self)) {

    case AP_MRB_HEADERS_IN:
    case AP_MRB_HEADERS_OUT:
    case AP_MRB_ERR_HEADERS_OUT:
        (void) mrb_api_argc(mrb, 2, 2);
        key = mrb_get_argv(mrb)[0];
        val = mrb_get_argv(mrb)[1];

        if (!nil_ok && mrb_nil_p(val)) {
            mrb_raise(mrb, E_ARGUMENT_ERROR, "nil header value");
        }

        mrb_http_check_header(mrb, key, val, &name, &value);
        *k = apr_pstrmemdup(r->pool, name.data, name.len);
        *v = value.data ? apr_pstrmemdup(r->pool, value.data, value.len)
                        : NULL;
        return;

    default:
        mrb_get_args(mrb, nil_ok ? "SS!" : "SS", &key, &val);
        *k = ap_mrb_pstr(mrb, r->pool, key);
        *v = mrb_nil_p(val) ? NULL : ap_mrb_pstr(mrb, r->pool, val);
        return;
    }
}


/*
 * t[key] = value replaces, except for Set-Cookie, where each assignment
 * adds one more header (one cookie per header); nil deletes.
 */
static mrb_value
ap_mrb_table_aset(mrb_state *mrb, mrb_value self)
{
    request_rec  *r;
    apr_table_t  *t = ap_mrb_table_get(mrb, self, &r);
    char         *k, *v;

    ap_mrb_table_args(mrb, self, r, 1, &k, &v);

    if (v == NULL) {
        apr_table_unset(t, k);
        return mrb_nil_value();
    }

    if (strcasecmp(k, "Set-Cookie") == 0) {
        apr_table_addn(t, k, v);
    } else {
        apr_table_setn(t, k, v);
    }

    return mrb_str_new_cstr(mrb, v);
}


static mrb_value
ap_mrb_table_add(mrb_state *mrb, mrb_value self)
{
    request_rec  *r;
    apr_table_t  *t = ap_mrb_table_get(mrb, self, &r);
    char         *k, *v;

    ap_mrb_table_args(mrb, self, r, 0, &k, &v);
    apr_table_addn(t, k, v);
    return mrb_str_new_cstr(mrb, v);
}


static mrb_value
ap_mrb_table_delete(mrb_state *mrb, mrb_value self)
{
    request_rec  *r;
    apr_table_t  *t = ap_mrb_table_get(mrb, self, &r);

    apr_table_unset(t, ap_mrb_table_key(mrb));
    return mrb_nil_value();
}


typedef struct {
    mrb_state  *mrb;
    mrb_value   hash;
} ap_mrb_table_walk;


/* The first value of a repeated key wins, as t[key] gives it. */
static int
ap_mrb_table_collect(void *data, const char *key, const char *val)
{
    ap_mrb_table_walk  *w = data;
    mrb_value           k;
    int                 ai = mrb_gc_arena_save(w->mrb);

    k = mrb_str_new_cstr(w->mrb, key);
    if (!mrb_hash_key_p(w->mrb, w->hash, k)) {
        mrb_hash_set(w->mrb, w->hash, k, ap_mrb_str(w->mrb, val));
    }

    mrb_gc_arena_restore(w->mrb, ai);
    return 1;
}


static mrb_value
ap_mrb_table_all(mrb_state *mrb, mrb_value self)
{
    request_rec        *r;
    apr_table_t        *t = ap_mrb_table_get(mrb, self, &r);
    ap_mrb_table_walk   w;

    w.mrb = mrb;
    w.hash = mrb_hash_new_capa(mrb, apr_table_elts(t)->nelts);
    apr_table_do(ap_mrb_table_collect, &w, t, NULL);
    return w.hash;
}


/* the methods live in a common superclass */
static const mrb_api_method  ap_mrb_table_methods[] = {
    { "[]", ap_mrb_table_aref, MRB_ARGS_REQ(1) },
    { "[]=", ap_mrb_table_aset, MRB_ARGS_REQ(2) },
    { "add", ap_mrb_table_add, MRB_ARGS_REQ(2) },
    { "delete", ap_mrb_table_delete, MRB_ARGS_REQ(1) },
    { "all", ap_mrb_table_all, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


/* The original's shortcuts for two request headers. */
static mrb_value
ap_mrb_headers_in_user_agent(mrb_state *mrb, mrb_value self)
{
    return ap_mrb_str(mrb, apr_table_get(ap_mrb_request(mrb)->headers_in,
                                         "User-Agent"));
}


static mrb_value
ap_mrb_headers_in_referer(mrb_state *mrb, mrb_value self)
{
    return ap_mrb_str(mrb, apr_table_get(ap_mrb_request(mrb)->headers_in,
                                         "Referer"));
}


static const mrb_api_method  ap_mrb_headers_in_methods[] = {
    { "user_agent", ap_mrb_headers_in_user_agent, MRB_ARGS_NONE() },
    { "referer", ap_mrb_headers_in_referer, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


/* each subclass knows only which table of the request it reads, and may
 * have methods of its own */
static const struct {
    const char            *name;
    mrb_func_t             init;
    const mrb_api_method  *methods;
} ap_mrb_table_classes[] = {
    { "Headers_in", ap_mrb_headers_in_init, ap_mrb_headers_in_methods },
    { "Headers_out", ap_mrb_headers_out_init, NULL },
    { "Err_headers_out", ap_mrb_err_headers_out_init, NULL },
    { "Notes", ap_mrb_notes_init, NULL },
    { "Subprocess_env", ap_mrb_subprocess_env_init, NULL },
    { "Env", ap_mrb_env_init, NULL }
};


void
ap_mrb_define_tables(mrb_state *mrb, struct RClass *apache)
{
    struct RClass   *table, *c;
    size_t           i;
    mrb_api_method   init[] = {
        { "initialize", NULL, MRB_ARGS_NONE() },
        MRB_API_METHOD_END
    };

    table = mrb_api_define_class(mrb, apache, "Table", NULL,
                                 ap_mrb_table_methods);
    MRB_SET_INSTANCE_TT(table, MRB_TT_DATA);

    for (i = 0; i < sizeof(ap_mrb_table_classes)
                    / sizeof(ap_mrb_table_classes[0]); i++)
    {
        init[0].func = ap_mrb_table_classes[i].init;
        c = mrb_api_define_class(mrb, apache, ap_mrb_table_classes[i].name,
                                 table, init);
        MRB_SET_INSTANCE_TT(c, MRB_TT_DATA);

        if (ap_mrb_table_classes[i].methods != NULL) {
            mrb_api_define_methods(mrb, c, ap_mrb_table_classes[i].methods);
        }
    }
}
