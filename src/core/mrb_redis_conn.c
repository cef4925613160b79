/*
 * Redis connections (see mrb_redis_conn.h).
 *
 * The timeout is a deadline for a whole command (or pipeline): its writes
 * and reads together, and the reconnection when a kept link is found
 * broken.  A socket timeout (SO_RCVTIMEO) would bound each read only, and a
 * server that trickles a byte at a time would hold the request forever; so
 * every socket is non-blocking from its connect on, and every wait for it
 * goes through the caller's wait function (a suspended run on nginx,
 * mrb_wait_fd) or a poll(), bounded by the time left.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE  /* memmem */
#endif

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include "mrb_redis_conn.h"


uint64_t
mrb_redis_now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}


/* hiredis reports a timeout as an I/O error whose errno was EAGAIN (read,
 * write) or ETIMEDOUT (connect); errno may have moved on since, so its text
 * is what is left to go by.  A connection the server closed is its own
 * error (EOF), whatever errno was left from earlier calls. */
static int
redis_is_timeout(redisContext *ctx, int saved_errno)
{
    if (ctx->err == REDIS_ERR_EOF) {
        return 0;
    }

    return saved_errno == EAGAIN || saved_errno == EWOULDBLOCK
           || saved_errno == ETIMEDOUT || saved_errno == EINPROGRESS
           || strcmp(ctx->errstr, strerror(EAGAIN)) == 0
           || strcmp(ctx->errstr, strerror(ETIMEDOUT)) == 0
           || strcmp(ctx->errstr, strerror(EINPROGRESS)) == 0;
}


/* Frees link, which is not in c's list (any more). */
static void
redis_link_free(mrb_redis_link *link)
{
    if (link->ssl != NULL) {
        mrb_redis_tls_close(link->ssl, link->pid == getpid());
    }

    if (link->ctx != NULL) {
        if (link->pid != getpid()) {
            /* the parent's socket: closing our copy of the descriptor is
             * all this process may do with it */
            close(link->ctx->fd);
            link->ctx->fd = -1;
        }
        redisFree(link->ctx);
    }

    free(link);
}


/* Takes link out of c's list and frees it. */
static void
redis_link_close(mrb_redis_conn *c, mrb_redis_link *link)
{
    mrb_redis_link  **lp;

    for (lp = &c->links; *lp != NULL; lp = &(*lp)->next) {
        if (*lp == link) {
            *lp = link->next;
            break;
        }
    }

    redis_link_free(link);
}


/* Records why link failed ("connect to host:port: reason", "host:port:
 * reason"), closes it, and classifies the failure. */
static mrb_redis_status
redis_fail(mrb_redis_conn *c, mrb_redis_link *link, const char *what,
    int saved_errno)
{
    mrb_redis_status  st;

    if (link->ctx->err == REDIS_ERR_PROTOCOL) {
        st = MRB_REDIS_EPROTOCOL;
    } else if (link->ctx->err == REDIS_ERR_OOM) {
        st = MRB_REDIS_EOOM;
    } else {
        st = redis_is_timeout(link->ctx, saved_errno) ? MRB_REDIS_ETIMEOUT
                                                      : MRB_REDIS_ECONNECT;
    }

    snprintf(c->err, sizeof(c->err), "%s%s: %s", what, c->name,
             (st == MRB_REDIS_ETIMEOUT)
             ? "timed out" : (link->ctx->errstr[0] ? link->ctx->errstr
                                                   : "connection closed"));

    redis_link_close(c, link);
    return st;
}


/* The end of a wait that did not find the socket ready: the time passed,
 * the wait failed, or the run was cancelled.  link is closed: a reply may
 * be on its way. */
static mrb_redis_status
redis_wait_failed(mrb_redis_conn *c, mrb_redis_link *link, const char *what,
    int rc)
{
    if (rc == MRB_REDIS_WAIT_CANCELLED) {
        snprintf(c->err, sizeof(c->err), "%s%s: cancelled", what,
                 c->name);
        redis_link_close(c, link);
        return MRB_REDIS_ECANCELLED;
    }

    if (rc < 0) {
        return redis_fail(c, link, what, errno);
    }

    snprintf(c->err, sizeof(c->err), "%s%s: timed out", what,
             c->name);
    redis_link_close(c, link);
    return MRB_REDIS_ETIMEOUT;
}


