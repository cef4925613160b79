/*
 * src/core/mrb_redis_conn.c against a real redis-server on loopback, one
 * per test: the once-only resend after the server closed a kept
 * connection, the one-second pause after a failed connect, a connection
 * made before a fork left to the parent, timeouts, and no password left
 * in freed memory (unit_secret.h).
 */

#define _GNU_SOURCE  /* memmem */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <hiredis/hiredis.h>

#include "mrb_redis_conn.h"
#include "unit.h"
#include "unit_secret.h"


#define REDIS_SERVER  "/usr/bin/redis-server"

/* A socket bound to a free loopback port, not listening: connects to it
 * are refused until it listens.  Returns the fd; *port is set. */
static int
bound_socket(int *port)
{
    struct sockaddr_in  sa;
    socklen_t           len = sizeof(sa);
    int                 fd, on = 1;

    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        return -1;
    }

    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0
        || getsockname(fd, (struct sockaddr *) &sa, &len) != 0)
    {
        close(fd);
        return -1;
    }

    *port = ntohs(sa.sin_port);
    return fd;
}


/* Starts redis-server on a free port (the reservation socket stays open
 * and bound: redis binds with SO_REUSEADDR) and waits until it answers. */
static pid_t
redis_start(int *port)
{
    char         portstr[16];
    pid_t        pid;
    int          i;
    redisContext *probe;

    if (bound_socket(port) < 0) {
        return -1;
    }

    snprintf(portstr, sizeof(portstr), "%d", *port);
    pid = fork();

    if (pid == 0) {
        freopen("/dev/null", "w", stdout);
        execl(REDIS_SERVER, REDIS_SERVER, "--bind", "127.0.0.1", "--port",
              portstr, "--save", "", "--appendonly", "no",
              "--protected-mode", "no", (char *) NULL);
        _exit(127);
    }

    for (i = 0; pid > 0 && i < 200; i++) {
        probe = redisConnect("127.0.0.1", *port);
        if (probe != NULL && probe->err == 0) {
            redisFree(probe);
            return pid;
        }
        redisFree(probe);
        usleep(25000);
    }

    return -1;
}


static void
redis_stop(pid_t pid)
{
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
}


/* A redis-server of the test's own, and a connection to it. */
typedef struct {
    pid_t            server;
    int              port;
    mrb_redis_conn  *c;
} conn_server;


/* 0, or -1 (nothing left running) when either could not be made. */
static int
conn_server_start(conn_server *s)
{
    s->server = redis_start(&s->port);
    if (s->server <= 0) {
        return -1;
    }

    s->c = mrb_redis_conn_new("127.0.0.1", s->port, 2000);
    if (s->c == NULL) {
        redis_stop(s->server);
        return -1;
    }

    return 0;
}


static void
conn_server_stop(conn_server *s)
{
    mrb_redis_conn_free(s->c);
    redis_stop(s->server);
}


/* One command through c (hiredis' format, words split at spaces): its
 * Integer reply, or -1. */
static long long
conn_integer(mrb_redis_conn *c, const char *fmt, ...)
{
    char        *cmd;
    int          len;
    va_list      ap;
    redisReply  *reply;
    long long    v;

    va_start(ap, fmt);
    len = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);
    if (len < 0) {
        return -1;
    }

    if (mrb_redis_conn_exec(c, NULL, cmd, (size_t) len, 1, &reply)
        != MRB_REDIS_OK)
    {
        redisFreeCommand(cmd);
        return -1;
    }

    v = reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
    freeReplyObject(reply);
    redisFreeCommand(cmd);
    return v;
}


/* A command on a connection of its own: its Integer reply, or -1 (a
 * status or string reply gives 0). */
static long long
side_command(int port, const char *command)
{
    redisContext  *ctx;
    redisReply    *reply;
    long long      v = -1;

    ctx = redisConnect("127.0.0.1", port);
    if (ctx != NULL && ctx->err == 0) {
        reply = redisCommand(ctx, command);
        if (reply != NULL) {
            v = reply->type == REDIS_REPLY_INTEGER ? reply->integer
              : reply->type == REDIS_REPLY_STRING ? atoll(reply->str) : 0;
            freeReplyObject(reply);
        }
    }

    redisFree(ctx);
    return v;
}


TEST(redis_conn_resends_once_after_the_server_closed_it)
{
    conn_server  s;
    long long    before, after;

    REQUIRE(conn_server_start(&s) == 0);

    before = conn_integer(s.c, "CLIENT ID");
    CHECK(before > 0);
    CHECK_EQ(conn_integer(s.c, "CLIENT ID"), before);   /* kept */

    CHECK(side_command(s.port, "CLIENT KILL TYPE normal SKIPME yes") >= 1);

    /* the kept connection is found closed: reopened, INCR sent once */
    CHECK_EQ(conn_integer(s.c, "INCR n"), 1);
    CHECK_EQ(side_command(s.port, "GET n"), 1);
    after = conn_integer(s.c, "CLIENT ID");
    CHECK(after > before);

    conn_server_stop(&s);
}


