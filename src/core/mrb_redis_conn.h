/*
 * Redis connections on hiredis, as the Ruby class uses them: one
 * mrb_redis_conn per server (host and port, or Unix socket), user and TLS
 * files in an interpreter, holding the links (sockets) to that server.
 * Every link a connection opens is alike: TLS when it says so
 * (mrb_redis_tls.h), then its AUTH, then what startup scripts set.
 *
 * A command takes an idle link (or opens one), sends, reads its replies,
 * and gives the link back.  While a request's run waits for a reply (on
 * nginx the run is suspended and others go on: mrb_wait_fd), its link is
 * its own; another run that sends meanwhile takes another link, so replies
 * never cross between requests.  One run at a time, as under Apache, uses
 * one link: the connection of the original client.
 *
 * A link is dropped after any I/O error or timeout (its reply stream is
 * then out of step), when the run waiting on it is cancelled (its reply
 * would reach the next command), and at the end of a request that left it
 * in a state of its own (a transaction, another database, a
 * subscription): until then it stays that run's.  A link found broken
 * before any reply is reopened once.  A link is never used by a process
 * other than the one that opened it (one made before a fork belongs to the
 * parent).  What a startup script set on purpose (SELECT, AUTH, CLIENT
 * SETNAME) is sent again on every link opened later, so that all links
 * are alike.
 */

#ifndef MRB_REDIS_CONN_H
#define MRB_REDIS_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <hiredis/hiredis.h>

#include "mrb_errbuf.h"
#include "mrb_redis_tls.h"

typedef enum {
    MRB_REDIS_OK = 0,
    MRB_REDIS_ECONNECT,   /* cannot connect, or the connection broke */
    MRB_REDIS_ETIMEOUT,   /* connect, write or read took too long */
    MRB_REDIS_ECANCELLED, /* the waiting run was cancelled (the link is
                             closed); the caller raises Cancelled */
    MRB_REDIS_EPROTOCOL,  /* what the server sent is not Redis's protocol
                             (the link is closed) */
    MRB_REDIS_EOOM,       /* hiredis ran out of memory on the link (closed) */
    MRB_REDIS_EAUTH       /* the server refused the connection's AUTH (the
                             link is closed); err has the server's reason,
                             never the credentials */
} mrb_redis_status;

/* After a failed connect, further attempts fail at once for this long (ms),
 * so that a script failing open does not wait on a dead server for every
 * request. */
#define MRB_REDIS_RETRY_INTERVAL  1000

/* Idle links kept per server; more are closed when given back. */
#define MRB_REDIS_KEEP_IDLE  16

/*
 * How a command waits for its socket (events: POLLIN or POLLOUT): returns
 * 1 ready, 0 when ms passed, -1 on error (errno), or
 * MRB_REDIS_WAIT_CANCELLED when the run goes away.
 */
typedef int (*mrb_redis_wait_pt)(void *arg, int fd, int events, unsigned ms);

#define MRB_REDIS_WAIT_CANCELLED  (-2)

/* What a command leaves its link in (mrb_redis_caller.state). */
#define MRB_REDIS_STATE_DIRTY     1  /* SELECT, SUBSCRIBE, CLIENT REPLY...:
                                        the link stays the run's, dropped
                                        when the run ends */
#define MRB_REDIS_STATE_TX_BEGIN  2  /* MULTI, WATCH: the run's until ... */
#define MRB_REDIS_STATE_TX_END    4  /* ... EXEC or DISCARD (last wins) */

/* Who sends: owner is the run (any pointer that names it while it lives;
 * NULL: nobody's), wait NULL polls; deadline (ms, mrb_redis_now_ms) ends
 * the command sooner than the connection's timeout would (0: no sooner). */
typedef struct {
    const void         *owner;
    unsigned            state;
    mrb_redis_wait_pt   wait;
    void               *wait_arg;
    uint64_t            deadline;
} mrb_redis_caller;

typedef struct mrb_redis_link_s  mrb_redis_link;

struct mrb_redis_link_s {
    redisContext    *ctx;         /* its socket, and the reply parser */
    SSL             *ssl;         /* TLS over ctx's socket, or NULL */
    pid_t            pid;         /* the process ctx belongs to */
    const void      *owner;       /* the run using or holding it, or NULL */
    unsigned         busy:1;      /* a command is in flight */
    unsigned         dirty:1;     /* a request put it in a state of its own */
    unsigned         in_tx:1;     /* MULTI or WATCH without EXEC / DISCARD */
    mrb_redis_link  *next;
};

