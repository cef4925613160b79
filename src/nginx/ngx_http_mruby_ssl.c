/*
 * mruby_ssl_handshake_handler: a script run during the TLS handshake,
 * after the client said which name it wants (SNI), that may give the
 * certificate and key to answer with; and Nginx::SSL.
 *
 * It runs from OpenSSL's certificate callback, which comes after nginx's
 * own SNI callback has switched to the named server's SSL_CTX: the script
 * of that server runs.
 */

#include "ngx_http_mruby_module.h"

#include <mruby/class.h>
#include <mruby/string.h>


#if (NGX_HTTP_SSL)

static int ngx_http_mruby_ssl_cert_cb(ngx_ssl_conn_t *ssl_conn, void *arg);


/* Installs the callback in each server with a handshake script. */
ngx_int_t
ngx_http_mruby_ssl_init(ngx_conf_t *cf)
{
    ngx_uint_t                   s;
    ngx_http_ssl_srv_conf_t     *sscf;
    ngx_http_mruby_srv_conf_t   *mscf;
    ngx_http_mruby_loc_conf_t   *mlcf;
    ngx_http_core_srv_conf_t   **cscfp;
    ngx_http_core_main_conf_t   *cmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
    cscfp = cmcf->servers.elts;

    for (s = 0; s < cmcf->servers.nelts; s++) {

        mscf = cscfp[s]->ctx->srv_conf[ngx_http_mruby_module.ctx_index];

        if (mscf->ssl_handshake == NULL) {
            continue;
        }

        /* the server's own mruby_cache (merged by now) decides the
         * policy, and its budgets are the handshake run's */

        mlcf = cscfp[s]->ctx->loc_conf[ngx_http_mruby_module.ctx_index];
        mscf->ssl_run_memory = mlcf->run_memory;
        mscf->ssl_run_timeout = mlcf->run_timeout;

        if (ngx_mruby_script_resolve(cf, mscf->ssl_handshake, mlcf->cache)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        sscf = cscfp[s]->ctx->srv_conf[ngx_http_ssl_module.ctx_index];

        if (sscf->ssl.ctx == NULL) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "mruby_ssl_handshake_handler in %V:%ui needs TLS "
                          "in its server (\"listen ... ssl\" and a default "
                          "\"ssl_certificate\")",
                          &mscf->ssl_handshake->conf_file,
                          mscf->ssl_handshake->line);
            return NGX_ERROR;
        }

        if (sscf->certificate_values != NULL) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "mruby_ssl_handshake_handler in %V:%ui cannot be "
                          "combined with an \"ssl_certificate\" that has "
                          "variables",
                          &mscf->ssl_handshake->conf_file,
                          mscf->ssl_handshake->line);
            return NGX_ERROR;
        }

        SSL_CTX_set_cert_cb(sscf->ssl.ctx, ngx_http_mruby_ssl_cert_cb, mscf);
    }

    return NGX_OK;
}


static int
ngx_http_mruby_ssl_cert_cb(ngx_ssl_conn_t *ssl_conn, void *arg)
{
    ngx_http_mruby_srv_conf_t *mscf = arg;

    mrb_run_rec                 run;
    mrb_interp                 *interp;
    ngx_connection_t           *c;
    ngx_http_mruby_run_data_t   data;

    c = ngx_ssl_get_connection(ssl_conn);

    interp = ngx_mruby_interp(&ngx_http_mruby_process, c->log);
    if (interp == NULL) {
        return 0;
    }

    ngx_memzero(&data, sizeof(data));
    data.phase = NGX_HTTP_MRUBY_SSL_HANDSHAKE;
    data.connection = c;

    mrb_run_init(&run, NULL, NGX_OK);
    run.data = &data;
    run.phase = ngx_http_mruby_phase_names[NGX_HTTP_MRUBY_SSL_HANDSHAKE];
    run.memory_limit = mscf->ssl_run_memory;
    run.timeout_ms = (uint32_t) mscf->ssl_run_timeout;

    if (mrb_script_run(interp, mscf->ssl_handshake->script, &run) != 0) {
        ngx_log_error(NGX_LOG_ERR, c->log, 0,
                      "mruby_ssl_handshake_handler: %s", run.error);
        return 0;  /* the handshake fails */
    }

    return 1;
}


/* Nginx::SSL */


static ngx_connection_t *
ngx_http_mruby_ssl_connection(mrb_state *mrb)
{
    ngx_http_mruby_run_data_t  *data;

    data = ngx_http_mruby_run_data(mrb, NGX_HTTP_MRUBY_SSL_HANDSHAKE,
               "Nginx::SSL: only in mruby_ssl_handshake_handler");

    return data->connection;
}