TEST(redis_conn_waits_a_second_after_a_failed_connect)
{
    mrb_redis_conn  *c;
    int              fd, port, peer;
    uint64_t         failed_at;

    fd = bound_socket(&port);
    REQUIRE(fd >= 0);
    c = mrb_redis_conn_new("127.0.0.1", port, 500);
    REQUIRE(c != NULL);

    CHECK_EQ(mrb_redis_conn_open(c, NULL), MRB_REDIS_ECONNECT);
    CHECK(strstr(c->err, "Connection refused") != NULL);
    failed_at = unit_now_ns();

    /* something listens now, but within the second no connect is tried */
    REQUIRE(listen(fd, 8) == 0);
    CHECK_EQ(mrb_redis_conn_open(c, NULL), MRB_REDIS_ECONNECT);
    CHECK(unit_now_ns() - failed_at < 1000000000u);
    REQUIRE(fcntl(fd, F_SETFL, O_NONBLOCK) == 0);
    peer = accept(fd, NULL, NULL);
    CHECK(peer < 0 && errno == EAGAIN);

    usleep(1100000);
    CHECK_EQ(mrb_redis_conn_open(c, NULL), MRB_REDIS_OK);

    mrb_redis_conn_free(c);
    close(fd);
}


TEST(redis_conn_made_before_a_fork_is_left_to_the_parent)
{
    conn_server  s;
    long long    parent_id;
    int          st;
    pid_t        child;

    REQUIRE(conn_server_start(&s) == 0);
    parent_id = conn_integer(s.c, "CLIENT ID");
    REQUIRE(parent_id > 0);

    child = fork();
    if (child == 0) {
        /* the child connects anew, and closing its copy of the parent's
         * socket leaves the parent's connection alone */
        long long  id = conn_integer(s.c, "CLIENT ID");
        mrb_redis_conn_free(s.c);
        _exit(id > 0 && id != parent_id ? 0 : 1);
    }

    REQUIRE(child > 0);
    REQUIRE(waitpid(child, &st, 0) == child);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);

    /* the parent's connection is still its own, and still the same one */
    CHECK_EQ(conn_integer(s.c, "CLIENT ID"), parent_id);

    conn_server_stop(&s);
}


TEST(redis_conn_times_out_on_a_silent_server)
{
    mrb_redis_conn  *c;
    int              fd, port;
    uint64_t         start, took;

    fd = bound_socket(&port);
    REQUIRE(fd >= 0);
    REQUIRE(listen(fd, 8) == 0);    /* accepts (in the kernel), never replies */
    c = mrb_redis_conn_new("127.0.0.1", port, 200);
    REQUIRE(c != NULL);

    start = unit_now_ns();
    CHECK_EQ(conn_integer(c, "PING"), -1);
    took = unit_now_ns() - start;
    CHECK(strstr(c->err, "timed out") != NULL);
    CHECK(took >= 150000000u && took < 5000000000u);
    CHECK(!mrb_redis_conn_connected(c));

    mrb_redis_conn_free(c);
    close(fd);
}


/* One command through c as caller: its Integer reply, or -1 (*st says
 * why). */
static long long
caller_integer(mrb_redis_conn *c, const mrb_redis_caller *caller,
    const char *command, mrb_redis_status *st)
{
    char        *cmd;
    int          len;
    redisReply  *reply;
    long long    v;

    len = redisFormatCommand(&cmd, command);
    if (len < 0) {
        return -1;
    }

    *st = mrb_redis_conn_exec(c, caller, cmd, (size_t) len, 1, &reply);
    redisFreeCommand(cmd);
    if (*st != MRB_REDIS_OK) {
        return -1;
    }

    v = reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
    freeReplyObject(reply);
    return v;
}


/* A wait that lets "another run" send on the same connection while the
 * first one waits for its reply, as nginx does when it suspends a run. */
typedef struct {
    mrb_redis_conn  *c;
    int              calls;
    long long        other_id;
    int              cancel;
} conn_interleave;


static int
interleave_wait(void *arg, int fd, int events, unsigned ms)
{
    conn_interleave    *il = arg;
    mrb_redis_caller    other = { (void *) 2, 0, NULL, NULL };
    mrb_redis_status    st;
    struct pollfd       pfd = { fd, (short) events, 0 };

    if (il->calls++ == 0) {
        if (il->cancel) {
            return MRB_REDIS_WAIT_CANCELLED;
        }
        il->other_id = caller_integer(il->c, &other, "CLIENT ID", &st);
    }

    return poll(&pfd, 1, (int) ms) > 0 ? 1 : 0;
}