/* A connection named name (a copy is kept), not connected yet. */
static mrb_redis_conn *
redis_conn_alloc(const char *name, unsigned timeout_ms)
{
    mrb_redis_conn  *c;

    c = calloc(1, sizeof(mrb_redis_conn));
    if (c == NULL) {
        return NULL;
    }

    c->name = strdup(name);
    if (c->name == NULL) {
        free(c);
        return NULL;
    }

    c->timeout_ms = timeout_ms;
    return c;
}


mrb_redis_conn *
mrb_redis_conn_new(const char *host, int port, unsigned timeout_ms)
{
    char             name[MRB_ERR_REASON_LEN];
    mrb_redis_conn  *c;

    snprintf(name, sizeof(name), "%s:%d", host, port);

    c = redis_conn_alloc(name, timeout_ms);
    if (c == NULL) {
        return NULL;
    }

    c->host = strdup(host);
    if (c->host == NULL) {
        mrb_redis_conn_free(c);
        return NULL;
    }

    c->port = port;
    return c;
}


mrb_redis_conn *
mrb_redis_conn_new_unix(const char *path, unsigned timeout_ms)
{
    mrb_redis_conn  *c;

    c = redis_conn_alloc(path, timeout_ms);
    if (c == NULL) {
        return NULL;
    }

    c->path = strdup(path);
    if (c->path == NULL) {
        mrb_redis_conn_free(c);
        return NULL;
    }

    return c;
}


/* Frees the formatted AUTH, wiped first: it holds the password. */
static void
redis_auth_free(mrb_redis_conn *c)
{
    if (c->auth != NULL) {
        explicit_bzero(c->auth, c->auth_len);
        free(c->auth);
        c->auth = NULL;
        c->auth_len = 0;
        c->auth_password_len = 0;
    }
}


/* AUTH [username] password, formatted into *cmd (freed with
 * redisFreeCommand, wiped first): its length, or -1 out of memory.
 * *password_len: the length of its last argument. */
static int
redis_auth_format(char **cmd, const char *username, const char *password,
    size_t *password_len)
{
    int          n = 0;
    const char  *argv[3];
    size_t       lens[3];

    argv[n] = "AUTH";
    lens[n++] = 4;

    if (username != NULL) {
        argv[n] = username;
        lens[n++] = strlen(username);
    }

    argv[n] = password;
    lens[n++] = strlen(password);

    *password_len = lens[n - 1];
    return redisFormatCommandArgv(cmd, n, argv, lens);
}


int
mrb_redis_conn_set_auth(mrb_redis_conn *c, const char *username,
    const char *password)
{
    int      len;
    char    *cmd;
    size_t   password_len;

    len = redis_auth_format(&cmd, username, password, &password_len);
    if (len < 0) {
        return -1;
    }

    redis_auth_free(c);

    /* a copy of ours, so that it is wiped when freed */
    c->auth = malloc((size_t) len);
    if (c->auth != NULL) {
        memcpy(c->auth, cmd, (size_t) len);
        c->auth_len = (size_t) len;
        c->auth_password_len = password_len;
    }

    explicit_bzero(cmd, (size_t) len);
    redisFreeCommand(cmd);

    return c->auth != NULL ? 0 : -1;
}


int
mrb_redis_conn_auth_is(mrb_redis_conn *c, const char *username,
    const char *password)
{
    int      len, same;
    char    *cmd;
    size_t   password_len;

    if (password == NULL) {
        return c->auth == NULL;
    }

    len = redis_auth_format(&cmd, username, password, &password_len);
    if (len < 0) {
        return 0;
    }

    same = c->auth != NULL && c->auth_len == (size_t) len
           && memcmp(c->auth, cmd, (size_t) len) == 0;

    explicit_bzero(cmd, (size_t) len);
    redisFreeCommand(cmd);
    return same;
}


int
mrb_redis_conn_set_tls(mrb_redis_conn *c, const mrb_redis_tls_opts *o,
    char *err, size_t errlen)
{
    SSL_CTX  *tls;

    tls = mrb_redis_tls_context(o, err, errlen);
    if (tls == NULL) {
        return -1;
    }

    SSL_CTX_free(c->tls);
    c->tls = tls;
    return 0;
}


