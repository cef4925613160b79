/*
 * Redis connections (see mrb_redis_conn.h).
 *
 * The timeout is a deadline for a whole command (or pipeline): its writes
 * and reads together, and the reconnection when a kept connection is found
 * broken.  A socket timeout (SO_RCVTIMEO) would bound each read only, and a
 * server that trickles a byte at a time would hold the request forever; so
 * the socket is non-blocking once connected, and every wait for it is a
 * poll() bounded by the time left.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "mrb_redis_conn.h"


static uint64_t
redis_now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}


static struct timeval
redis_tv(unsigned ms)
{
    struct timeval  tv;

    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    return tv;
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


/* Records why ctx failed ("connect to host:port: reason", "host:port:
 * reason"), drops the connection, and classifies the failure. */
static mrb_redis_status
redis_fail(mrb_redis_conn *c, const char *what, int saved_errno)
{
    mrb_redis_status  st;

    st = redis_is_timeout(c->ctx, saved_errno) ? MRB_REDIS_ETIMEOUT
                                               : MRB_REDIS_ECONNECT;

    snprintf(c->err, sizeof(c->err), "%s%s:%d: %s", what, c->host, c->port,
             (st == MRB_REDIS_ETIMEOUT)
             ? "timed out" : (c->ctx->errstr[0] ? c->ctx->errstr
                                                : "connection closed"));

    mrb_redis_conn_close(c);
    return st;
}


mrb_redis_conn *
mrb_redis_conn_new(const char *host, int port, unsigned timeout_ms)
{
    mrb_redis_conn  *c;

    c = calloc(1, sizeof(mrb_redis_conn));
    if (c == NULL) {
        return NULL;
    }

    c->host = strdup(host);
    if (c->host == NULL) {
        free(c);
        return NULL;
    }

    c->port = port;
    c->timeout_ms = timeout_ms;

    return c;
}


void
mrb_redis_conn_free(mrb_redis_conn *c)
{
    if (c == NULL) {
        return;
    }

    mrb_redis_conn_close(c);
    free(c->host);
    free(c);
}


void
mrb_redis_conn_close(mrb_redis_conn *c)
{
    if (c->ctx == NULL) {
        return;
    }

    if (c->pid != getpid()) {
        /* the parent's socket: closing our copy of the descriptor is all
         * this process may do with it */
        close(c->ctx->fd);
        c->ctx->fd = -1;
    }

    redisFree(c->ctx);
    c->ctx = NULL;
    c->dirty = 0;
    c->in_tx = 0;
}


int
mrb_redis_conn_connected(mrb_redis_conn *c)
{
    return c->ctx != NULL && c->ctx->err == 0 && c->pid == getpid();
}


void
mrb_redis_conn_set_timeout(mrb_redis_conn *c, unsigned timeout_ms)
{
    c->timeout_ms = timeout_ms;
}


/* hiredis drives a context without REDIS_BLOCK as a non-blocking one: a
 * read or write that would block is "no progress yet", not an error. */
static int
redis_set_nonblocking(redisContext *ctx)
{
    int  flags = fcntl(ctx->fd, F_GETFL);

    if (flags == -1 || fcntl(ctx->fd, F_SETFL, flags | O_NONBLOCK) == -1) {
        return -1;
    }

    ctx->flags &= ~REDIS_BLOCK;
    return 0;
}


static mrb_redis_status
redis_timed_out(mrb_redis_conn *c)
{
    snprintf(c->err, sizeof(c->err), "%s:%d: timed out",
             c->host, c->port);
    mrb_redis_conn_close(c);
    return MRB_REDIS_ETIMEOUT;
}


/* Waits until c's socket is ready for events: 1, or 0 when the deadline
 * (ms) passed, or -1 on a poll error. */