/* Raises with OpenSSL's reason, leaving its error queue empty. */
static void
ngx_http_mruby_ssl_raise(mrb_state *mrb, const char *what, mrb_value arg)
{
    char           buf[MRB_ERR_REASON_LEN];
    unsigned long  e;

    e = ERR_peek_last_error();

#ifdef ERR_SYSTEM_ERROR
    if (ERR_SYSTEM_ERROR(e)) {
        /* e.g. a key file the worker's user may not read */
        ngx_cpystrn((u_char *) buf, (u_char *) strerror(ERR_GET_REASON(e)),
                    sizeof(buf));
    } else
#endif
    {
        ERR_error_string_n(e, buf, sizeof(buf));
    }

    ERR_clear_error();

    mrb_raisef(mrb, E_RUNTIME_ERROR, "Nginx::SSL#%s %v: %s", what, arg, buf);
}


static mrb_value
ngx_http_mruby_ssl_servername(mrb_state *mrb, mrb_value self)
{
    const char        *name;
    ngx_connection_t  *c;

    c = ngx_http_mruby_ssl_connection(mrb);

    /* "" when the client sent no name, as the original answered */
    name = SSL_get_servername(c->ssl->connection, TLSEXT_NAMETYPE_host_name);

    return mrb_str_new_cstr(mrb, name != NULL ? name : "");
}


/* The protocol the handshake negotiates: "TLSv1.2", "TLSv1.3". */
static mrb_value
ngx_http_mruby_ssl_tls_version(mrb_state *mrb, mrb_value self)
{
    ngx_connection_t  *c = ngx_http_mruby_ssl_connection(mrb);

    return mrb_str_new_cstr(mrb, SSL_get_version(c->ssl->connection));
}


/* The local port the client connected to. */
static mrb_value
ngx_http_mruby_ssl_local_port(mrb_state *mrb, mrb_value self)
{
    ngx_connection_t  *c = ngx_http_mruby_ssl_connection(mrb);

    if (ngx_connection_local_sockaddr(c, NULL, 0) != NGX_OK) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Nginx::SSL#local_port: cannot read "
                  "the connection's address");
    }

    return mrb_int_value(mrb, ngx_inet_get_port(c->local_sockaddr));
}


/* Nginx::SSL.errlogger / log: the original's names for Nginx.errlogger in
 * a handshake script. */
static mrb_value
ngx_http_mruby_ssl_errlogger(mrb_state *mrb, mrb_value self)
{
    mrb_value  level, msg;

    mrb_get_args(mrb, "oo", &level, &msg);
    return mrb_funcall(mrb, mrb_obj_value(mrb_class_get(mrb, "Nginx")),
                       "errlogger", 2, level, msg);
}


/* What a setter does with its String: 1 if OpenSSL took it. */
typedef int (*ngx_http_mruby_ssl_file_pt)(ngx_ssl_conn_t *ssl,
    const char *path);
typedef int (*ngx_http_mruby_ssl_data_pt)(ngx_ssl_conn_t *ssl, BIO *bio);


/* A file path (relative to nginx's prefix), NUL-terminated in c->pool.
 * One with a NUL inside is refused: C would read a shorter path. */
static char *
ngx_http_mruby_ssl_path(mrb_state *mrb, ngx_connection_t *c, const char *what,
    mrb_value v)
{
    ngx_str_t  name;

    if (memchr(RSTRING_PTR(v), '\0', (size_t) RSTRING_LEN(v)) != NULL) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR,
                   "Nginx::SSL#%s: the path contains a NUL byte", what);
    }

    name.len = (size_t) RSTRING_LEN(v);
    name.data = ngx_pnalloc(c->pool, name.len + 1);
    if (name.data == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "out of memory");
    }

    ngx_cpystrn(name.data, (u_char *) RSTRING_PTR(v), name.len + 1);

    if (ngx_get_full_name(c->pool, (ngx_str_t *) &ngx_cycle->prefix, &name)
        != NGX_OK)
    {
        mrb_raise(mrb, E_RUNTIME_ERROR, "out of memory");
    }

    return (char *) name.data;
}


/* ssl.what = "path": use reads the file; an error names the path. */
static mrb_value
ngx_http_mruby_ssl_set_file(mrb_state *mrb, const char *what,
    ngx_http_mruby_ssl_file_pt use)
{
    char              *path;
    mrb_value          v;
    ngx_connection_t  *c;

    mrb_get_args(mrb, "S", &v);

    c = ngx_http_mruby_ssl_connection(mrb);
    path = ngx_http_mruby_ssl_path(mrb, c, what, v);

    if (use(c->ssl->connection, path) != 1) {
        ngx_http_mruby_ssl_raise(mrb, what, v);
    }

    return v;
}