void
mrb_redis_conn_free(mrb_redis_conn *c)
{
    mrb_redis_link  *link, *next;

    if (c == NULL) {
        return;
    }

    for (link = c->links; link != NULL; link = next) {
        next = link->next;
        redis_link_free(link);
    }

    redis_auth_free(c);
    SSL_CTX_free(c->tls);
    if (c->setup != NULL) {
        /* a startup script's AUTH may be in it */
        explicit_bzero(c->setup, c->setup_len);
    }
    free(c->setup);
    free(c->host);
    free(c->path);
    free(c->name);
    free(c);
}


void
mrb_redis_conn_close(mrb_redis_conn *c, const void *owner)
{
    mrb_redis_link  *link, *next;

    for (link = c->links; link != NULL; link = next) {
        next = link->next;
        if (!link->busy && (link->owner == NULL || link->owner == owner)) {
            redis_link_close(c, link);
        }
    }
}


static int
redis_link_usable(mrb_redis_link *link)
{
    return link->ctx->err == 0 && link->pid == getpid();
}


int
mrb_redis_conn_connected(mrb_redis_conn *c)
{
    mrb_redis_link  *link;

    for (link = c->links; link != NULL; link = link->next) {
        if (redis_link_usable(link)) {
            return 1;
        }
    }

    return 0;
}


int
mrb_redis_conn_holds(mrb_redis_conn *c, const void *owner)
{
    mrb_redis_link  *link;

    for (link = c->links; link != NULL; link = link->next) {
        if (owner != NULL && link->owner == owner) {
            return 1;
        }
    }

    return 0;
}


unsigned
mrb_redis_conn_release(mrb_redis_conn *c, const void *owner)
{
    unsigned         held = 0;
    mrb_redis_link  *link, *next;

    for (link = c->links; link != NULL; link = next) {
        next = link->next;

        if (link->owner == NULL || link->busy) {
            continue;
        }

        if (link->owner == owner) {
            redis_link_close(c, link);
        } else {
            held++;
        }
    }

    return held;
}


void
mrb_redis_conn_set_timeout(mrb_redis_conn *c, unsigned timeout_ms)
{
    c->timeout_ms = timeout_ms;
}


/* The list grows into a new block, not by realloc: the old one may hold a
 * startup script's AUTH, and realloc would free it unwiped. */
int
mrb_redis_conn_add_setup(mrb_redis_conn *c, const char *cmd, size_t len)
{
    char  *p;

    p = malloc(c->setup_len + len);
    if (p == NULL) {
        return -1;
    }

    if (c->setup != NULL) {
        memcpy(p, c->setup, c->setup_len);
        explicit_bzero(c->setup, c->setup_len);
        free(c->setup);
    }

    memcpy(p + c->setup_len, cmd, len);
    c->setup = p;
    c->setup_len += len;
    c->setup_n++;
    return 0;
}


/* Waits until link's socket is ready for events: 1, or what the wait
 * returned instead (0: the deadline, in ms, passed). */
static int
redis_wait(const mrb_redis_caller *caller, mrb_redis_link *link,
    short events, uint64_t deadline)
{
    struct pollfd  pfd;
    uint64_t       now;
    int            rc;

    for ( ;; ) {
        now = mrb_redis_now_ms();
        if (now >= deadline) {
            return 0;
        }

        if (caller != NULL && caller->wait != NULL) {
            return caller->wait(caller->wait_arg, link->ctx->fd, events,
                                (unsigned) (deadline - now));
        }

        pfd.fd = link->ctx->fd;
        pfd.events = events;
        pfd.revents = 0;

        rc = poll(&pfd, 1, (int) (deadline - now));
        if (rc > 0) {
            return 1;
        }

        if (rc == 0) {
            return 0;
        }

        if (errno != EINTR) {
            return -1;
        }
    }
}


/* Room for OpenSSL's reason, which c->err gets after the connection's
 * name. */
#define REDIS_TLS_REASON_LEN  (MRB_ERR_REASON_LEN / 2)

/* Waits for link's socket as a TLS step asked (st); any other st is
 * the failure reason says.  MRB_REDIS_OK when ready, else link is
 * closed. */