static int
redis_wait(mrb_redis_conn *c, short events, uint64_t deadline)
{
    struct pollfd  pfd;
    uint64_t       now;
    int            rc;

    for ( ;; ) {
        now = redis_now_ms();
        if (now >= deadline) {
            return 0;
        }

        pfd.fd = c->ctx->fd;
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


/* Connects unless connected, by deadline (ms). */
static mrb_redis_status
redis_open_by(mrb_redis_conn *c, uint64_t deadline)
{
    int       saved;
    uint64_t  now;

    if (mrb_redis_conn_connected(c)) {
        return MRB_REDIS_OK;
    }

    mrb_redis_conn_close(c);

    if (c->retry_at != 0 && redis_now_ms() < c->retry_at) {
        /* c->err still says why the last attempt failed */
        return MRB_REDIS_ECONNECT;
    }

    now = redis_now_ms();
    if (now >= deadline) {
        snprintf(c->err, sizeof(c->err), "connect to %s:%d: timed out",
                 c->host, c->port);
        return MRB_REDIS_ETIMEOUT;
    }

    c->ctx = redisConnectWithTimeout(c->host, c->port,
                                     redis_tv((unsigned) (deadline - now)));
    saved = errno;

    if (c->ctx == NULL) {
        snprintf(c->err, sizeof(c->err), "connect to %s:%d: out of memory",
                 c->host, c->port);
        c->retry_at = redis_now_ms() + MRB_REDIS_RETRY_INTERVAL;
        return MRB_REDIS_ECONNECT;
    }

    c->pid = getpid();

    if (c->ctx->err != 0 || redis_set_nonblocking(c->ctx) != 0) {
        saved = c->ctx->err != 0 ? saved : errno;
        c->retry_at = redis_now_ms() + MRB_REDIS_RETRY_INTERVAL;
        return redis_fail(c, "connect to ", saved);
    }

    redisEnableKeepAlive(c->ctx);
    c->retry_at = 0;
    c->err[0] = '\0';

    return MRB_REDIS_OK;
}


mrb_redis_status
mrb_redis_conn_open(mrb_redis_conn *c)
{
    return redis_open_by(c, redis_now_ms() + c->timeout_ms);
}


/* One attempt: write everything, read n replies, by deadline (ms).  *got
 * says how many replies arrived before a failure. */
static mrb_redis_status
redis_exec_once(mrb_redis_conn *c, const char *cmds, size_t len, size_t n,
    redisReply **replies, size_t *got, uint64_t deadline)
{
    int    done, ready;
    void  *reply;

    *got = 0;

    if (redisAppendFormattedCommand(c->ctx, cmds, len) != REDIS_OK) {
        return redis_fail(c, "", errno);
    }

    for ( ;; ) {
        if (redisBufferWrite(c->ctx, &done) != REDIS_OK) {
            return redis_fail(c, "", errno);
        }

        if (done) {
            break;
        }

        ready = redis_wait(c, POLLOUT, deadline);
        if (ready <= 0) {
            return ready == 0 ? redis_timed_out(c) : redis_fail(c, "", errno);
        }
    }

    while (*got < n) {
        if (redisGetReplyFromReader(c->ctx, &reply) != REDIS_OK) {
            return redis_fail(c, "", errno);
        }

        if (reply != NULL) {
            replies[(*got)++] = reply;
            continue;
        }

        ready = redis_wait(c, POLLIN, deadline);
        if (ready <= 0) {
            return ready == 0 ? redis_timed_out(c) : redis_fail(c, "", errno);
        }

        if (redisBufferRead(c->ctx) != REDIS_OK) {
            return redis_fail(c, "", errno);
        }
    }

    return MRB_REDIS_OK;
}


mrb_redis_status
mrb_redis_conn_exec(mrb_redis_conn *c, const char *cmds, size_t len,
    size_t n, redisReply **replies)
{
    int               reused;
    size_t            got, i;
    uint64_t          deadline;
    mrb_redis_status  st;

    deadline = redis_now_ms() + c->timeout_ms;
    reused = mrb_redis_conn_connected(c);

    st = redis_open_by(c, deadline);
    if (st != MRB_REDIS_OK) {
        return st;
    }

    st = redis_exec_once(c, cmds, len, n, replies, &got, deadline);

    /* a kept connection the server closed meanwhile (restart, idle
     * timeout) fails at once, before any reply: the commands never ran */
    if (st == MRB_REDIS_ECONNECT && reused && got == 0) {
        st = redis_open_by(c, deadline);
        if (st == MRB_REDIS_OK) {
            st = redis_exec_once(c, cmds, len, n, replies, &got, deadline);
        }
    }

    if (st != MRB_REDIS_OK) {
        for (i = 0; i < got; i++) {
            freeReplyObject(replies[i]);
        }
    }

    return st;
}