/* ssl.what = "PEM data": use reads it from a memory BIO. */
static mrb_value
ngx_http_mruby_ssl_set_data(mrb_state *mrb, const char *what,
    ngx_http_mruby_ssl_data_pt use)
{
    int                ok;
    BIO               *bio;
    mrb_value          v;
    ngx_connection_t  *c;

    mrb_get_args(mrb, "S", &v);

    c = ngx_http_mruby_ssl_connection(mrb);

    if (RSTRING_LEN(v) > INT_MAX) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR, "Nginx::SSL#%s: too long", what);
    }

    bio = BIO_new_mem_buf(RSTRING_PTR(v), (int) RSTRING_LEN(v));
    if (bio == NULL) {
        ngx_http_mruby_ssl_raise(mrb, what, mrb_nil_value());
    }

    ok = use(c->ssl->connection, bio);

    BIO_free(bio);

    if (ok != 1) {
        ngx_http_mruby_ssl_raise(mrb, what, mrb_nil_value());
    }

    return v;
}


static int
ngx_http_mruby_ssl_use_key_file(ngx_ssl_conn_t *ssl, const char *path)
{
    return SSL_use_PrivateKey_file(ssl, path, SSL_FILETYPE_PEM);
}


/* A PEM certificate and the chain after it. */
static int
ngx_http_mruby_ssl_use_certificate_bio(ngx_ssl_conn_t *ssl, BIO *bio)
{
    int    ok;
    X509  *x509;

    x509 = PEM_read_bio_X509_AUX(bio, NULL, NULL, NULL);
    ok = (x509 != NULL && SSL_use_certificate(ssl, x509) == 1);
    X509_free(x509);

    if (!ok) {
        return 0;
    }

    SSL_clear_chain_certs(ssl);

    while ((x509 = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL) {
        if (SSL_add0_chain_cert(ssl, x509) != 1) {
            X509_free(x509);
            return 0;
        }
    }

    /* the end of the data, not an error */
    ERR_clear_error();

    return 1;
}


static int
ngx_http_mruby_ssl_use_key_bio(ngx_ssl_conn_t *ssl, BIO *bio)
{
    int        ok;
    EVP_PKEY  *pkey;

    pkey = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
    ok = (pkey != NULL && SSL_use_PrivateKey(ssl, pkey) == 1);
    EVP_PKEY_free(pkey);

    return ok;
}


static mrb_value
ngx_http_mruby_ssl_set_certificate(mrb_state *mrb, mrb_value self)
{
    return ngx_http_mruby_ssl_set_file(mrb, "certificate=",
                                       SSL_use_certificate_chain_file);
}


static mrb_value
ngx_http_mruby_ssl_set_certificate_key(mrb_state *mrb, mrb_value self)
{
    return ngx_http_mruby_ssl_set_file(mrb, "certificate_key=",
                                       ngx_http_mruby_ssl_use_key_file);
}


static mrb_value
ngx_http_mruby_ssl_set_certificate_data(mrb_state *mrb, mrb_value self)
{
    return ngx_http_mruby_ssl_set_data(mrb, "certificate_data=",
                                       ngx_http_mruby_ssl_use_certificate_bio);
}


static mrb_value
ngx_http_mruby_ssl_set_certificate_key_data(mrb_state *mrb, mrb_value self)
{
    return ngx_http_mruby_ssl_set_data(mrb, "certificate_key_data=",
                                       ngx_http_mruby_ssl_use_key_bio);
}


static const mrb_api_method  ngx_http_mruby_ssl_methods[] = {
    { "servername", ngx_http_mruby_ssl_servername, MRB_ARGS_NONE() },
    { "tls_version", ngx_http_mruby_ssl_tls_version, MRB_ARGS_NONE() },
    { "local_port", ngx_http_mruby_ssl_local_port, MRB_ARGS_NONE() },
    { "certificate=", ngx_http_mruby_ssl_set_certificate, MRB_ARGS_REQ(1) },
    { "certificate_key=", ngx_http_mruby_ssl_set_certificate_key,
      MRB_ARGS_REQ(1) },
    { "certificate_data=", ngx_http_mruby_ssl_set_certificate_data,
      MRB_ARGS_REQ(1) },
    { "certificate_key_data=", ngx_http_mruby_ssl_set_certificate_key_data,
      MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};


static const mrb_api_method  ngx_http_mruby_ssl_class_methods[] = {
    { "errlogger", ngx_http_mruby_ssl_errlogger, MRB_ARGS_REQ(2) },
    { "log", ngx_http_mruby_ssl_errlogger, MRB_ARGS_REQ(2) },
    MRB_API_METHOD_END
};


void
ngx_http_mruby_ssl_define(mrb_state *mrb, struct RClass *nginx)
{
    struct RClass  *ssl;

    ssl = mrb_api_define_class(mrb, nginx, "SSL", NULL,
                               ngx_http_mruby_ssl_methods);
    mrb_api_define_class_methods(mrb, ssl, ngx_http_mruby_ssl_class_methods);
}


#else /* !NGX_HTTP_SSL */


ngx_int_t
ngx_http_mruby_ssl_init(ngx_conf_t *cf)
{
    return NGX_OK;
}


void
ngx_http_mruby_ssl_define(mrb_state *mrb, struct RClass *nginx)
{
}


#endif