static mrb_redis_status
redis_tls_wait(mrb_redis_conn *c, const mrb_redis_caller *caller,
    mrb_redis_link *link, const char *what, mrb_redis_tls_status st,
    const char *reason, uint64_t deadline)
{
    int  ready;

    if (st == MRB_REDIS_TLS_WANT_READ || st == MRB_REDIS_TLS_WANT_WRITE) {
        ready = redis_wait(caller, link,
                           st == MRB_REDIS_TLS_WANT_READ ? POLLIN : POLLOUT,
                           deadline);
        return ready == 1 ? MRB_REDIS_OK
                          : redis_wait_failed(c, link, what, ready);
    }

    snprintf(c->err, sizeof(c->err), "%s%s: %s", what, c->name, reason);
    redis_link_close(c, link);
    return MRB_REDIS_ECONNECT;
}


/* Writes len bytes at cmds on link by deadline (ms). */
static mrb_redis_status
redis_link_send(mrb_redis_conn *c, const mrb_redis_caller *caller,
    mrb_redis_link *link, const char *cmds, size_t len, uint64_t deadline)
{
    int                    ready;
    size_t                 sent;
    ssize_t                n;
    mrb_redis_status       st;
    mrb_redis_tls_status   ts;
    char                   reason[REDIS_TLS_REASON_LEN];

    if (link->ssl != NULL) {
        sent = 0;

        while (sent < len) {
            ts = mrb_redis_tls_write(link->ssl, cmds + sent, len - sent,
                                     &sent, reason, sizeof(reason));
            if (ts != MRB_REDIS_TLS_DONE) {
                st = redis_tls_wait(c, caller, link, "", ts, reason,
                                    deadline);
                if (st != MRB_REDIS_OK) {
                    return st;
                }
            }
        }

        return MRB_REDIS_OK;
    }

    /* straight from cmds, not through hiredis' output buffer, which
     * hiredis frees unwiped: an AUTH's password is left in no freed
     * memory */
    for (sent = 0; sent < len; /* void */) {
        n = send(link->ctx->fd, cmds + sent, len - sent, MSG_NOSIGNAL);
        if (n >= 0) {
            sent += (size_t) n;
            continue;
        }

        if (errno == EINTR) {
            continue;
        }

        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            snprintf(c->err, sizeof(c->err), "%s: %s", c->name,
                     strerror(errno));
            redis_link_close(c, link);
            return MRB_REDIS_ECONNECT;
        }

        ready = redis_wait(caller, link, POLLOUT, deadline);
        if (ready != 1) {
            return redis_wait_failed(c, link, "", ready);
        }
    }

    return MRB_REDIS_OK;
}


/* Bytes decrypted at a time: what hiredis reads at a time. */
#define REDIS_TLS_READ  (16 * 1024)

/* Waits for more of the replies on link, by deadline (ms), and gives them
 * to its reader. */
static mrb_redis_status
redis_link_fill(mrb_redis_conn *c, const mrb_redis_caller *caller,
    mrb_redis_link *link, uint64_t deadline)
{
    int                    ready;
    size_t                 got;
    mrb_redis_status       st;
    mrb_redis_tls_status   ts;
    char                   buf[REDIS_TLS_READ];
    char                   reason[REDIS_TLS_REASON_LEN];

    if (link->ssl == NULL) {
        ready = redis_wait(caller, link, POLLIN, deadline);
        if (ready != 1) {
            return redis_wait_failed(c, link, "", ready);
        }

        return redisBufferRead(link->ctx) == REDIS_OK
               ? MRB_REDIS_OK : redis_fail(c, link, "", errno);
    }

    /* what OpenSSL holds decrypted already is read before any wait */
    for ( ;; ) {
        ts = mrb_redis_tls_read(link->ssl, buf, sizeof(buf), &got, reason,
                                sizeof(reason));
        if (ts == MRB_REDIS_TLS_DONE) {
            if (redisReaderFeed(link->ctx->reader, buf, got) != REDIS_OK) {
                snprintf(c->err, sizeof(c->err), "%s: out of memory",
                         c->name);
                redis_link_close(c, link);
                return MRB_REDIS_EOOM;
            }
            return MRB_REDIS_OK;
        }

        st = redis_tls_wait(c, caller, link, "", ts, reason, deadline);
        if (st != MRB_REDIS_OK) {
            return st;
        }
    }
}


