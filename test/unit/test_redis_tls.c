/*
 * src/core/mrb_redis_tls.c against an OpenSSL server in the same process
 * over a non-blocking socket pair: the steps say which way to wait and
 * finish when driven turn by turn, the server's name or address is
 * checked, a close is a close, and the files' errors say which file.  The
 * certificates are made by openssl(1) in a directory of the test's own.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <openssl/ssl.h>

#include "mrb_redis_tls.h"
#include "unit.h"


/* A test CA and a server certificate for 127.0.0.1 in a new directory
 * (dir, 64 bytes): 0, or -1. */
static int
tls_make_files(char *dir)
{
    char  cmd[2048];

    snprintf(dir, 64, "/tmp/unit-tls-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        return -1;
    }

    snprintf(cmd, sizeof(cmd),
        "cd %s && exec >/dev/null 2>&1"
        " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
        " -nodes -days 2 -subj /CN=ca -keyout ca.key -out ca.pem"
        " && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
        " -nodes -subj /CN=server -keyout server.key -out server.csr"
        " && echo subjectAltName=IP:127.0.0.1 > ext"
        " && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key"
        " -CAcreateserial -days 2 -extfile ext -out server.pem", dir);

    return system(cmd) == 0 ? 0 : -1;
}


static void
tls_remove_files(const char *dir)
{
    char  cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", dir);
    }
}


/* The server's side, over fd. */
static SSL *
tls_server(const char *dir, int fd, SSL_CTX **ctxp)
{
    char      cert[128], key[128];
    SSL      *ssl;
    SSL_CTX  *ctx;

    snprintf(cert, sizeof(cert), "%s/server.pem", dir);
    snprintf(key, sizeof(key), "%s/server.key", dir);

    ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL
        || SSL_CTX_use_certificate_file(ctx, cert, SSL_FILETYPE_PEM) != 1
        || SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
    {
        SSL_CTX_free(ctx);
        return NULL;
    }

    ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    SSL_set_accept_state(ssl);
    *ctxp = ctx;
    return ssl;
}


/* A connected pair of non-blocking sockets: 0, or -1. */
static int
tls_pair(int fds[2])
{
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
        return -1;
    }

    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    return 0;
}


/* Drives the client's handshake and the server's turn by turn until the
 * client's is over (a want only in between): its last status. */
static mrb_redis_tls_status
tls_handshake_both(SSL *client, SSL *server, char *err, size_t errlen)
{
    int                    i;
    mrb_redis_tls_status   st = MRB_REDIS_TLS_ERROR;

    for (i = 0; i < 100; i++) {
        st = mrb_redis_tls_handshake(client, err, errlen);
        if (st != MRB_REDIS_TLS_WANT_READ && st != MRB_REDIS_TLS_WANT_WRITE) {
            break;
        }
        SSL_do_handshake(server);
    }

    /* the server's last flight (session tickets) */
    SSL_do_handshake(server);
    return st;
}


/* A client (ours, to host) and a server (OpenSSL's) over a socket pair,
 * not shaken hands yet. */
typedef struct {
    char      dir[64];
    int       fds[2];
    SSL      *client;
    SSL      *server;
    SSL_CTX  *client_ctx;
    SSL_CTX  *server_ctx;
} tls_sessions;


/* 0, or -1 (what was made is left for tls_sessions_close). */
static int
tls_sessions_open(tls_sessions *t, const char *host)
{
    char                 ca[128], err[256];
    mrb_redis_tls_opts   o = { NULL, NULL, NULL, NULL };

    memset(t, 0, sizeof(tls_sessions));
    t->fds[0] = t->fds[1] = -1;

    if (tls_make_files(t->dir) != 0) {
        return -1;
    }

    snprintf(ca, sizeof(ca), "%s/ca.pem", t->dir);
    o.ca_file = ca;

    t->client_ctx = mrb_redis_tls_context(&o, err, sizeof(err));
    if (t->client_ctx == NULL || tls_pair(t->fds) != 0) {
        return -1;
    }

    t->client = mrb_redis_tls_open(t->client_ctx, t->fds[0], host, err,
                                   sizeof(err));
    t->server = tls_server(t->dir, t->fds[1], &t->server_ctx);

    return (t->client != NULL && t->server != NULL) ? 0 : -1;
}


