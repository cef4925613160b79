/*
 * A Redis connection on hiredis, as the Ruby class uses it: connected on
 * demand, dropped after any I/O error or timeout (its reply stream is then
 * out of step) and at the end of a request that left it in a state of its
 * own (a transaction, another database, a subscription), reconnected once when a command finds it broken, and never
 * used by a process other than the one that opened it (a connection made
 * before a fork belongs to the parent).
 */

#ifndef MRB_REDIS_CONN_H
#define MRB_REDIS_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <hiredis/hiredis.h>

#include "mrb_errbuf.h"

typedef enum {
    MRB_REDIS_OK = 0,
    MRB_REDIS_ECONNECT,   /* cannot connect, or the connection broke */
    MRB_REDIS_ETIMEOUT    /* connect, write or read took too long */
} mrb_redis_status;

/* After a failed connect, further attempts fail at once for this long (ms),
 * so that a script failing open does not wait on a dead server for every
 * request. */
#define MRB_REDIS_RETRY_INTERVAL  1000

typedef struct {
    redisContext  *ctx;
    char          *host;
    int            port;
    unsigned       timeout_ms;
    pid_t          pid;         /* the process ctx belongs to */
    uint64_t       retry_at;    /* ms: no connect attempt before */
    unsigned       dirty:1;     /* a request put it in a state of its own
                                   (SELECT, SUBSCRIBE, CLIENT REPLY, ...) */
    unsigned       in_tx:1;     /* MULTI or WATCH without EXEC / DISCARD */
    char           err[MRB_ERR_REASON_LEN]; /* why the last call failed */
} mrb_redis_conn;

mrb_redis_conn *mrb_redis_conn_new(const char *host, int port,
    unsigned timeout_ms);
void mrb_redis_conn_free(mrb_redis_conn *c);

/* Connects unless connected; returns MRB_REDIS_OK or the failure (c->err). */
mrb_redis_status mrb_redis_conn_open(mrb_redis_conn *c);
void mrb_redis_conn_close(mrb_redis_conn *c);
int mrb_redis_conn_connected(mrb_redis_conn *c);

/* The deadline of each later command (or pipeline) as a whole, and of a
 * connect. */
void mrb_redis_conn_set_timeout(mrb_redis_conn *c, unsigned timeout_ms);

/*
 * Sends n formatted commands (len bytes at cmds) and reads their n replies
 * into replies[] (each freed by the caller with freeReplyObject).  A
 * connection found broken before the first reply arrives is reopened and
 * the commands sent again, once.  On failure no reply is returned.
 */
mrb_redis_status mrb_redis_conn_exec(mrb_redis_conn *c, const char *cmds,
    size_t len, size_t n, redisReply **replies);

#endif /* MRB_REDIS_CONN_H */