/* One attempt on link: write everything, read n replies, by deadline (ms).
 * *got says how many replies arrived before a failure, which closed
 * link. */
static mrb_redis_status
redis_exec_once(mrb_redis_conn *c, const mrb_redis_caller *caller,
    mrb_redis_link *link, const char *cmds, size_t len, size_t n,
    redisReply **replies, size_t *got, uint64_t deadline)
{
    void              *reply;
    mrb_redis_status   st;

    *got = 0;

    st = redis_link_send(c, caller, link, cmds, len, deadline);
    if (st != MRB_REDIS_OK) {
        return st;
    }

    while (*got < n) {
        if (redisGetReplyFromReader(link->ctx, &reply) != REDIS_OK) {
            return redis_fail(c, link, "", errno);
        }

        if (reply != NULL) {
            replies[(*got)++] = reply;
            continue;
        }

        st = redis_link_fill(c, caller, link, deadline);
        if (st != MRB_REDIS_OK) {
            return st;
        }
    }

    return MRB_REDIS_OK;
}


/* Sends what startup scripts set (c->setup) on a new link; their replies,
 * error replies included, are dropped: the commands after them say. */
static mrb_redis_status
redis_link_setup(mrb_redis_conn *c, const mrb_redis_caller *caller,
    mrb_redis_link *link, uint64_t deadline)
{
    size_t             got, i;
    redisReply       **replies;
    mrb_redis_status   st;

    replies = calloc(c->setup_n, sizeof(redisReply *));
    if (replies == NULL) {
        snprintf(c->err, sizeof(c->err), "%s: out of memory",
                 c->name);
        redis_link_close(c, link);
        return MRB_REDIS_ECONNECT;
    }

    st = redis_exec_once(c, caller, link, c->setup, c->setup_len,
                         c->setup_n, replies, &got, deadline);

    for (i = 0; i < got; i++) {
        freeReplyObject(replies[i]);
    }

    free(replies);
    return st;
}


/* The TLS handshake on link's connected socket, by deadline (ms). */
static mrb_redis_status
redis_link_tls(mrb_redis_conn *c, const mrb_redis_caller *caller,
    mrb_redis_link *link, uint64_t deadline)
{
    mrb_redis_status       st;
    mrb_redis_tls_status   ts;
    char                   reason[REDIS_TLS_REASON_LEN];

    link->ssl = mrb_redis_tls_open(c->tls, link->ctx->fd, c->host, reason,
                                   sizeof(reason));
    if (link->ssl == NULL) {
        snprintf(c->err, sizeof(c->err), "connect to %s: %s", c->name,
                 reason);
        redis_link_close(c, link);
        return MRB_REDIS_ECONNECT;
    }

    for ( ;; ) {
        ts = mrb_redis_tls_handshake(link->ssl, reason, sizeof(reason));
        if (ts == MRB_REDIS_TLS_DONE) {
            return MRB_REDIS_OK;
        }

        st = redis_tls_wait(c, caller, link, "connect to ", ts, reason,
                            deadline);
        if (st != MRB_REDIS_OK) {
            return st;
        }
    }
}


/*
 * Sends the connection's AUTH on a new link.  A refusal closes the link
 * and says the server's reason, which names no credential (WRONGPASS
 * invalid username-password pair); should a server repeat the password,
 * its reason is left out.
 */
static mrb_redis_status
redis_link_auth(mrb_redis_conn *c, const mrb_redis_caller *caller,
    mrb_redis_link *link, uint64_t deadline)
{
    size_t             got;
    const char        *reason, *password;
    redisReply        *reply;
    mrb_redis_status   st;

    st = redis_exec_once(c, caller, link, c->auth, c->auth_len, 1, &reply,
                         &got, deadline);
    if (st != MRB_REDIS_OK) {
        return st;
    }

    if (reply->type != REDIS_REPLY_ERROR) {
        freeReplyObject(reply);
        return MRB_REDIS_OK;
    }

    /* the password is AUTH's last argument: "...$<n>\r\n<password>\r\n" */
    password = c->auth + c->auth_len - 2 - c->auth_password_len;
    reason = reply->str;

    if (c->auth_password_len != 0
        && memmem(reply->str, reply->len, password, c->auth_password_len)
           != NULL)
    {
        reason = "refused";
    }

    snprintf(c->err, sizeof(c->err), "%s: AUTH: %s", c->name, reason);
    freeReplyObject(reply);
    redis_link_close(c, link);
    return MRB_REDIS_EAUTH;
}


