/*
 * TLS for Redis links (see mrb_redis_tls.h).
 *
 * OpenSSL's error queue is the thread's, shared with the server around us
 * (nginx's and Apache's own TLS): it is emptied before each call here and
 * what a failed call left is taken out at once, so that neither side
 * reads the other's errors.
 */

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include "mrb_redis_tls.h"


/* "what: OpenSSL's reason" into err, from the error queue (emptied), or
 * from fallback when the queue says nothing. */
static void
tls_reason(char *err, size_t errlen, const char *what, const char *fallback)
{
    char           reason[256];
    unsigned long  e, last = 0;

    while ((e = ERR_get_error()) != 0) {
        last = e;
    }

    if (last != 0 && ERR_reason_error_string(last) != NULL) {
        snprintf(reason, sizeof(reason), "%s", ERR_reason_error_string(last));
        fallback = reason;
    }

    snprintf(err, errlen, "%s: %s", what, fallback);
}


/* Whether path (if given) can be read; err says why not.  OpenSSL would
 * only say "system lib". */
static int
tls_readable(const char *path, char *err, size_t errlen)
{
    if (path != NULL && access(path, R_OK) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return 0;
    }

    return 1;
}


SSL_CTX *
mrb_redis_tls_context(const mrb_redis_tls_opts *o, char *err, size_t errlen)
{
    SSL_CTX  *ctx;

    if (!tls_readable(o->ca_file, err, errlen)
        || !tls_readable(o->ca_path, err, errlen)
        || !tls_readable(o->cert, err, errlen)
        || !tls_readable(o->key, err, errlen))
    {
        return NULL;
    }

    if ((o->cert == NULL) != (o->key == NULL)) {
        snprintf(err, errlen, "a client certificate needs its key, and a "
                 "key its certificate: give both cert and key");
        return NULL;
    }

    ERR_clear_error();

    ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        tls_reason(err, errlen, "TLS", "out of memory");
        return NULL;
    }

    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE
                          | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    /* a server that closes without close_notify has closed, no more */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);

    if (o->ca_file != NULL || o->ca_path != NULL) {
        if (SSL_CTX_load_verify_locations(ctx, o->ca_file, o->ca_path) != 1) {
            tls_reason(err, errlen, o->ca_file != NULL ? o->ca_file
                                                       : o->ca_path,
                       "cannot be read");
            goto failed;
        }

    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        tls_reason(err, errlen, "the system's CA certificates",
                   "cannot be read");
        goto failed;
    }

    if (o->cert != NULL) {
        if (SSL_CTX_use_certificate_chain_file(ctx, o->cert) != 1) {
            tls_reason(err, errlen, o->cert, "cannot be read");
            goto failed;
        }

        if (SSL_CTX_use_PrivateKey_file(ctx, o->key, SSL_FILETYPE_PEM) != 1) {
            tls_reason(err, errlen, o->key, "cannot be read");
            goto failed;
        }

        if (SSL_CTX_check_private_key(ctx) != 1) {
            tls_reason(err, errlen, o->key, "is not the certificate's key");
            goto failed;
        }
    }

    return ctx;

failed:

    SSL_CTX_free(ctx);
    ERR_clear_error();
    return NULL;
}


SSL *
mrb_redis_tls_open(SSL_CTX *ctx, int fd, const char *host, char *err,
    size_t errlen)
{
    SSL                *ssl;
    int                 ok;
    unsigned char       addr[sizeof(struct in6_addr)];
    X509_VERIFY_PARAM  *param;

    ERR_clear_error();

    ssl = SSL_new(ctx);
    if (ssl == NULL) {
        tls_reason(err, errlen, "TLS", "out of memory");
        return NULL;
    }

    /* an address is checked against the certificate's IP names, a name
     * against its DNS names (and sent as SNI) */
    param = SSL_get0_param(ssl);

    if (inet_pton(AF_INET, host, addr) == 1
        || inet_pton(AF_INET6, host, addr) == 1)
    {
        ok = X509_VERIFY_PARAM_set1_ip_asc(param, host);

    } else {
        ok = SSL_set1_host(ssl, host)
             && SSL_set_tlsext_host_name(ssl, host);
    }

    if (!ok || SSL_set_fd(ssl, fd) != 1) {
        tls_reason(err, errlen, "TLS", "cannot set up the session");
        SSL_free(ssl);
        return NULL;
    }

    SSL_set_connect_state(ssl);
    return ssl;
}


void
mrb_redis_tls_close(SSL *ssl, int ours)
{
    if (ours && SSL_is_init_finished(ssl)) {
        ERR_clear_error();
        SSL_shutdown(ssl);
    }

    SSL_free(ssl);
    ERR_clear_error();
}


/* What a failed call (rc) on ssl means. */
static mrb_redis_tls_status
tls_status(SSL *ssl, int rc, const char *what, char *err, size_t errlen)
{
    int   saved_errno = errno;
    long  verify;

    switch (SSL_get_error(ssl, rc)) {
    case SSL_ERROR_WANT_READ:
        return MRB_REDIS_TLS_WANT_READ;

    case SSL_ERROR_WANT_WRITE:
        return MRB_REDIS_TLS_WANT_WRITE;

    case SSL_ERROR_ZERO_RETURN:
        ERR_clear_error();
        snprintf(err, errlen, "connection closed");
        return MRB_REDIS_TLS_CLOSED;

    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0) {
            if (saved_errno == 0 || saved_errno == ECONNRESET
                || saved_errno == EPIPE)
            {
                snprintf(err, errlen, "connection closed");
                return MRB_REDIS_TLS_CLOSED;
            }
            snprintf(err, errlen, "%s: %s", what, strerror(saved_errno));
            return MRB_REDIS_TLS_ERROR;
        }
        break;

    default:
        break;
    }

    verify = SSL_get_verify_result(ssl);

    if (verify != X509_V_OK) {
        ERR_clear_error();
        snprintf(err, errlen, "%s: the server's certificate is refused: %s",
                 what, X509_verify_cert_error_string(verify));
        return MRB_REDIS_TLS_ERROR;
    }

    tls_reason(err, errlen, what, "failed");
    return MRB_REDIS_TLS_ERROR;
}


mrb_redis_tls_status
mrb_redis_tls_handshake(SSL *ssl, char *err, size_t errlen)
{
    int  rc;

    ERR_clear_error();
    errno = 0;

    rc = SSL_do_handshake(ssl);
    if (rc == 1) {
        return MRB_REDIS_TLS_DONE;
    }

    return tls_status(ssl, rc, "TLS handshake", err, errlen);
}


mrb_redis_tls_status
mrb_redis_tls_write(SSL *ssl, const char *p, size_t len, size_t *done,
    char *err, size_t errlen)
{
    int     rc;
    size_t  n;

    ERR_clear_error();
    errno = 0;

    rc = SSL_write_ex(ssl, p, len, &n);
    if (rc == 1) {
        *done += n;
        return MRB_REDIS_TLS_DONE;
    }

    return tls_status(ssl, rc, "TLS write", err, errlen);
}


mrb_redis_tls_status
mrb_redis_tls_read(SSL *ssl, char *buf, size_t len, size_t *got, char *err,
    size_t errlen)
{
    int  rc;

    *got = 0;
    ERR_clear_error();
    errno = 0;

    rc = SSL_read_ex(ssl, buf, len, got);
    if (rc == 1) {
        return MRB_REDIS_TLS_DONE;
    }

    return tls_status(ssl, rc, "TLS read", err, errlen);
}