static void
tls_sessions_close(tls_sessions *t)
{
    if (t->client != NULL) {
        mrb_redis_tls_close(t->client, 1);
    }
    SSL_free(t->server);
    SSL_CTX_free(t->server_ctx);
    SSL_CTX_free(t->client_ctx);
    if (t->fds[0] >= 0) {
        close(t->fds[0]);
        close(t->fds[1]);
    }
    if (t->dir[0] != '\0') {
        tls_remove_files(t->dir);
    }
}


TEST(redis_tls_talks_step_by_step_over_non_blocking_sockets)
{
    char                   err[256], buf[64];
    size_t                 done, got;
    tls_sessions           t;

    if (tls_sessions_open(&t, "127.0.0.1") != 0) {
        tls_sessions_close(&t);
        REQUIRE(!"sessions made");
    }

    CHECK_EQ(tls_handshake_both(t.client, t.server, err, sizeof(err)),
             MRB_REDIS_TLS_DONE);

    /* nothing to read yet: wait for it */
    CHECK_EQ(mrb_redis_tls_read(t.client, buf, sizeof(buf), &got, err,
                                sizeof(err)), MRB_REDIS_TLS_WANT_READ);
    CHECK_EQ(got, 0);

    done = 0;
    CHECK_EQ(mrb_redis_tls_write(t.client, "PING\r\n", 6, &done, err,
                                 sizeof(err)), MRB_REDIS_TLS_DONE);
    CHECK_EQ(done, 6);
    CHECK_EQ(SSL_read(t.server, buf, sizeof(buf)), 6);
    CHECK(memcmp(buf, "PING\r\n", 6) == 0);

    CHECK_EQ(SSL_write(t.server, "+PONG\r\n", 7), 7);
    CHECK_EQ(mrb_redis_tls_read(t.client, buf, sizeof(buf), &got, err,
                                sizeof(err)), MRB_REDIS_TLS_DONE);
    CHECK_EQ(got, 7);
    CHECK(memcmp(buf, "+PONG\r\n", 7) == 0);

    /* the server says goodbye: closed, not an error */
    SSL_shutdown(t.server);
    CHECK_EQ(mrb_redis_tls_read(t.client, buf, sizeof(buf), &got, err,
                                sizeof(err)), MRB_REDIS_TLS_CLOSED);

    tls_sessions_close(&t);
}


TEST(redis_tls_refuses_a_certificate_of_another_address)
{
    char           err[256];
    tls_sessions   t;

    if (tls_sessions_open(&t, "127.0.0.2") != 0) {
        tls_sessions_close(&t);
        REQUIRE(!"sessions made");
    }

    CHECK_EQ(tls_handshake_both(t.client, t.server, err, sizeof(err)),
             MRB_REDIS_TLS_ERROR);
    CHECK(strstr(err, "TLS handshake: the server's certificate is refused: "
                      "IP address mismatch") != NULL);

    tls_sessions_close(&t);
}


TEST(redis_tls_context_says_which_file_is_wrong)
{
    char                 dir[64], ca[128], key[128], err[256];
    SSL_CTX             *ctx;
    mrb_redis_tls_opts   o = { NULL, NULL, NULL, NULL };

    o.ca_file = "/nonexistent/ca.pem";
    CHECK(mrb_redis_tls_context(&o, err, sizeof(err)) == NULL);
    CHECK(strcmp(err, "/nonexistent/ca.pem: No such file or directory")
          == 0);

    REQUIRE(tls_make_files(dir) == 0);
    snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
    snprintf(key, sizeof(key), "%s/server.key", dir);

    /* a certificate without its key */
    o.ca_file = ca;
    o.cert = ca;
    CHECK(mrb_redis_tls_context(&o, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "give both cert and key") != NULL);

    /* a key that is not the certificate's */
    o.key = key;
    CHECK(mrb_redis_tls_context(&o, err, sizeof(err)) == NULL);
    CHECK(strstr(err, key) != NULL);

    /* the CA file as the key: not a key */
    o.key = ca;
    CHECK(mrb_redis_tls_context(&o, err, sizeof(err)) == NULL);
    CHECK(strncmp(err, ca, strlen(ca)) == 0);

    o.cert = NULL;
    o.key = NULL;
    ctx = mrb_redis_tls_context(&o, err, sizeof(err));
    CHECK(ctx != NULL);
    SSL_CTX_free(ctx);

    tls_remove_files(dir);
}