/*
 * Opens a new link by deadline (ms), in c's list, busy and caller's:
 * *linkp.  The connect does not block the thread: it is a non-blocking
 * connect() whose end the caller's wait watches (a name is resolved first,
 * which does block: give an address).
 */
static mrb_redis_status
redis_link_open(mrb_redis_conn *c, const mrb_redis_caller *caller,
    uint64_t deadline, mrb_redis_link **linkp)
{
    int                ready, err;
    socklen_t          errlen;
    mrb_redis_link    *link;
    mrb_redis_status   st;

    *linkp = NULL;

    if (c->retry_at != 0 && mrb_redis_now_ms() < c->retry_at) {
        /* c->err still says why the last attempt failed */
        return MRB_REDIS_ECONNECT;
    }

    if (mrb_redis_now_ms() >= deadline) {
        snprintf(c->err, sizeof(c->err), "connect to %s: timed out",
                 c->name);
        return MRB_REDIS_ETIMEOUT;
    }

    link = calloc(1, sizeof(mrb_redis_link));
    if (link == NULL) {
        snprintf(c->err, sizeof(c->err), "connect to %s: out of memory",
                 c->name);
        return MRB_REDIS_ECONNECT;
    }

    link->ctx = (c->path != NULL) ? redisConnectUnixNonBlock(c->path)
                                  : redisConnectNonBlock(c->host, c->port);
    link->pid = getpid();
    link->busy = 1;
    link->owner = caller != NULL ? caller->owner : NULL;

    if (link->ctx == NULL) {
        free(link);
        snprintf(c->err, sizeof(c->err), "connect to %s: out of memory",
                 c->name);
        c->retry_at = mrb_redis_now_ms() + MRB_REDIS_RETRY_INTERVAL;
        return MRB_REDIS_ECONNECT;
    }

    link->next = c->links;
    c->links = link;

    if (link->ctx->err != 0) {
        c->retry_at = mrb_redis_now_ms() + MRB_REDIS_RETRY_INTERVAL;
        return redis_fail(c, link, "connect to ", errno);
    }

    ready = redis_wait(caller, link, POLLOUT, deadline);
    if (ready != 1) {
        if (ready != MRB_REDIS_WAIT_CANCELLED) {
            c->retry_at = mrb_redis_now_ms() + MRB_REDIS_RETRY_INTERVAL;
        }
        return redis_wait_failed(c, link, "connect to ", ready);
    }

    err = 0;
    errlen = sizeof(err);
    if (getsockopt(link->ctx->fd, SOL_SOCKET, SO_ERROR, &err, &errlen) != 0) {
        err = errno;
    }

    if (err != 0) {
        c->retry_at = mrb_redis_now_ms() + MRB_REDIS_RETRY_INTERVAL;
        snprintf(c->err, sizeof(c->err), "connect to %s: %s",
                 c->name, strerror(err));
        redis_link_close(c, link);
        return err == ETIMEDOUT ? MRB_REDIS_ETIMEOUT : MRB_REDIS_ECONNECT;
    }

    if (c->path == NULL) {
        /* TCP's: on a Unix socket hiredis would fail the link */
        redisEnableKeepAlive(link->ctx);
    }

    if (c->tls != NULL) {
        st = redis_link_tls(c, caller, link, deadline);
        if (st != MRB_REDIS_OK) {
            c->retry_at = mrb_redis_now_ms() + MRB_REDIS_RETRY_INTERVAL;
            return st;
        }
    }

    c->retry_at = 0;
    c->err[0] = '\0';

    if (c->auth != NULL) {
        st = redis_link_auth(c, caller, link, deadline);
        if (st != MRB_REDIS_OK) {
            return st;
        }
    }

    if (c->setup_n != 0) {
        st = redis_link_setup(c, caller, link, deadline);
        if (st != MRB_REDIS_OK) {
            return st;
        }
    }

    *linkp = link;
    return MRB_REDIS_OK;
}


/* The link owner holds, or an idle one of this process, busy and owner's
 * now; NULL when there is none. */