typedef struct {
    char            *host;        /* NULL for a Unix socket */
    int              port;
    char            *path;        /* the Unix socket, or NULL */
    char            *name;        /* "host:port" or the path, for messages */
    char            *auth;        /* AUTH [user] password, formatted: sent
                                     first on every link; a secret, wiped
                                     when freed */
    size_t           auth_len;
    size_t           auth_password_len;
    SSL_CTX         *tls;         /* every link is TLS, or NULL */
    unsigned         timeout_ms;
    uint64_t         retry_at;    /* ms: no connect attempt before */
    mrb_redis_link  *links;
    char            *setup;       /* startup's stateful commands, formatted */
    size_t           setup_len;
    size_t           setup_n;
    unsigned         maybe_ran:1; /* after a failed exec: the server may
                                     have run the commands (they were sent
                                     on a link that then broke); 0 after
                                     an open, which sends none */
    char             err[MRB_ERR_REASON_LEN]; /* why the last call failed */
} mrb_redis_conn;

/* A connection to host:port, or (mrb_redis_conn_new_unix) to the Unix
 * socket at path; NULL out of memory.  Freed by mrb_redis_conn_free. */
mrb_redis_conn *mrb_redis_conn_new(const char *host, int port,
    unsigned timeout_ms);
mrb_redis_conn *mrb_redis_conn_new_unix(const char *path,
    unsigned timeout_ms);
void mrb_redis_conn_free(mrb_redis_conn *c);

/* Every link opened later sends AUTH username password (AUTH password
 * when username is NULL) first, and fails with MRB_REDIS_EAUTH when the
 * server refuses it.  Returns 0, -1 out of memory. */
int mrb_redis_conn_set_auth(mrb_redis_conn *c, const char *username,
    const char *password);

/* Whether c sends that AUTH (none: password NULL). */
int mrb_redis_conn_auth_is(mrb_redis_conn *c, const char *username,
    const char *password);

/* Every link opened later speaks TLS (over TCP), trusting and presenting
 * what o names, which is read now: 0, or -1 with the reason in err. */
int mrb_redis_conn_set_tls(mrb_redis_conn *c, const mrb_redis_tls_opts *o,
    char *err, size_t errlen);

/* Opens a link unless one is idle; returns MRB_REDIS_OK or the failure
 * (c->err).  caller may be NULL (poll, nobody's). */
mrb_redis_status mrb_redis_conn_open(mrb_redis_conn *c,
    const mrb_redis_caller *caller);

/* Closes the idle links and those owner holds (not another run's: it may
 * be inside MULTI, waiting). */
void mrb_redis_conn_close(mrb_redis_conn *c, const void *owner);

/* Whether a link of this process is open. */
int mrb_redis_conn_connected(mrb_redis_conn *c);

/* Whether owner holds a link of c (a transaction or a state of its own
 * that lasts from one command to the next). */
int mrb_redis_conn_holds(mrb_redis_conn *c, const void *owner);

/* The monotonic clock of deadlines, in ms. */
uint64_t mrb_redis_now_ms(void);

/* Closes the links owner holds (its run ended); returns how many links
 * other runs still hold. */
unsigned mrb_redis_conn_release(mrb_redis_conn *c, const void *owner);

/* Adds a formatted command (a startup script's SELECT, AUTH, ...) to
 * those every link opened later sends first.  Returns 0, -1 out of
 * memory. */
int mrb_redis_conn_add_setup(mrb_redis_conn *c, const char *cmd, size_t len);

/* The deadline of each later command (or pipeline) as a whole, and of a
 * connect. */
void mrb_redis_conn_set_timeout(mrb_redis_conn *c, unsigned timeout_ms);

/*
 * Sends n formatted commands (len bytes at cmds) on a link of caller's
 * (the one its run holds, an idle one, or a new one) and reads their n
 * replies into replies[] (each freed by the caller with freeReplyObject).
 * A link found broken before the first reply arrives is reopened and the
 * commands sent again, once.  On failure no reply is returned, and
 * c->maybe_ran says whether the server may have run them.
 */
mrb_redis_status mrb_redis_conn_exec(mrb_redis_conn *c,
    const mrb_redis_caller *caller, const char *cmds, size_t len, size_t n,
    redisReply **replies);

#endif /* MRB_REDIS_CONN_H */
