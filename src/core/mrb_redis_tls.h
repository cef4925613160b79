/*
 * TLS for Redis links, with OpenSSL around hiredis' reader: OpenSSL
 * encrypts what a link sends and decrypts what it reads, and hiredis
 * parses the decrypted bytes (redisReaderFeed).  hiredis 0.14 (Debian 12)
 * has no TLS of its own, and one way on every hiredis keeps the waits
 * where they are: every step below is non-blocking and says which way
 * the socket must be ready before it is tried again, so that the caller
 * waits as for a plain link (on nginx, on the event loop).
 */

#ifndef MRB_REDIS_TLS_H
#define MRB_REDIS_TLS_H

#include <stddef.h>
#include <openssl/ssl.h>

/* What to trust and who we are: file paths, each NULL when not given. */
typedef struct {
    const char  *ca_file;   /* CA certificates (PEM); none: the system's */
    const char  *ca_path;   /* a directory of hashed CA certificates */
    const char  *cert;      /* our certificate (PEM), for a server that
                               asks for one (tls-auth-clients) */
    const char  *key;       /* its private key (PEM) */
} mrb_redis_tls_opts;

/* What a step did: done, or try again when the socket is readable or
 * writable; closed: the server closed the connection; error: err says
 * why. */
typedef enum {
    MRB_REDIS_TLS_DONE = 0,
    MRB_REDIS_TLS_WANT_READ,
    MRB_REDIS_TLS_WANT_WRITE,
    MRB_REDIS_TLS_CLOSED,
    MRB_REDIS_TLS_ERROR
} mrb_redis_tls_status;

/*
 * A context for o's files, which are read now: NULL and a reason in err
 * (a file that cannot be read, a key that does not match the
 * certificate).  The server's certificate is verified against the CAs and
 * its name or address against the host each link is opened to.  Freed by
 * SSL_CTX_free (mrb_redis_conn_free).
 */
SSL_CTX *mrb_redis_tls_context(const mrb_redis_tls_opts *o, char *err,
    size_t errlen);

/* A TLS session over fd (connected, non-blocking) to host, whose
 * certificate must name it; NULL and err on failure.  The caller frees it
 * with mrb_redis_tls_close. */
SSL *mrb_redis_tls_open(SSL_CTX *ctx, int fd, const char *host, char *err,
    size_t errlen);

/* Says goodbye (close_notify) when the session is this process's (not a
 * parent's, whose session goes on), without waiting, and frees it; the
 * descriptor stays open. */
void mrb_redis_tls_close(SSL *ssl, int ours);

/* One step of the handshake. */
mrb_redis_tls_status mrb_redis_tls_handshake(SSL *ssl, char *err,
    size_t errlen);

/* Writes what it can of len bytes at p; *done adds what was written. */
mrb_redis_tls_status mrb_redis_tls_write(SSL *ssl, const char *p,
    size_t len, size_t *done, char *err, size_t errlen);

/* Reads what has arrived, up to len bytes, into buf: *got (0 with any
 * other status than done). */
mrb_redis_tls_status mrb_redis_tls_read(SSL *ssl, char *buf, size_t len,
    size_t *got, char *err, size_t errlen);

#endif /* MRB_REDIS_TLS_H */