/*
 * first: a run whose waits go through il (cancel: its next wait is
 * cancelled).  Its first command goes alone, so that it has a link of its
 * own before il interleaves anything: that link's CLIENT ID, or -1.
 */
static long long
interleave_begin(conn_interleave *il, mrb_redis_caller *first,
    mrb_redis_conn *c, int cancel)
{
    mrb_redis_status  st;
    long long         id;

    memset(il, 0, sizeof(*il));
    il->c = c;
    il->cancel = cancel;
    il->calls = 1;
    first->owner = (void *) 1;
    first->state = 0;
    first->wait = interleave_wait;
    first->wait_arg = il;

    id = caller_integer(c, first, "CLIENT ID", &st);
    il->calls = 0;     /* the next command's first wait interleaves */
    return id;
}


/* A server that answers out of Redis's protocol: EPROTOCOL (what
 * Redis::ProtocolError reports), the link closed, the command not sent
 * again (the reply was there: the server is no Redis). */
TEST(redis_conn_a_reply_out_of_protocol_is_a_protocol_error)
{
    mrb_redis_conn    *c;
    mrb_redis_status   st;
    int                fd, port, peer;
    char               buf[64];
    ssize_t            got;

    fd = bound_socket(&port);
    REQUIRE(fd >= 0);
    REQUIRE(listen(fd, 8) == 0);
    c = mrb_redis_conn_new("127.0.0.1", port, 2000);
    REQUIRE(c != NULL);

    REQUIRE(mrb_redis_conn_open(c, NULL) == MRB_REDIS_OK);
    peer = accept(fd, NULL, NULL);
    REQUIRE(peer >= 0);
    REQUIRE(write(peer, "hello\r\n", 7) == 7);

    CHECK_EQ(caller_integer(c, NULL, "PING", &st), -1);
    CHECK_EQ(st, MRB_REDIS_EPROTOCOL);
    CHECK(strstr(c->err, "127.0.0.1") != NULL);
    CHECK(!mrb_redis_conn_connected(c));

    /* the one PING, and no second connection */
    got = read(peer, buf, sizeof(buf));
    CHECK(got > 0 && memmem(buf, (size_t) got, "PING", 4) != NULL);
    REQUIRE(fcntl(fd, F_SETFL, O_NONBLOCK) == 0);
    CHECK(accept(fd, NULL, NULL) < 0 && errno == EAGAIN);

    mrb_redis_conn_free(c);
    close(peer);
    close(fd);
}


TEST(redis_conn_a_run_that_waits_keeps_its_link_to_itself)
{
    conn_server        s;
    mrb_redis_caller   first;
    mrb_redis_status   st;
    conn_interleave    il;
    long long          id, before;

    REQUIRE(conn_server_start(&s) == 0);
    before = interleave_begin(&il, &first, s.c, 0);
    REQUIRE(before > 0);

    /* while the first waits for its reply, the other takes a new link
     * and gets its own reply; then the first gets its own */
    id = caller_integer(s.c, &first, "CLIENT ID", &st);
    CHECK_EQ(id, before);
    CHECK(il.other_id > 0 && il.other_id != before);

    conn_server_stop(&s);
}


TEST(redis_conn_a_cancelled_wait_closes_its_link)
{
    conn_server        s;
    mrb_redis_caller   first;
    mrb_redis_status   st;
    conn_interleave    il;
    long long          before;

    REQUIRE(conn_server_start(&s) == 0);
    before = interleave_begin(&il, &first, s.c, 1);
    REQUIRE(before > 0);

    /* cancelled with INCR in flight: the link goes (its reply must not
     * reach the next command), and the next command has a new one */
    CHECK_EQ(caller_integer(s.c, &first, "INCR n", &st), -1);
    CHECK_EQ(st, MRB_REDIS_ECANCELLED);
    CHECK(!mrb_redis_conn_connected(s.c));
    CHECK(conn_integer(s.c, "CLIENT ID") > before);
    CHECK_EQ(conn_integer(s.c, "INCR n"), 2);

    conn_server_stop(&s);
}



/* A server of one reply: accepts on fd, reads what the client sends
 * first (up to the size of got), answers reply and closes. */
typedef struct {
    int          fd;
    const char  *reply;
    char         got[256];
    ssize_t      len;
} one_reply_server;


static void *
one_reply_serve(void *arg)
{
    one_reply_server  *s = arg;
    int                peer;

    peer = accept(s->fd, NULL, NULL);
    if (peer < 0) {
        return NULL;
    }

    s->len = read(peer, s->got, sizeof(s->got));
    if (write(peer, s->reply, strlen(s->reply)) < 0) {
        s->len = -1;
    }

    close(peer);
    return NULL;
}