static mrb_redis_link *
redis_link_take(mrb_redis_conn *c, const void *owner)
{
    mrb_redis_link  *link, *next, *idle = NULL;

    for (link = c->links; link != NULL; link = next) {
        next = link->next;

        if (link->busy) {
            continue;
        }

        if (owner != NULL && link->owner == owner) {
            idle = link;
            break;
        }

        if (link->owner != NULL) {
            continue;
        }

        if (!redis_link_usable(link)) {
            redis_link_close(c, link);
            continue;
        }

        if (idle == NULL) {
            idle = link;
        }
    }

    if (idle != NULL) {
        idle->busy = 1;
        idle->owner = owner;
    }

    return idle;
}


/* A command on link is over: it goes back, or stays the owner's while
 * the state the command left lasts. */
static void
redis_link_give_back(mrb_redis_conn *c, mrb_redis_link *link,
    unsigned state)
{
    unsigned         idle = 0;
    mrb_redis_link  *l;

    link->busy = 0;

    if (state & MRB_REDIS_STATE_TX_END) {
        link->in_tx = 0;
    }
    if (state & MRB_REDIS_STATE_TX_BEGIN) {
        link->in_tx = 1;
    }
    if (state & MRB_REDIS_STATE_DIRTY) {
        link->dirty = 1;
    }

    if (link->dirty || link->in_tx) {
        return;
    }

    link->owner = NULL;

    for (l = c->links; l != NULL; l = l->next) {
        idle += (l->owner == NULL && !l->busy);
    }

    if (idle > MRB_REDIS_KEEP_IDLE) {
        redis_link_close(c, link);
    }
}


mrb_redis_status
mrb_redis_conn_open(mrb_redis_conn *c, const mrb_redis_caller *caller)
{
    mrb_redis_link    *link;
    mrb_redis_status   st;
    const void        *owner = caller != NULL ? caller->owner : NULL;

    c->maybe_ran = 0;   /* an open sends no command */
    link = redis_link_take(c, owner);
    if (link == NULL) {
        st = redis_link_open(c, caller, mrb_redis_now_ms() + c->timeout_ms,
                             &link);
        if (st != MRB_REDIS_OK) {
            return st;
        }
    }

    redis_link_give_back(c, link, 0);
    return MRB_REDIS_OK;
}


mrb_redis_status
mrb_redis_conn_exec(mrb_redis_conn *c, const mrb_redis_caller *caller,
    const char *cmds, size_t len, size_t n, redisReply **replies)
{
    size_t             got, i;
    uint64_t           deadline;
    mrb_redis_link    *link;
    mrb_redis_status   st;

    deadline = mrb_redis_now_ms() + c->timeout_ms;
    if (caller != NULL && caller->deadline != 0
        && caller->deadline < deadline)
    {
        deadline = caller->deadline;
    }

    c->maybe_ran = 0;

    link = redis_link_take(c, caller != NULL ? caller->owner : NULL);
    if (link == NULL) {
        st = redis_link_open(c, caller, deadline, &link);
        if (st != MRB_REDIS_OK) {
            return st;
        }

        st = redis_exec_once(c, caller, link, cmds, len, n, replies, &got,
                             deadline);
        c->maybe_ran = (st != MRB_REDIS_OK);

    } else {
        st = redis_exec_once(c, caller, link, cmds, len, n, replies, &got,
                             deadline);
        c->maybe_ran = (st != MRB_REDIS_OK);

        /* a kept link the server closed meanwhile (restart, idle timeout,
         * a sentinel's CLIENT KILL) fails at once, before any reply: the
         * commands never ran */
        if (st == MRB_REDIS_ECONNECT && got == 0) {
            c->maybe_ran = 0;
            st = redis_link_open(c, caller, deadline, &link);
            if (st == MRB_REDIS_OK) {
                st = redis_exec_once(c, caller, link, cmds, len, n, replies,
                                     &got, deadline);
                c->maybe_ran = (st != MRB_REDIS_OK);
            }
        }
    }

    if (st != MRB_REDIS_OK) {
        for (i = 0; i < got; i++) {
            freeReplyObject(replies[i]);
        }
        return st;
    }

    redis_link_give_back(c, link, caller != NULL ? caller->state : 0);
    return MRB_REDIS_OK;
}