/* A listening one_reply_server *s (its reply to set) and a connection
 * to it that sends AUTH app secret-pw: NULL if either failed. */
static mrb_redis_conn *
auth_server_open(one_reply_server *s)
{
    int              port;
    mrb_redis_conn  *c;

    memset(s, 0, sizeof(*s));
    s->fd = bound_socket(&port);
    if (s->fd < 0 || listen(s->fd, 8) != 0) {
        return NULL;
    }

    c = mrb_redis_conn_new("127.0.0.1", port, 2000);
    if (c != NULL && mrb_redis_conn_set_auth(c, "app", "secret-pw") != 0) {
        mrb_redis_conn_free(c);
        return NULL;
    }

    return c;
}


TEST(redis_conn_auth_goes_first_and_a_refusal_names_no_password)
{
    mrb_redis_conn     *c;
    pthread_t           t;
    one_reply_server    s;
    static const char   auth[] = "*3\r\n$4\r\nAUTH\r\n$3\r\napp\r\n"
                                 "$9\r\nsecret-pw\r\n";

    c = auth_server_open(&s);
    REQUIRE(c != NULL);
    CHECK(mrb_redis_conn_auth_is(c, "app", "secret-pw"));
    CHECK(!mrb_redis_conn_auth_is(c, "app", "other"));
    CHECK(!mrb_redis_conn_auth_is(c, NULL, "secret-pw"));
    CHECK(!mrb_redis_conn_auth_is(c, NULL, NULL));

    /* a server that repeats the password in its refusal: left out */
    s.reply = "-ERR no such pair: app secret-pw\r\n";
    REQUIRE(pthread_create(&t, NULL, one_reply_serve, &s) == 0);

    CHECK_EQ(mrb_redis_conn_open(c, NULL), MRB_REDIS_EAUTH);
    pthread_join(t, NULL);

    CHECK_EQ(s.len, (ssize_t) sizeof(auth) - 1);
    CHECK(memcmp(s.got, auth, sizeof(auth) - 1) == 0);
    CHECK(strncmp(c->err, "127.0.0.1:", 10) == 0);
    CHECK(strstr(c->err, "secret-pw") == NULL);
    CHECK(strstr(c->err, ": AUTH: refused") != NULL);
    CHECK(!mrb_redis_conn_connected(c));

    mrb_redis_conn_free(c);
    close(s.fd);
}


TEST(redis_conn_auth_leaves_no_password_in_what_hiredis_frees)
{
    mrb_redis_conn     *c;
    pthread_t           t;
    one_reply_server    s;

    c = auth_server_open(&s);
    REQUIRE(c != NULL);

    s.reply = "+OK\r\n";
    REQUIRE(pthread_create(&t, NULL, one_reply_serve, &s) == 0);

    unit_secret_watch("secret-pw");
    CHECK_EQ(mrb_redis_conn_open(c, NULL), MRB_REDIS_OK);
    pthread_join(t, NULL);
    CHECK(memmem(s.got, (size_t) s.len, "secret-pw", 9) != NULL);

    mrb_redis_conn_free(c);
    CHECK_EQ(unit_secret_end(), 0);
    close(s.fd);
}


/* A startup script's AUTH among the commands every new link sends first:
 * the block that held it is wiped when a later command grows the list. */
TEST(redis_conn_setup_leaves_no_password_in_freed_memory)
{
    char            *auth, *select;
    int              auth_len, select_len;
    mrb_redis_conn  *c;

    c = mrb_redis_conn_new("127.0.0.1", 6379, 1000);
    REQUIRE(c != NULL);
    auth_len = redisFormatCommand(&auth, "AUTH app %s", "secret-pw");
    select_len = redisFormatCommand(&select, "SELECT 2");
    REQUIRE(auth_len > 0 && select_len > 0);

    unit_secret_watch("secret-pw");
    CHECK_EQ(mrb_redis_conn_add_setup(c, auth, (size_t) auth_len), 0);
    CHECK_EQ(mrb_redis_conn_add_setup(c, select, (size_t) select_len), 0);
    CHECK_EQ(c->setup_n, 2);
    CHECK(memmem(c->setup, c->setup_len, "secret-pw", 9) != NULL);
    CHECK(memmem(c->setup, c->setup_len, "SELECT", 6) != NULL);
    mrb_redis_conn_free(c);
    CHECK_EQ(unit_secret_end(), 0);

    explicit_bzero(auth, (size_t) auth_len);
    redisFreeCommand(auth);
    redisFreeCommand(select);
}
