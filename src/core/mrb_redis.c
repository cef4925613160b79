/*
 * ::Redis, a client on hiredis for state shared by a fleet of servers.
 *
 *   r = Redis.new("127.0.0.1", 6379, timeout: 0.5)
 *   r.set("k", "v");  r.incr("n");  r.call("HSET", "h", "f", 1)
 *   r.pipelined { |p| p.incr("n"); p.expire("n", 30) }   # => [1, 1]
 *
 * Replies: status and bulk strings are Strings, integers Integers, nil
 * bulk nil, multi-bulk Arrays (HGETALL a Hash); an error reply raises
 * Redis::ReplyError.  A failed or lost connection raises
 * Redis::ConnectionError, a timeout Redis::TimeoutError (a ConnectionError
 * too); all are Redis::BaseError < StandardError.
 *
 * Connections are kept per interpreter: Redis.new with a host and port
 * (or path), user and TLS files already connected in this interpreter
 * reuses that connection (a hidden Hash on the class holds them), so a
 * script may call Redis.new on every request at the cost of a lookup.
 * The password is not in the Hash's key: it stays in C memory
 * (mrb_redis_conn_auth_is tells a connection of another password).
 *
 * Waiting for a reply goes through mrb_wait_fd: on nginx a request's run
 * is suspended and the worker serves others meanwhile; elsewhere the
 * thread waits, as any blocking client would.  Since several runs may
 * then use one Redis object at once, a command that is not queued goes
 * out in a batch of its own, and the object's queue (pipelined, queue,
 * commit) belongs to the run that filled it.
 */

#include <ctype.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <mruby.h>
#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/data.h>
#include <mruby/error.h>
#include <mruby/hash.h>
#include <mruby/string.h>
#include <mruby/variable.h>
#include "mrb_api.h"
#include "mrb_metrics.h"
#include "mrb_redis.h"
#include "mrb_redis_cluster.h"
#include "mrb_redis_conn.h"
#include "mrb_interp_core.h"
#include "mrb_stack.h"
#include "mrb_wait.h"

#define REDIS_DEFAULT_HOST     "127.0.0.1"
#define REDIS_DEFAULT_PORT     6379
#define REDIS_DEFAULT_TIMEOUT  1000   /* ms */
#define REDIS_ARGV_STACK       16
/* what a Redis.new(readonly: true) sends first on every link */
#define REDIS_READONLY         "*1\r\n$8\r\nREADONLY\r\n"

#define redis_nelts(a)  (sizeof(a) / sizeof((a)[0]))

/* Formatted commands not yet sent, and what they do to their link's state
 * (MRB_REDIS_STATE_*). */
typedef struct {
    char            *buf;
    size_t           len;
    size_t           cap;
    size_t           n;
    unsigned         state;
    int              writes;  /* some command is not read-only (counted
                                 for a Redis.new(sentinels:) only) */
} redis_batch;

/* A Redis object: a connection (owned by a Redis::Connection object that the
 * Redis object keeps alive), the commands queued for a pipeline, by the
 * run queue_owner, and the replies waiting for reply (its hidden
 * __replies__ Array), by the run replies_owner.  Both are the run's: the
 * object is listed while it holds them, and their run's end drops them
 * (redis_run_end). */
typedef struct {
    mrb_redis_conn  *conn;
    unsigned         timeout_ms;  /* its own, kept when it moves */
    int              sentinel;    /* REDIS_SENTINEL_* or 0 */
    int              stale;       /* its server failed: find it again */
    redis_batch      queue;
    const void      *queue_owner;
    const void      *replies_owner;
    int              pipelining;  /* inside pipelined { } */
    int              closed;      /* close was called: commands raise */
    int              listed;      /* in the class's __run_state__ Array */
} redis_obj;

/* Redis.new(sentinels:, role:): the object's group (its hidden
 * __sentinel__, a Redis::Sentinel) names its server, the address of its
 * hidden __address__ (mrblib/redis_sentinel.rb). */
#define REDIS_SENTINEL_MASTER   1
#define REDIS_SENTINEL_REPLICA  2

static void redis_obj_free(mrb_state *mrb, void *p);
static void redis_batch_clear(redis_batch *b);
static redis_batch *redis_batch_new(mrb_state *mrb);
static void redis_conn_free(mrb_state *mrb, void *p);

static const mrb_data_type  redis_obj_type = { "Redis", redis_obj_free };
static const mrb_data_type  redis_conn_type = { "Redis::Connection",
                                                redis_conn_free };


static void
redis_obj_free(mrb_state *mrb, void *p)
{
    redis_obj  *r = p;

    if (r != NULL) {
        redis_batch_clear(&r->queue);
        mrb_free(mrb, r);
    }
}


static void
redis_conn_free(mrb_state *mrb, void *p)
{
    mrb_redis_conn_free(p);
}


/*
 * The Redis class, kept where a script cannot reach it (a hidden instance
 * variable of Kernel): a script may reassign or remove the constant
 * (`Redis = 5`, restored only after the run), and the part's run_end,
 * which must not raise, looks the class up too.
 */
static struct RClass *
redis_class(mrb_state *mrb)
{
    mrb_value  c = mrb_iv_get(mrb, mrb_obj_value(mrb->kernel_module),
                              mrb_intern_lit(mrb, "__redis_class__"));

    return mrb_type(c) == MRB_TT_CLASS ? mrb_class_ptr(c)
                                       : mrb_class_get(mrb, "Redis");
}


static struct RClass *
redis_error(mrb_state *mrb, const char *name)
{
    return mrb_class_get_under(mrb, redis_class(mrb), name);
}


static redis_obj *
redis_self_any(mrb_state *mrb, mrb_value self)
{
    redis_obj  *r;

    r = mrb_data_get_ptr(mrb, self, &redis_obj_type);

    if (r == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis object is not initialized");
    }

    return r;
}


/* The object, for a command: after close it raises Redis::ClosedError, as
 * mruby-redis does (Redis.new gives an open one, on the same connection). */
static redis_obj *
redis_self(mrb_state *mrb, mrb_value self)
{
    redis_obj  *r = redis_self_any(mrb, self);

    if (r->closed) {
        mrb_raise(mrb, redis_error(mrb, "ClosedError"),
                  "connection is already closed");
    }

    return r;
}


/* mrb_redis_wait_pt: the run waits (mrb_wait_fd), or the thread does. */
static int
redis_wait_fd(void *arg, int fd, int events, unsigned ms)
{
    int  rc;

    rc = mrb_wait_fd(arg, fd, (events & POLLOUT) ? MRB_FD_WRITE : MRB_FD_READ,
                     (mrb_int) ms);

    return rc == MRB_WAIT_CANCELLED ? MRB_REDIS_WAIT_CANCELLED : rc;
}


/*
 * The request a link is held for: the outermost run (a run nested in it,
 * an input filter's, ends before it, and its MULTI or SELECT must not
 * outlive the request: its run_end runs for outermost runs only).
 */
static const void *
redis_owner(mrb_state *mrb)
{
    mrb_run_rec  *run = mrb_interp_run(mrb);

    while (run != NULL && run->prev != NULL) {
        run = run->prev;
    }

    return run;
}


/* Who sends now: the request, waiting as mrb_wait_fd does. */
static void
redis_caller_init(mrb_state *mrb, mrb_redis_caller *caller, unsigned state)
{
    caller->owner = redis_owner(mrb);
    caller->state = state;
    caller->wait = redis_wait_fd;
    caller->wait_arg = mrb;
    caller->deadline = 0;
}


static void
redis_raise_status(mrb_state *mrb, mrb_redis_conn *c, mrb_redis_status st)
{
    const char  *name;

    switch (st) {
    case MRB_REDIS_ECANCELLED:
        mrb_wait_raise_cancelled(mrb);
        return;
    case MRB_REDIS_ETIMEOUT:
        name = "TimeoutError";
        break;
    case MRB_REDIS_EPROTOCOL:
        name = "ProtocolError";
        break;
    case MRB_REDIS_EOOM:
        name = "OOMError";
        break;
    case MRB_REDIS_EAUTH:
        name = "AuthError";
        break;
    case MRB_REDIS_ECONNECT:
        /* nothing of the command reached a server that could run it: a
         * caller may send it elsewhere (Redis::Cluster, after a failover) */
        name = c->maybe_ran ? "ConnectionError" : "CannotConnectError";
        break;
    default:
        name = "ConnectionError";
    }

    mrb_raise(mrb, redis_error(mrb, name), c->err);
}


static unsigned
redis_timeout_from(mrb_state *mrb, mrb_value v)
{
    unsigned   ms;
    mrb_float  sec;

    if (mrb_undef_p(v) || mrb_nil_p(v)) {
        return REDIS_DEFAULT_TIMEOUT;
    }

    sec = mrb_as_float(mrb, v);

    if (!(sec > 0) || sec > 3600) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "timeout must be between 0 and "
                  "3600 seconds");
    }

    ms = (unsigned) (sec * 1000 + 0.5);
    return (ms != 0) ? ms : 1;
}


/* Where and how Redis.new connects: its arguments, converted (Strings are
 * private copies, or nil). */
typedef struct {
    mrb_value  host;
    mrb_int    port;
    mrb_value  path;
    unsigned   timeout;
    mrb_value  username;
    mrb_value  password;
    int        tls;
    mrb_value  tls_files[4];   /* ssl_params: redis_tls_params' order */
    int        readonly;       /* every link sends READONLY first */
} redis_target;

/* ssl_params' keys, as redis-rb names them (file paths here, where
 * redis-rb takes OpenSSL objects for cert and key). */
static const char  *redis_tls_params[] = { "ca_file", "ca_path", "cert",
                                           "key" };


/* A private copy of v, a String (or a Symbol), or nil when v was not
 * given. */
static mrb_value
redis_opt_str(mrb_state *mrb, mrb_value v, const char *what)
{
    if (mrb_undef_p(v) || mrb_nil_p(v)) {
        return mrb_nil_value();
    }

    if (mrb_symbol_p(v)) {
        return mrb_sym_str(mrb, mrb_symbol(v));
    }

    if (!mrb_string_p(v)) {
        mrb_raisef(mrb, E_TYPE_ERROR, "Redis.new: %s must be a String, not "
                   "%C", what, mrb_obj_class(mrb, v));
    }

    return mrb_str_dup(mrb, v);
}


static const char *
redis_opt_cstr(mrb_state *mrb, mrb_value v)
{
    return mrb_nil_p(v) ? NULL : mrb_string_value_cstr(mrb, &v);
}


/* ssl_params: { ca_file:, ca_path:, cert:, key: } into t->tls_files. */
static void
redis_tls_params_from(mrb_state *mrb, mrb_value params, redis_target *t)
{
    mrb_value  keys, k;
    mrb_int    i;
    size_t     j;

    if (!mrb_hash_p(params)) {
        mrb_raisef(mrb, E_TYPE_ERROR, "Redis.new: ssl_params must be a "
                   "Hash, not %C", mrb_obj_class(mrb, params));
    }

    keys = mrb_hash_keys(mrb, params);

    for (i = 0; i < RARRAY_LEN(keys); i++) {
        k = RARRAY_PTR(keys)[i];

        for (j = 0; j < redis_nelts(redis_tls_params); j++) {
            if (mrb_symbol_p(k)
                && mrb_symbol(k) == mrb_intern_cstr(mrb, redis_tls_params[j]))
            {
                break;
            }
        }

        if (j == redis_nelts(redis_tls_params)) {
            mrb_raisef(mrb, E_ARGUMENT_ERROR, "Redis.new: ssl_params: "
                       "unknown key %!v (known: :ca_file, :ca_path, :cert, "
                       ":key)", k);
        }

        t->tls_files[j] = redis_opt_str(mrb, mrb_hash_get(mrb, params, k),
                                        redis_tls_params[j]);
    }
}


/*
 * The key of t's connection in the class's hidden Hash: what tells one
 * connection from another but the password, which is checked on the
 * connection itself (mrb_redis_conn_auth_is).  Its fields are named and
 * end with a NUL, which none of them may hold (redis_initialize checks),
 * so that no value can pass for another field's or another kind's: a
 * socket at "127.0.0.1:6379" is not that TCP port's connection, nor a
 * path ending in " user=app" user app's.
 */
static mrb_value
redis_target_key(mrb_state *mrb, const redis_target *t)
{
    char       port[sizeof("65535")];
    size_t     j;
    mrb_value  key;

    key = mrb_str_new_capa(mrb, 64);

    if (mrb_nil_p(t->path)) {
        snprintf(port, sizeof(port), "%d", (int) t->port);
        mrb_str_cat(mrb, key, "tcp", sizeof("tcp"));
        mrb_str_cat_str(mrb, key, t->host);
        mrb_str_cat(mrb, key, "", 1);
        mrb_str_cat_cstr(mrb, key, port);
    } else {
        mrb_str_cat(mrb, key, "unix", sizeof("unix"));
        mrb_str_cat_str(mrb, key, t->path);
    }
    mrb_str_cat(mrb, key, "", 1);

    if (!mrb_nil_p(t->username)) {
        mrb_str_cat(mrb, key, "user", sizeof("user"));
        mrb_str_cat_str(mrb, key, t->username);
        mrb_str_cat(mrb, key, "", 1);
    }

    if (t->readonly) {
        mrb_str_cat(mrb, key, "readonly", sizeof("readonly"));
    }

    if (t->tls) {
        mrb_str_cat(mrb, key, "tls", sizeof("tls"));

        for (j = 0; j < redis_nelts(redis_tls_params); j++) {
            if (!mrb_nil_p(t->tls_files[j])) {
                mrb_str_cat(mrb, key, redis_tls_params[j],
                            strlen(redis_tls_params[j]) + 1);
                mrb_str_cat_str(mrb, key, t->tls_files[j]);
                mrb_str_cat(mrb, key, "", 1);
            }
        }
    }

    return key;
}


/* A new connection to t, owned by connobj: raises what is wrong. */
static mrb_redis_conn *
redis_conn_new(mrb_state *mrb, mrb_value connobj, const redis_target *t)
{
    char                 err[MRB_ERR_REASON_LEN];
    mrb_redis_conn      *c;
    mrb_redis_tls_opts   o;

    c = mrb_nil_p(t->path)
        ? mrb_redis_conn_new(RSTRING_PTR(t->host), (int) t->port, t->timeout)
        : mrb_redis_conn_new_unix(RSTRING_PTR(t->path), t->timeout);
    if (c == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis: out of memory");
    }

    DATA_PTR(connobj) = c;

    if (!mrb_nil_p(t->password)
        && mrb_redis_conn_set_auth(c, redis_opt_cstr(mrb, t->username),
                                   RSTRING_PTR(t->password)) != 0)
    {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis: out of memory");
    }

    if (t->readonly
        && mrb_redis_conn_add_setup(c, REDIS_READONLY,
                                    sizeof(REDIS_READONLY) - 1) != 0)
    {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis: out of memory");
    }

    if (t->tls) {
        o.ca_file = redis_opt_cstr(mrb, t->tls_files[0]);
        o.ca_path = redis_opt_cstr(mrb, t->tls_files[1]);
        o.cert = redis_opt_cstr(mrb, t->tls_files[2]);
        o.key = redis_opt_cstr(mrb, t->tls_files[3]);

        if (mrb_redis_conn_set_tls(c, &o, err, sizeof(err)) != 0) {
            mrb_raisef(mrb, E_ARGUMENT_ERROR, "Redis.new: ssl_params: %s",
                       err);
        }
    }

    return c;
}


/* A target with nothing set but host:port and timeout (host a private
 * String). */
static void
redis_target_tcp(redis_target *t, mrb_value host, mrb_int port,
    unsigned timeout)
{
    memset(t, 0, sizeof(*t));
    t->host = host;
    t->port = port;
    t->timeout = timeout;
    t->path = t->username = t->password = mrb_nil_value();
    t->tls_files[0] = t->tls_files[1] = t->tls_files[2] = t->tls_files[3]
        = mrb_nil_value();
}


/*
 * A Redis.new(sentinels:)'s options as its group keeps them
 * (Redis::Sentinel#__options, in mrblib/redis_sentinel.rb, reads them in
 * this order): an Array of private copies, nil for what was not given.
 * The servers' user, password and TLS go to every server the sentinels
 * name, TLS and the sentinels' own user and password to the sentinels.
 */
enum {
    REDIS_OPT_USERNAME, REDIS_OPT_PASSWORD, REDIS_OPT_SSL,
    REDIS_OPT_TLS_FILES,  /* redis_tls_params' order, 4 of them */
    REDIS_OPT_SENTINEL_USERNAME = REDIS_OPT_TLS_FILES + 4,
    REDIS_OPT_SENTINEL_PASSWORD, REDIS_OPT_N
};


/* t's user, password and TLS with the sentinels' user and password, as a
 * group keeps them; nil when none is set. */
static mrb_value
redis_sentinel_options(mrb_state *mrb, const redis_target *t,
    mrb_value sentinel_username, mrb_value sentinel_password)
{
    size_t     j;
    mrb_value  a[REDIS_OPT_N];

    a[REDIS_OPT_USERNAME] = t->username;
    a[REDIS_OPT_PASSWORD] = t->password;
    a[REDIS_OPT_SSL] = mrb_bool_value(t->tls);
    for (j = 0; j < redis_nelts(redis_tls_params); j++) {
        a[REDIS_OPT_TLS_FILES + j] = t->tls_files[j];
    }
    a[REDIS_OPT_SENTINEL_USERNAME] = sentinel_username;
    a[REDIS_OPT_SENTINEL_PASSWORD] = sentinel_password;

    for (j = 0; j < REDIS_OPT_N; j++) {
        if (mrb_test(a[j])) {
            return mrb_ary_new_from_values(mrb, REDIS_OPT_N, a);
        }
    }

    return mrb_nil_value();
}


/* The servers' part of a group's options (nil: none) into t.  They come
 * back from Ruby, where a script can reach the group and its Array:
 * raises TypeError for a user, password or file that is not a String. */
static void
redis_target_from_options(mrb_state *mrb, redis_target *t, mrb_value opts)
{
    size_t     j;
    mrb_value  v;

    if (!mrb_array_p(opts) || RARRAY_LEN(opts) != REDIS_OPT_N) {
        return;
    }

    for (j = 0; j < REDIS_OPT_N; j++) {
        v = RARRAY_PTR(opts)[j];
        if (j != REDIS_OPT_SSL && !mrb_nil_p(v) && !mrb_string_p(v)) {
            mrb_raisef(mrb, E_TYPE_ERROR, "Redis: a sentinel group's "
                       "options hold a %C, not a String",
                       mrb_obj_class(mrb, v));
        }
    }

    t->username = RARRAY_PTR(opts)[REDIS_OPT_USERNAME];
    t->password = RARRAY_PTR(opts)[REDIS_OPT_PASSWORD];
    t->tls = mrb_test(RARRAY_PTR(opts)[REDIS_OPT_SSL]);
    for (j = 0; j < redis_nelts(redis_tls_params); j++) {
        t->tls_files[j] = RARRAY_PTR(opts)[REDIS_OPT_TLS_FILES + j];
    }
}


/*
 * This interpreter's connection to t (a Redis::Connection object in the
 * class's hidden __connections__ Hash), made once, or again for another
 * password; t's timeout is the one of its later commands.
 */
static mrb_value
redis_connection_for(mrb_state *mrb, const redis_target *t)
{
    mrb_value        conns, key, connobj;
    mrb_redis_conn  *c;

    conns = mrb_iv_get(mrb, mrb_obj_value(redis_class(mrb)),
                       mrb_intern_lit(mrb, "__connections__"));

    if (!mrb_hash_p(conns)) {
        conns = mrb_hash_new(mrb);
        mrb_iv_set(mrb, mrb_obj_value(redis_class(mrb)),
                   mrb_intern_lit(mrb, "__connections__"), conns);
    }

    key = redis_target_key(mrb, t);
    connobj = mrb_hash_get(mrb, conns, key);
    c = mrb_nil_p(connobj) ? NULL : DATA_PTR(connobj);

    if (c != NULL
        && mrb_redis_conn_auth_is(c, redis_opt_cstr(mrb, t->username),
                                  redis_opt_cstr(mrb, t->password)))
    {
        mrb_redis_conn_set_timeout(c, t->timeout);
        return connobj;
    }

    /* the object first, so that the connection is never unowned; one of
     * another password replaces the old one for later objects */
    connobj = mrb_obj_value(mrb_data_object_alloc(mrb,
                  mrb_class_get_under(mrb, redis_class(mrb), "Connection"),
                  NULL, &redis_conn_type));
    redis_conn_new(mrb, connobj, t);
    mrb_hash_set(mrb, conns, key, connobj);

    return connobj;
}


/* Puts r (self) on the connection to t. */
static void
redis_attach(mrb_state *mrb, mrb_value self, redis_obj *r,
    const redis_target *t)
{
    mrb_value  connobj = redis_connection_for(mrb, t);

    mrb_iv_set(mrb, self, mrb_intern_lit(mrb, "__connection__"), connobj);
    r->conn = DATA_PTR(connobj);
    r->closed = 0;
}


/*
 * Moves a Redis.new(sentinels:) object to the server its group names
 * (Redis::Sentinel#__resolve: asking the sentinels when the group still
 * names the address self is on and stale says that one failed), within
 * the time left until deadline (ms).  Raises when no server is found.
 */
static void
redis_sentinel_move(mrb_state *mrb, mrb_value self, redis_obj *r, int stale,
    uint64_t deadline)
{
    mrb_value      group, addr, host;
    mrb_int        port;
    uint64_t       now = mrb_redis_now_ms();
    const char    *p, *colon;
    redis_target   t;

    group = mrb_iv_get(mrb, self, mrb_intern_lit(mrb, "__sentinel__"));
    addr = mrb_iv_get(mrb, self, mrb_intern_lit(mrb, "__address__"));

    addr = mrb_funcall(mrb, group, "__resolve", 2,
                       stale ? addr : mrb_nil_value(),
                       mrb_float_value(mrb, deadline > now
                                            ? (deadline - now) / 1000.0
                                            : 0.001));

    /* a sentinel's answer, which ROLE confirmed: still, a "host:port" */
    host = mrb_str_dup(mrb, mrb_ensure_string_type(mrb, addr));
    p = mrb_string_value_cstr(mrb, &host);
    colon = strrchr(p, ':');
    port = colon != NULL ? strtol(colon + 1, NULL, 10) : 0;

    if (colon == p || port <= 0 || port > 65535) {
        mrb_raisef(mrb, redis_error(mrb, "ConnectionError"), "Redis: the "
                   "sentinels named %v, not a host:port", addr);
    }

    redis_target_tcp(&t, mrb_str_new(mrb, p, colon - p), port,
                     r->timeout_ms);
    redis_target_from_options(mrb, &t,
                              mrb_funcall(mrb, group, "__options", 0));
    redis_attach(mrb, self, r, &t);
    mrb_iv_set(mrb, self, mrb_intern_lit(mrb, "__address__"), addr);
    r->stale = 0;
}


/*
 * Redis.new(sentinels: [...], name:, role:)'s half of initialize: r on
 * the server the sentinels name, connected (found again once when the
 * address the interpreter knew fails).
 */
static void
redis_sentinel_init(mrb_state *mrb, mrb_value self, redis_obj *r,
    mrb_value sentinels, mrb_value name, mrb_value role, mrb_value options)
{
    mrb_value          group;
    uint64_t           deadline;
    mrb_redis_status   st;
    mrb_redis_caller   caller;

    if (mrb_undef_p(role)) {
        role = mrb_symbol_value(mrb_intern_lit(mrb, "master"));
    }

    group = mrb_funcall(mrb, mrb_obj_value(mrb_class_get_under(mrb,
                            redis_class(mrb), "Sentinel")),
                        "__group", 4, sentinels,
                        mrb_undef_p(name) ? mrb_nil_value() : name, role,
                        options);

    r->sentinel = (mrb_symbol_p(role)
                   && mrb_symbol(role) == mrb_intern_lit(mrb, "replica"))
                  ? REDIS_SENTINEL_REPLICA : REDIS_SENTINEL_MASTER;
    mrb_iv_set(mrb, self, mrb_intern_lit(mrb, "__sentinel__"), group);

    deadline = mrb_redis_now_ms() + r->timeout_ms;
    redis_sentinel_move(mrb, self, r, 0, deadline);

    redis_caller_init(mrb, &caller, 0);
    st = mrb_redis_conn_open(r->conn, &caller);

    /* a refused AUTH or a timeout says nothing of a failover */
    if (st == MRB_REDIS_ECONNECT) {
        redis_sentinel_move(mrb, self, r, 1, deadline);
        st = mrb_redis_conn_open(r->conn, &caller);
    }

    if (st != MRB_REDIS_OK) {
        redis_raise_status(mrb, r->conn, st);
    }
}


/* Redis.new's keywords (kw_values' order; from REDIS_KW_NAME to
 * REDIS_KW_SENTINEL_PASSWORD they go with sentinels:) */
enum {
    REDIS_KW_TIMEOUT, REDIS_KW_PATH, REDIS_KW_USERNAME, REDIS_KW_PASSWORD,
    REDIS_KW_SSL, REDIS_KW_SSL_PARAMS, REDIS_KW_SENTINELS, REDIS_KW_NAME,
    REDIS_KW_ROLE, REDIS_KW_SENTINEL_USERNAME, REDIS_KW_SENTINEL_PASSWORD,
    REDIS_KW_READONLY, REDIS_KW_N
};

static const char *const  redis_kw_names[REDIS_KW_N] = {
    "timeout", "path", "username", "password", "ssl", "ssl_params",
    "sentinels", "name", "role", "sentinel_username", "sentinel_password",
    "readonly"
};


/*
 * Redis.new(host = "127.0.0.1", port = 6379, timeout: 1.0, path: nil,
 * username: nil, password: nil, ssl: false, ssl_params: {}), or
 * mruby-redis's Redis.new(host, port, timeout) (seconds), or
 * Redis.new(sentinels: ["host:port", ...], name: "mymaster",
 * role: :master or :replica, timeout: 1.0, sentinel_username: nil,
 * sentinel_password: nil) with the same username:, password:, ssl: and
 * ssl_params: for the servers the sentinels name (ssl: and ssl_params:
 * for the sentinels too).  path: a Unix socket instead of host and port;
 * readonly: true, every link sends READONLY first (a connection of its
 * own, on which a Redis Cluster replica answers reads).
 * Without host, port and path: the server Redis.connect_set_raw named, if
 * a script of this interpreter called it, else the defaults.  Once per
 * object.
 */
static mrb_value
redis_initialize(mrb_state *mrb, mrb_value self)
{
    mrb_int            argc;
    mrb_value          kw_values[REDIS_KW_N], host_v, port_v, timeout_v,
                       target, sentinel_username, sentinel_password;
    const mrb_value   *args;
    redis_obj         *r;
    redis_target       t;
    mrb_redis_status   st;
    mrb_redis_caller   caller;
    int                i, sentinels;

    /* a second call (send(:initialize)) would drop the first one's state
     * while a suspended command of another run may still use it */
    if (DATA_PTR(self) != NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis#initialize: this Redis "
                  "object is initialized already");
    }

    /* read as they lie: mrb_get_args(":") would intern every keyword's
     * name on each call, some 400 instructions each (callgrind, mruby
     * 3.1, 2026-11-27) */
    argc = mrb_get_argc(mrb);
    if (argc > 3) {
        mrb_argnum_error(mrb, argc, 0, 3);
    }

    args = mrb_get_argv(mrb);
    host_v = argc > 0 ? args[0] : mrb_undef_value();
    port_v = argc > 1 ? args[1] : mrb_undef_value();
    timeout_v = argc > 2 ? args[2] : mrb_undef_value();
    mrb_api_kwargs(mrb, redis_kw_names, kw_values, REDIS_KW_N);

    sentinels = !mrb_undef_p(kw_values[REDIS_KW_SENTINELS]);

    for (i = REDIS_KW_NAME; !sentinels && i <= REDIS_KW_SENTINEL_PASSWORD;
         i++)
    {
        if (!mrb_undef_p(kw_values[i])) {
            mrb_raisef(mrb, E_ARGUMENT_ERROR, "Redis.new: %s: goes with "
                       "sentinels:", redis_kw_names[i]);
        }
    }

    if (sentinels) {
        if (!mrb_undef_p(host_v) || !mrb_undef_p(port_v)) {
            mrb_raise(mrb, E_ARGUMENT_ERROR, "Redis.new: a host or "
                      "sentinels:, not both");
        }
        if (!mrb_undef_p(kw_values[REDIS_KW_PATH])) {
            mrb_raise(mrb, E_ARGUMENT_ERROR, "Redis.new: path: with "
                      "sentinels: the sentinels name their servers by host "
                      "and port");
        }
        if (!mrb_undef_p(kw_values[REDIS_KW_READONLY])) {
            mrb_raise(mrb, E_ARGUMENT_ERROR, "Redis.new: readonly: is for a "
                      "Redis Cluster replica, not with sentinels:");
        }
    }

    if (!sentinels && mrb_undef_p(host_v)
        && mrb_undef_p(kw_values[REDIS_KW_PATH]))
    {
        target = mrb_iv_get(mrb, mrb_obj_value(redis_class(mrb)),
                            mrb_intern_lit(mrb, "__default_target__"));
        if (mrb_array_p(target) && RARRAY_LEN(target) == 3) {
            host_v = RARRAY_PTR(target)[0];
            port_v = RARRAY_PTR(target)[1];
            if (mrb_undef_p(kw_values[REDIS_KW_TIMEOUT])) {
                kw_values[REDIS_KW_TIMEOUT] = RARRAY_PTR(target)[2];
            }
        }
    }

    if (!mrb_undef_p(timeout_v)) {
        if (!mrb_undef_p(kw_values[REDIS_KW_TIMEOUT])) {
            mrb_raise(mrb, E_ARGUMENT_ERROR, "Redis.new: a timeout both as "
                      "an argument and as timeout:");
        }
        kw_values[REDIS_KW_TIMEOUT] = timeout_v;
    }

    /*
     * Every argument converted before any pointer is taken: a port's or a
     * timeout's conversion runs Ruby, which could change a String.  The
     * Strings are private copies, kept in this frame's arena.
     */
    memset(&t, 0, sizeof(t));
    t.port = mrb_undef_p(port_v) ? REDIS_DEFAULT_PORT
                                 : mrb_as_int(mrb, port_v);
    t.timeout = redis_timeout_from(mrb, kw_values[REDIS_KW_TIMEOUT]);
    t.path = redis_opt_str(mrb, kw_values[REDIS_KW_PATH], "path");
    t.username = redis_opt_str(mrb, kw_values[REDIS_KW_USERNAME],
                               "username");
    t.password = redis_opt_str(mrb, kw_values[REDIS_KW_PASSWORD],
                               "password");
    sentinel_username = redis_opt_str(mrb,
                                      kw_values[REDIS_KW_SENTINEL_USERNAME],
                                      "sentinel_username");
    sentinel_password = redis_opt_str(mrb,
                                      kw_values[REDIS_KW_SENTINEL_PASSWORD],
                                      "sentinel_password");
    t.readonly = !mrb_undef_p(kw_values[REDIS_KW_READONLY])
                 && mrb_test(kw_values[REDIS_KW_READONLY]);
    t.tls = !mrb_undef_p(kw_values[REDIS_KW_SSL])
            && mrb_test(kw_values[REDIS_KW_SSL]);
    t.tls_files[0] = t.tls_files[1] = t.tls_files[2] = t.tls_files[3]
        = mrb_nil_value();

    if (!mrb_undef_p(kw_values[REDIS_KW_SSL_PARAMS])
        && !mrb_nil_p(kw_values[REDIS_KW_SSL_PARAMS]))
    {
        if (!t.tls) {
            mrb_raise(mrb, E_ARGUMENT_ERROR, "Redis.new: ssl_params without "
                      "ssl: true");
        }
        redis_tls_params_from(mrb, kw_values[REDIS_KW_SSL_PARAMS], &t);
    }

    t.host = mrb_undef_p(host_v) ? mrb_str_new_lit(mrb, REDIS_DEFAULT_HOST)
                                 : mrb_str_dup(mrb, mrb_ensure_string_type(
                                                        mrb, host_v));

    if (!mrb_nil_p(t.path) && (!mrb_undef_p(host_v) || !mrb_undef_p(port_v)))
    {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "Redis.new: a host and port, or a "
                  "path, not both");
    }

    if (!mrb_nil_p(t.path) && t.tls) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "Redis.new: ssl: true with a path: "
                  "Redis speaks TLS on its tls-port (TCP) only");
    }

    if (!mrb_nil_p(t.username) && mrb_nil_p(t.password)) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "Redis.new: username: without "
                  "password:");
    }

    if (!mrb_nil_p(sentinel_username) && mrb_nil_p(sentinel_password)) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "Redis.new: sentinel_username: "
                  "without sentinel_password:");
    }

    if (t.port <= 0 || t.port > 65535) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR, "invalid port %i", t.port);
    }

    /* NUL-terminated, without a NUL inside (raises otherwise) */
    redis_opt_cstr(mrb, t.host);
    redis_opt_cstr(mrb, t.path);
    redis_opt_cstr(mrb, t.username);
    redis_opt_cstr(mrb, t.password);
    redis_opt_cstr(mrb, sentinel_username);
    redis_opt_cstr(mrb, sentinel_password);
    for (i = 0; i < (int) redis_nelts(t.tls_files); i++) {
        redis_opt_cstr(mrb, t.tls_files[i]);
    }

    /* closed until it is on a connection: an initialize that raised
     * leaves an object whose commands raise ClosedError */
    r = mrb_calloc(mrb, 1, sizeof(redis_obj));
    r->timeout_ms = t.timeout;
    r->closed = 1;
    mrb_data_init(self, r, &redis_obj_type);

    if (sentinels) {
        redis_sentinel_init(mrb, self, r, kw_values[REDIS_KW_SENTINELS],
                            kw_values[REDIS_KW_NAME],
                            kw_values[REDIS_KW_ROLE],
                            redis_sentinel_options(mrb, &t, sentinel_username,
                                                   sentinel_password));
        return self;
    }

    redis_attach(mrb, self, r, &t);

    redis_caller_init(mrb, &caller, 0);
    st = mrb_redis_conn_open(r->conn, &caller);
    if (st != MRB_REDIS_OK) {
        redis_raise_status(mrb, r->conn, st);
    }

    return self;
}


/*
 * Redis.connect_set_raw(host, port, timeout = 1): mruby-redis's way to
 * name, once, the server of every Redis.new without arguments (there it
 * shared one connection between interpreters).  Connects now, so that a
 * server that is down fails here; returns the class.
 */
static mrb_value
redis_connect_set_raw(mrb_state *mrb, mrb_value self)
{
    mrb_value  argv[3], target;
    mrb_int    argc;

    argv[2] = mrb_nil_value();
    argc = mrb_get_args(mrb, "oo|o", &argv[0], &argv[1], &argv[2]);

    mrb_obj_new(mrb, redis_class(mrb), argc, argv);

    target = mrb_ary_new_from_values(mrb, 3, argv);
    mrb_iv_set(mrb, mrb_obj_value(redis_class(mrb)),
               mrb_intern_lit(mrb, "__default_target__"), target);

    return self;
}


/*
 * Commands after which the connection is in a state of its own that the
 * next request must not inherit: another database, a subscription, a
 * reply mode, another user or protocol.  A transaction (MULTI, WATCH) is
 * such a state until EXEC or DISCARD ends it: left open, every later
 * reply would be "QUEUED".  A request that leaves one keeps its link to
 * itself and has it dropped when it ends (redis_run_end).
 */
static const char  *redis_stateful[] = {
    "select", "subscribe", "psubscribe", "ssubscribe", "auth", "hello",
    "monitor", "readonly", "readwrite", "reset"
};

/* CLIENT's subcommands that change the connection (CLIENT ID, LIST, KILL
 * and the like do not). */
static const char  *redis_client_stateful[] = {
    "reply", "setname", "tracking", "caching", "no-evict", "no-touch",
    "setinfo"
};

/* What a startup script may set for every link (mrb_redis_conn_add_setup):
 * settings, not subscriptions or reply modes. */
static const char  *redis_setup[] = { "select", "auth", "hello", "readonly" };
static const char  *redis_client_setup[] = { "setname", "setinfo" };

/* Commands that change nothing on the server: one sent on a link that
 * broke before its reply may be sent again (Redis.new(sentinels:)), or
 * go to a cluster replica (Redis::Cluster.new(replica: true)). */
static const char  *redis_read_only[] = {
    "bitcount", "dbsize", "echo", "exists", "get", "getrange", "hexists",
    "hget", "hgetall", "hkeys", "hlen", "hmget", "hstrlen", "hvals", "info",
    "keys", "lindex", "llen", "lrange", "mget", "ping", "pttl", "role",
    "scard", "sismember", "smembers", "strlen", "time", "ttl", "type",
    "zcard", "zcount", "zrange", "zrangebyscore", "zrank", "zrevrange",
    "zrevrank", "zscore"
};

/* redis_track_state: a startup script's command to send on new links */
#define REDIS_SETUP  0x100


static int
redis_name_is(const char *p, size_t len, const char *name)
{
    return strlen(name) == len && strncasecmp(p, name, len) == 0;
}


static int
redis_name_in(const char *p, size_t len, const char **names, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        if (redis_name_is(p, len, names[i])) {
            return 1;
        }
    }

    return 0;
}


int
mrb_redis_read_only(const char *name, size_t len)
{
    return redis_name_in(name, len, redis_read_only,
                         redis_nelts(redis_read_only));
}


/* What the command in strs (its name and arguments, as Strings) does to
 * its link's state: MRB_REDIS_STATE_* and REDIS_SETUP. */
static unsigned
redis_track_state(mrb_state *mrb, mrb_value strs)
{
    mrb_run_rec *run;
    mrb_value    sub;
    const char  *p = RSTRING_PTR(RARRAY_PTR(strs)[0]);
    size_t       len = (size_t) RSTRING_LEN(RARRAY_PTR(strs)[0]);
    const char  *sp = NULL;
    size_t       slen = 0;

    if (redis_name_is(p, len, "exec") || redis_name_is(p, len, "discard")) {
        return MRB_REDIS_STATE_TX_END;
    }

    if (RARRAY_LEN(strs) > 1) {
        sub = RARRAY_PTR(strs)[1];
        sp = RSTRING_PTR(sub);
        slen = (size_t) RSTRING_LEN(sub);
    }

    /* a startup script sets up its connection on purpose: every link */
    run = mrb_interp_run(mrb);

    if (run == NULL || run->startup) {
        if (redis_name_in(p, len, redis_setup, redis_nelts(redis_setup))
            || (redis_name_is(p, len, "client") && sp != NULL
                && redis_name_in(sp, slen, redis_client_setup,
                                 redis_nelts(redis_client_setup))))
        {
            return REDIS_SETUP;
        }
        return 0;
    }

    if (redis_name_is(p, len, "multi") || redis_name_is(p, len, "watch")) {
        return MRB_REDIS_STATE_TX_BEGIN;
    }

    if (redis_name_in(p, len, redis_stateful, redis_nelts(redis_stateful))
        || (redis_name_is(p, len, "client") && sp != NULL
            && redis_name_in(sp, slen, redis_client_stateful,
                             redis_nelts(redis_client_stateful))))
    {
        return MRB_REDIS_STATE_DIRTY;
    }

    return 0;
}


/* Adds what one command does to b's state (a transaction's end or start:
 * the last one counts). */
static void
redis_batch_note(redis_batch *b, unsigned state)
{
    if (state & MRB_REDIS_STATE_TX_END) {
        b->state = (b->state & ~MRB_REDIS_STATE_TX_BEGIN)
                   | MRB_REDIS_STATE_TX_END;
    }

    if (state & MRB_REDIS_STATE_TX_BEGIN) {
        b->state = (b->state & ~MRB_REDIS_STATE_TX_END)
                   | MRB_REDIS_STATE_TX_BEGIN;
    }

    b->state |= state & MRB_REDIS_STATE_DIRTY;
}


/*
 * Formatted commands are wiped before they are freed: a credential may be
 * in any of them (AUTH, HELLO ... AUTH, ACL SETUSER, CONFIG SET
 * masterauth, MIGRATE ... AUTH), and rather than parse every command to
 * tell which, every one is wiped.  redis_buf_free frees a batch's buffer
 * (len bytes used), redis_command_free one command hiredis formatted.
 */
static void
redis_buf_free(char *buf, size_t len)
{
    if (buf != NULL) {
        explicit_bzero(buf, len);
        free(buf);
    }
}


static void
redis_command_free(char *cmd, int len)
{
    explicit_bzero(cmd, (size_t) len);
    redisFreeCommand(cmd);
}


/*
 * Formats name + args as one command and appends it to batch b.
 *
 * Each argument is made a String first (to_s runs Ruby, which may raise,
 * run the GC or change another argument); the Strings are kept in an
 * Array on this frame's arena, and only then, when no more Ruby runs,
 * their pointers are taken and the scratch arrays allocated.
 */
static void
redis_enqueue(mrb_state *mrb, redis_obj *r, redis_batch *b, mrb_value name,
    const mrb_value *args, mrb_int argc)
{
    int           len;
    char         *cmd, *q;
    size_t        cap;
    unsigned      state;
    mrb_int       i, n;
    mrb_value     s, strs;
    const char   *stack_argv[REDIS_ARGV_STACK], **argv;
    size_t        stack_lens[REDIS_ARGV_STACK], *lens;

    n = argc + (mrb_nil_p(name) ? 0 : 1);

    if (n == 0) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "no Redis command given");
    }

    strs = mrb_ary_new_capa(mrb, n);

    if (!mrb_nil_p(name)) {
        mrb_ary_push(mrb, strs, name);
    }

    for (i = 0; i < argc; i++) {
        s = args[i];

        if (mrb_symbol_p(s)) {
            s = mrb_sym_str(mrb, mrb_symbol(s));
        } else if (!mrb_string_p(s)) {
            s = mrb_obj_as_string(mrb, s);
        }

        mrb_ary_push(mrb, strs, s);
    }

    /* from here on nothing calls Ruby */
    state = redis_track_state(mrb, strs);

    argv = stack_argv;
    lens = stack_lens;

    if (n > REDIS_ARGV_STACK) {
        argv = malloc(n * sizeof(char *));
        lens = malloc(n * sizeof(size_t));

        if (argv == NULL || lens == NULL) {
            free(argv);
            free(lens);
            mrb_raise(mrb, E_RUNTIME_ERROR, "Redis: out of memory");
        }
    }

    for (i = 0; i < n; i++) {
        argv[i] = RSTRING_PTR(RARRAY_PTR(strs)[i]);
        lens[i] = (size_t) RSTRING_LEN(RARRAY_PTR(strs)[i]);
    }

    len = redisFormatCommandArgv(&cmd, (int) n, argv, lens);

    if (argv != stack_argv) {
        free(argv);
        free(lens);
    }

    if (len < 0) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis: out of memory");
    }

    /* a new buffer, not realloc's, which would free the old one unwiped */
    if (b->len + len > b->cap) {
        cap = (b->len + len) * 2;
        q = malloc(cap);

        if (q == NULL) {
            redis_command_free(cmd, len);
            mrb_raise(mrb, E_RUNTIME_ERROR, "Redis: out of memory");
        }

        if (b->buf != NULL) {
            memcpy(q, b->buf, b->len);
            redis_buf_free(b->buf, b->len);
        }

        b->buf = q;
        b->cap = cap;
    }

    if ((state & REDIS_SETUP)
        && mrb_redis_conn_add_setup(r->conn, cmd, (size_t) len) != 0)
    {
        redis_command_free(cmd, len);
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis: out of memory");
    }

    memcpy(b->buf + b->len, cmd, len);
    b->len += len;
    b->n++;
    redis_command_free(cmd, len);

    redis_batch_note(b, state);
    if (r->sentinel && !b->writes
        && !mrb_redis_read_only(RSTRING_PTR(RARRAY_PTR(strs)[0]),
                                (size_t) RSTRING_LEN(RARRAY_PTR(strs)[0])))
    {
        b->writes = 1;
    }
    if (state & (MRB_REDIS_STATE_DIRTY | MRB_REDIS_STATE_TX_BEGIN)) {
        mrb_part_dirty(mrb, &mrb_redis_part);
    }
}


static void
redis_batch_clear(redis_batch *b)
{
    redis_buf_free(b->buf, b->len);
    memset(b, 0, sizeof(redis_batch));
}


/* How a reply becomes a value (redis_reply_value's how). */
#define REDIS_AS_HASH        1  /* a multi-bulk reply of pairs: a Hash */
#define REDIS_STATUS_SYMBOL  2  /* a status reply ("OK"): a Symbol (:OK), as
                                   mruby-redis's reply and bulk_reply give
                                   them; a String otherwise */

static mrb_value
redis_reply_value(mrb_state *mrb, redisReply *rep, unsigned how)
{
    size_t     i;
    mrb_value  v;
    unsigned   inner = how & REDIS_STATUS_SYMBOL;

    switch (rep->type) {
    case REDIS_REPLY_STATUS:
        if (how & REDIS_STATUS_SYMBOL) {
            return mrb_symbol_value(mrb_intern(mrb, rep->str, rep->len));
        }
        return mrb_str_new(mrb, rep->str, rep->len);

    case REDIS_REPLY_STRING:
        return mrb_str_new(mrb, rep->str, rep->len);

    case REDIS_REPLY_INTEGER:
        return mrb_int_value(mrb, rep->integer);

    case REDIS_REPLY_ARRAY:
        /* a level of C recursion for each level the server nested */
        mrb_stack_check(mrb);
        if (how & REDIS_AS_HASH) {
            v = mrb_hash_new_capa(mrb, rep->elements / 2);
            for (i = 0; i + 1 < rep->elements; i += 2) {
                mrb_hash_set(mrb, v,
                             redis_reply_value(mrb, rep->element[i], inner),
                             redis_reply_value(mrb, rep->element[i + 1],
                                               inner));
            }
            return v;
        }

        v = mrb_ary_new_capa(mrb, rep->elements);
        for (i = 0; i < rep->elements; i++) {
            mrb_ary_push(mrb, v, redis_reply_value(mrb, rep->element[i],
                                                   inner));
        }
        return v;

    case REDIS_REPLY_ERROR:
        return mrb_exc_new(mrb, redis_error(mrb, "ReplyError"), rep->str,
                           rep->len);

    default:
        return mrb_nil_value();
    }
}


/* The replies of one flush, owned by a Data object so that an exception
 * while converting them (out of memory) cannot leak them. */
typedef struct {
    size_t       n;
    redisReply  *replies[];
} redis_replies;


static void
redis_replies_free(mrb_state *mrb, void *p)
{
    redis_replies  *rs = p;
    size_t          i;

    if (rs == NULL) {
        return;
    }

    for (i = 0; i < rs->n; i++) {
        if (rs->replies[i] != NULL) {
            freeReplyObject(rs->replies[i]);
        }
    }

    free(rs);
}


static const mrb_data_type  redis_replies_type = { "Redis replies",
                                                   redis_replies_free };


/* The current run's Redis commands and errors (mrb_metrics.h): n sent,
 * and of them the error replies, or all n when replies is NULL (lost with
 * the connection). */
static void
redis_count(mrb_state *mrb, size_t n, redisReply **replies)
{
    mrb_run_rec  *run = mrb_interp_run(mrb);
    size_t        i, errors = 0;

    if (run == NULL) {
        return;
    }

    for (i = 0; i < n; i++) {
        errors += replies == NULL || replies[i]->type == REDIS_REPLY_ERROR;
    }

    mrb_metrics_count(run->metrics_row, MRB_METRICS_REDIS_COMMANDS, n);
    mrb_metrics_count(run->metrics_row, MRB_METRICS_REDIS_ERRORS, errors);
}


/* An error reply by which a server says it is not (or not yet) the one a
 * Redis.new(sentinels:) wants: the command did not run. */
static int
redis_sentinel_refused(const redis_obj *r, const redisReply *rep)
{
    static const char  *words[] = { "LOADING ", "MASTERDOWN ", "NOREPLICAS " };
    size_t              i;

    if (rep->type != REDIS_REPLY_ERROR) {
        return 0;
    }

    for (i = 0; i < redis_nelts(words); i++) {
        if (strncmp(rep->str, words[i], strlen(words[i])) == 0) {
            return 1;
        }
    }

    /* a replica refuses writes: for role :replica, the script's mistake */
    return r->sentinel == REDIS_SENTINEL_MASTER
           && strncmp(rep->str, "READONLY ", 9) == 0;
}


/* What a Redis.new(sentinels:) does after a batch's outcome (st, the n
 * replies): */
#define REDIS_SENTINEL_STAY   0  /* nothing: the server is the right one */
#define REDIS_SENTINEL_MOVE   1  /* find the server again, at the next
                                    command */
#define REDIS_SENTINEL_RETRY  2  /* find it now and send the batch again */

/*
 * A batch is sent again only when it stands alone (no transaction, no
 * state of the link's own, in it or held from before: held) and either
 * did not run (refused by every reply, or the link broke before it was
 * sent) or changes nothing (read-only commands).
 */
static int
redis_sentinel_verdict(const redis_obj *r, const mrb_redis_conn *c,
    const redis_batch *sent, int held, mrb_redis_status st,
    redisReply **replies)
{
    size_t  i, refused = 0;
    int     alone = sent->state == 0 && !held;

    if (st == MRB_REDIS_ECONNECT) {
        return (alone && (!c->maybe_ran || !sent->writes))
               ? REDIS_SENTINEL_RETRY : REDIS_SENTINEL_MOVE;
    }

    if (st != MRB_REDIS_OK) {
        return REDIS_SENTINEL_STAY;
    }

    for (i = 0; i < sent->n; i++) {
        refused += redis_sentinel_refused(r, replies[i]);
    }

    if (refused == 0) {
        return REDIS_SENTINEL_STAY;
    }

    return (alone && (refused == sent->n || !sent->writes))
           ? REDIS_SENTINEL_RETRY : REDIS_SENTINEL_MOVE;
}


static void
redis_replies_clear(redisReply **replies, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        if (replies[i] != NULL) {
            freeReplyObject(replies[i]);
            replies[i] = NULL;
        }
    }
}


/*
 * Sends a Redis.new(sentinels:)'s batch: on the server its group names
 * now (moved first when another run found a new one, or when its last
 * command failed), and once more on the server found again when the
 * first attempt says the server failed over and the batch can safely be
 * sent twice (redis_sentinel_verdict).  All within r's timeout.  sent is
 * the GC's (a move runs Ruby, which may raise); the replies are in rs.
 */
static mrb_redis_status
redis_sentinel_exec(mrb_state *mrb, mrb_value self, redis_obj *r,
    redis_batch *sent, redisReply **replies, mrb_redis_conn **cp)
{
    int                held, verdict;
    mrb_value          group, addr;
    mrb_redis_status   st;
    mrb_redis_caller   caller;

    redis_caller_init(mrb, &caller, sent->state);
    caller.deadline = mrb_redis_now_ms() + r->timeout_ms;

    held = mrb_redis_conn_holds(r->conn, caller.owner);

    if (!held) {
        group = mrb_iv_get(mrb, self, mrb_intern_lit(mrb, "__sentinel__"));
        addr = mrb_iv_get(mrb, self, mrb_intern_lit(mrb, "__address__"));

        if (r->stale
            || !mrb_obj_eq(mrb, addr, mrb_iv_get(mrb, group,
                                                 mrb_intern_lit(mrb,
                                                     "@address"))))
        {
            redis_sentinel_move(mrb, self, r, r->stale, caller.deadline);
        }
    }

    *cp = r->conn;
    st = mrb_redis_conn_exec(r->conn, &caller, sent->buf, sent->len, sent->n,
                             replies);
    verdict = redis_sentinel_verdict(r, r->conn, sent, held, st, replies);

    if (verdict == REDIS_SENTINEL_STAY) {
        return st;
    }

    if (verdict == REDIS_SENTINEL_MOVE) {
        r->stale = 1;
        return st;
    }

    redis_count(mrb, sent->n, st == MRB_REDIS_OK ? replies : NULL);
    redis_replies_clear(replies, sent->n);

    r->stale = 1;
    redis_sentinel_move(mrb, self, r, 1, caller.deadline);

    *cp = r->conn;
    return mrb_redis_conn_exec(r->conn, &caller, sent->buf, sent->len,
                               sent->n, replies);
}


/*
 * Sends batch b on r's connection and returns the replies as an Array,
 * each made as how says (REDIS_STATUS_SYMBOL), a HGETALL's a Hash when
 * as_hash marks its index (NULL for none).  b's commands are taken first
 * (b is empty after), so that nothing else sees them while the run waits
 * for the replies.  Error replies are in the Array as exception objects;
 * the caller raises them.
 */
static mrb_value
redis_flush(mrb_state *mrb, mrb_value self, redis_obj *r, redis_batch *b,
    const unsigned char *as_hash, unsigned how)
{
    int                ai;
    size_t             i, n;
    mrb_value          ary;
    struct RData      *box;
    redis_batch        sent, *kept;
    redis_replies     *rs;
    mrb_redis_conn    *c;
    mrb_redis_status   st;
    mrb_redis_caller   caller;

    n = b->n;
    ary = mrb_ary_new_capa(mrb, n);

    if (n == 0) {
        return ary;
    }

    box = mrb_data_object_alloc(mrb, mrb->object_class, NULL,
                                &redis_replies_type);
    kept = r->sentinel ? redis_batch_new(mrb) : NULL;

    /* from here on nothing raises before the buffer is freed (or, for a
     * Redis.new(sentinels:), given to the GC) */
    sent = *b;
    memset(b, 0, sizeof(redis_batch));

    rs = calloc(1, sizeof(redis_replies) + n * sizeof(redisReply *));
    if (rs == NULL) {
        redis_batch_clear(&sent);
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis: out of memory");
    }

    box->data = rs;
    rs->n = n;

    if (kept != NULL) {
        *kept = sent;
        st = redis_sentinel_exec(mrb, self, r, kept, rs->replies, &c);

    } else {
        c = r->conn;
        redis_caller_init(mrb, &caller, sent.state);
        st = mrb_redis_conn_exec(c, &caller, sent.buf, sent.len, n,
                                 rs->replies);
        redis_batch_clear(&sent);
    }

    redis_count(mrb, n, st == MRB_REDIS_OK ? rs->replies : NULL);

    if (st != MRB_REDIS_OK) {
        redis_raise_status(mrb, c, st);
    }

    ai = mrb_gc_arena_save(mrb);

    for (i = 0; i < n; i++) {
        mrb_ary_push(mrb, ary, redis_reply_value(mrb, rs->replies[i],
                                   how | ((as_hash != NULL && as_hash[i])
                                          ? REDIS_AS_HASH : 0)));
        mrb_gc_arena_restore(mrb, ai);
    }

    /* freed now rather than at the next GC: replies can be large */
    box->data = NULL;
    redis_replies_free(mrb, rs);

    return ary;
}


static void
redis_batch_dfree(mrb_state *mrb, void *p)
{
    redis_batch  *b = p;

    if (b != NULL) {
        redis_batch_clear(b);
        free(b);
    }
}


static const mrb_data_type  redis_batch_type = { "Redis batch",
                                                 redis_batch_dfree };


/* A batch for one command, freed by the GC whatever raises. */
static redis_batch *
redis_batch_new(mrb_state *mrb)
{
    struct RData  *box;

    box = mrb_data_object_alloc(mrb, mrb->object_class, NULL,
                                &redis_batch_type);
    box->data = calloc(1, sizeof(redis_batch));

    if (box->data == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis: out of memory");
    }

    return box->data;
}


/*
 * Lists the object self (r) in the class's hidden __run_state__ Array,
 * once, for the end of the run whose queue or replies it is to take: a
 * request's must not reach the next request that uses the object (one a
 * startup script made), which the same address of its run cannot tell
 * from the one that left them.
 */
static void
redis_note_run_state(mrb_state *mrb, mrb_value self, redis_obj *r)
{
    mrb_value  klass = mrb_obj_value(redis_class(mrb)), list;
    mrb_sym    name = mrb_intern_lit(mrb, "__run_state__");

    mrb_part_dirty(mrb, &mrb_redis_part);

    if (r->listed) {
        return;
    }

    list = mrb_iv_get(mrb, klass, name);
    if (!mrb_array_p(list)) {
        list = mrb_ary_new(mrb);
        mrb_iv_set(mrb, klass, name, list);
    }

    mrb_ary_push(mrb, list, self);
    r->listed = 1;
}


/* r's queue, for the current run: raises when another run's commands are
 * in it (several requests share the object while they wait). */
static redis_batch *
redis_queue_of(mrb_state *mrb, mrb_value self, redis_obj *r)
{
    const void  *run = redis_owner(mrb);

    if ((r->queue.n != 0 || r->pipelining) && r->queue_owner != run) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis: another request's commands "
                  "are queued on this object (make a Redis object in each "
                  "request: Redis.new reuses the connection)");
    }

    redis_note_run_state(mrb, self, r);
    r->queue_owner = run;
    return &r->queue;
}


const char *
mrb_redis_name(mrb_state *mrb, mrb_value name, mrb_int *len)
{
    if (mrb_symbol_p(name)) {
        return mrb_sym_name_len(mrb, mrb_symbol(name), len);
    }

    if (mrb_string_p(name)) {
        *len = RSTRING_LEN(name);
        return RSTRING_PTR(name);
    }

    return NULL;
}


/* Whether a command name is HGETALL, whose reply becomes a Hash. */
static int
redis_is_hgetall(mrb_state *mrb, mrb_value name)
{
    mrb_int      len;
    const char  *p = mrb_redis_name(mrb, name, &len);

    return p != NULL && len == 7 && strncasecmp(p, "hgetall", 7) == 0;
}


/* One command now, or queued inside a pipeline (then nil is returned). */
static mrb_value
redis_command(mrb_state *mrb, mrb_value self, mrb_value name,
    const mrb_value *args, mrb_int argc)
{
    unsigned char   as_hash;
    mrb_value       ary, v;
    redis_obj      *r;

    redis_batch    *b;

    r = redis_self(mrb, self);

    if (r->queue_owner == redis_owner(mrb)) {
        if (r->pipelining) {
            redis_enqueue(mrb, r, &r->queue, name, args, argc);
            return mrb_nil_value();
        }

        if (r->queue.n != 0) {
            mrb_raise(mrb, E_RUNTIME_ERROR, "Redis: commands are queued: "
                      "commit them first");
        }
    }

    b = redis_batch_new(mrb);
    redis_enqueue(mrb, r, b, name, args, argc);

    as_hash = redis_is_hgetall(mrb, mrb_nil_p(name) ? args[0] : name);

    ary = redis_flush(mrb, self, r, b, &as_hash, 0);
    v = mrb_ary_ref(mrb, ary, 0);

    if (mrb_exception_p(v)) {
        mrb_exc_raise(mrb, v);
    }

    return v;
}


mrb_value
mrb_redis_command(mrb_state *mrb, mrb_value redis, mrb_value name,
    const mrb_value *args, mrb_int argc)
{
    return redis_command(mrb, redis, name, args, argc);
}


/* r.call("SET", "k", 1), and a Redis::Cluster's (an object, not data) */
static mrb_value
redis_call(mrb_state *mrb, mrb_value self)
{
    mrb_int           argc;
    const mrb_value  *args;

    mrb_get_args(mrb, "*", &args, &argc);

    if (argc == 0) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "no Redis command given");
    }

    if (mrb_type(self) == MRB_TT_OBJECT) {
        return mrb_redis_cluster_send(mrb, self, args[0], args + 1,
                                      argc - 1);
    }

    return redis_command(mrb, self, mrb_nil_value(), args, argc);
}


/* r.get("k"), r.set("k", "v"), ...: the method's name is the command;
 * a Redis::Cluster's too */
static mrb_value
redis_named(mrb_state *mrb, mrb_value self)
{
    mrb_int           argc;
    mrb_value         name;
    const mrb_value  *args;

    mrb_get_args(mrb, "*", &args, &argc);
    name = mrb_sym_str(mrb, mrb_get_mid(mrb));

    if (mrb_type(self) == MRB_TT_OBJECT) {
        return mrb_redis_cluster_send(mrb, self, name, args, argc);
    }

    return redis_command(mrb, self, name, args, argc);
}


/* r[k] and r[k] = v: GET and SET */
static mrb_value
redis_aref(mrb_state *mrb, mrb_value self)
{
    mrb_value  key;

    mrb_get_args(mrb, "o", &key);
    return redis_command(mrb, self, mrb_str_new_lit(mrb, "get"), &key, 1);
}


static mrb_value
redis_aset(mrb_state *mrb, mrb_value self)
{
    mrb_value  args[2];

    mrb_get_args(mrb, "oo", &args[0], &args[1]);
    redis_command(mrb, self, mrb_str_new_lit(mrb, "set"), args, 2);
    return args[1];
}


static mrb_value
redis_pipeline_body(mrb_state *mrb, void *data)
{
    mrb_value  *blk_self = data;

    return mrb_yield(mrb, blk_self[0], blk_self[1]);
}


/* r.pipelined { |p| p.incr("n"); p.expire("n", 30) } => [1, 1]: sent as
 * one write, replies read together; the first error reply is raised after
 * all of them were read. */
static mrb_value
redis_pipelined(mrb_state *mrb, mrb_value self)
{
    mrb_int     i;
    mrb_bool    failed;
    mrb_value     blk, ary, exc, blk_self[2];
    redis_obj    *r;
    redis_batch  *q;

    mrb_get_args(mrb, "&!", &blk);
    r = redis_self(mrb, self);
    q = redis_queue_of(mrb, self, r);

    if (r->pipelining || q->n != 0) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis: a pipeline is already open");
    }

    r->pipelining = 1;
    blk_self[0] = blk;
    blk_self[1] = self;

    exc = mrb_protect_error(mrb, redis_pipeline_body, blk_self, &failed);
    r->pipelining = 0;

    if (failed) {
        redis_batch_clear(q);
        mrb_exc_raise(mrb, exc);
    }

    ary = redis_flush(mrb, self, r, q, NULL, 0);

    for (i = 0; i < RARRAY_LEN(ary); i++) {
        if (mrb_exception_p(RARRAY_PTR(ary)[i])) {
            mrb_exc_raise(mrb, RARRAY_PTR(ary)[i]);
        }
    }

    return ary;
}


/* r.queue("INCR", "n"); r.queue("EXPIRE", "n", 30); r.commit => [1, 1] */
static mrb_value
redis_queue(mrb_state *mrb, mrb_value self)
{
    mrb_int           argc;
    const mrb_value  *args;

    redis_obj        *r;

    mrb_get_args(mrb, "*", &args, &argc);
    r = redis_self(mrb, self);
    redis_enqueue(mrb, r, redis_queue_of(mrb, self, r), mrb_nil_value(), args,
                  argc);

    return self;
}


/* The replies of what was queued; error replies are in the Array as
 * Redis::ReplyError objects. */
static mrb_value
redis_commit(mrb_state *mrb, mrb_value self)
{
    redis_obj  *r = redis_self(mrb, self);

    return redis_flush(mrb, self, r, redis_queue_of(mrb, self, r), NULL, 0);
}


/*
 * mruby-redis's reply and bulk_reply over what queue queued: the replies
 * (status replies as Symbols, error replies as Redis::ReplyError objects,
 * not raised) wait on the object, in a hidden Array, for reply to take
 * them one at a time; what was queued after them is sent when they are
 * used up.
 */
static mrb_value
redis_pending(mrb_state *mrb, mrb_value self, int all)
{
    mrb_sym       name = mrb_intern_lit(mrb, "__replies__");
    mrb_value     pending = mrb_iv_get(mrb, self, name), sent;
    redis_obj    *r = redis_self(mrb, self);
    redis_batch  *q = redis_queue_of(mrb, self, r);

    if (mrb_array_p(pending) && RARRAY_LEN(pending) != 0
        && r->replies_owner != r->queue_owner)
    {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Redis: another request's replies "
                  "wait on this object (make a Redis object in each "
                  "request: Redis.new reuses the connection)");
    }

    r->replies_owner = r->queue_owner;

    if (!mrb_array_p(pending)) {
        pending = mrb_ary_new(mrb);
        mrb_iv_set(mrb, self, name, pending);
    }

    if ((all || RARRAY_LEN(pending) == 0) && q->n != 0) {
        sent = redis_flush(mrb, self, r, q, NULL, REDIS_STATUS_SYMBOL);
        mrb_ary_concat(mrb, pending, sent);
    }

    if (RARRAY_LEN(pending) == 0) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "nothing queued yet");
    }

    return pending;
}


/* r.queue(:incr, "n"); r.reply => 1 */
static mrb_value
redis_reply(mrb_state *mrb, mrb_value self)
{
    return mrb_ary_shift(mrb, redis_pending(mrb, self, 0));
}


/* every reply not taken yet: r.bulk_reply => [:OK, 2, "2"] */
static mrb_value
redis_bulk_reply(mrb_state *mrb, mrb_value self)
{
    mrb_value  pending = redis_pending(mrb, self, 1);

    mrb_iv_remove(mrb, self, mrb_intern_lit(mrb, "__replies__"));
    return pending;
}


/* Closes the connection's links that are not another request's; this
 * object's commands raise Redis::ClosedError from now on. */
static mrb_value
redis_close(mrb_state *mrb, mrb_value self)
{
    redis_obj  *r = redis_self_any(mrb, self);

    if (r->queue_owner == redis_owner(mrb)) {
        redis_batch_clear(&r->queue);
    }
    mrb_redis_conn_close(r->conn, redis_owner(mrb));
    r->closed = 1;

    return mrb_nil_value();
}


static mrb_value
redis_connected(mrb_state *mrb, mrb_value self)
{
    redis_obj  *r = redis_self_any(mrb, self);

    return mrb_bool_value(!r->closed && mrb_redis_conn_connected(r->conn));
}


/* host and port, or path (a Unix socket): the others are nil */
static mrb_value
redis_host(mrb_state *mrb, mrb_value self)
{
    mrb_redis_conn  *c = redis_self(mrb, self)->conn;

    return c->host != NULL ? mrb_str_new_cstr(mrb, c->host)
                           : mrb_nil_value();
}


static mrb_value
redis_port(mrb_state *mrb, mrb_value self)
{
    mrb_redis_conn  *c = redis_self(mrb, self)->conn;

    return c->host != NULL ? mrb_fixnum_value(c->port) : mrb_nil_value();
}


static mrb_value
redis_path(mrb_state *mrb, mrb_value self)
{
    mrb_redis_conn  *c = redis_self(mrb, self)->conn;

    return c->path != NULL ? mrb_str_new_cstr(mrb, c->path)
                           : mrb_nil_value();
}


static const mrb_api_method  redis_methods[] = {
    { "initialize", redis_initialize, MRB_ARGS_OPT(3) | MRB_ARGS_KEY(9, 0) },
    { "call", redis_call, MRB_ARGS_ANY() },
    { "pipelined", redis_pipelined, MRB_ARGS_BLOCK() },
    { "queue", redis_queue, MRB_ARGS_ANY() },
    { "commit", redis_commit, MRB_ARGS_NONE() },
    { "reply", redis_reply, MRB_ARGS_NONE() },
    { "bulk_reply", redis_bulk_reply, MRB_ARGS_NONE() },
    { "close", redis_close, MRB_ARGS_NONE() },
    { "connected?", redis_connected, MRB_ARGS_NONE() },
    { "host", redis_host, MRB_ARGS_NONE() },
    { "port", redis_port, MRB_ARGS_NONE() },
    { "path", redis_path, MRB_ARGS_NONE() },
    { "[]", redis_aref, MRB_ARGS_REQ(1) },
    { "[]=", redis_aset, MRB_ARGS_REQ(2) },
    MRB_API_METHOD_END
};


static const mrb_api_method  redis_class_methods[] = {
    { "connect_set_raw", redis_connect_set_raw, MRB_ARGS_ARG(2, 1) },
    { "connect_set_udptr", redis_connect_set_raw, MRB_ARGS_ARG(2, 1) },
    MRB_API_METHOD_END
};


/* The commands callable by name (r.get "k"): each sends its own name and
 * returns the reply as it is.  Those whose reply mruby-redis turns into
 * something else (exists?, expire, set with options, keys, ...) are Ruby,
 * in mrblib/redis.rb. */
#define REDIS_CMD(name)  { name, redis_named, MRB_ARGS_ANY() }

static const mrb_api_method  redis_command_methods[] = {
    REDIS_CMD("append"), REDIS_CMD("asking"), REDIS_CMD("bitcount"),
    REDIS_CMD("blpop"), REDIS_CMD("brpop"), REDIS_CMD("cluster"),
    REDIS_CMD("dbsize"), REDIS_CMD("decr"), REDIS_CMD("decrby"),
    REDIS_CMD("del"), REDIS_CMD("discard"), REDIS_CMD("echo"),
    REDIS_CMD("exists"), REDIS_CMD("expireat"), REDIS_CMD("flushall"),
    REDIS_CMD("flushdb"), REDIS_CMD("get"), REDIS_CMD("getrange"),
    REDIS_CMD("getset"), REDIS_CMD("hdel"), REDIS_CMD("hexists"),
    REDIS_CMD("hget"), REDIS_CMD("hincrby"), REDIS_CMD("hlen"),
    REDIS_CMD("hmget"), REDIS_CMD("incr"), REDIS_CMD("incrby"),
    REDIS_CMD("incrbyfloat"), REDIS_CMD("info"), REDIS_CMD("lindex"),
    REDIS_CMD("llen"), REDIS_CMD("lpop"), REDIS_CMD("lpush"),
    REDIS_CMD("lrange"), REDIS_CMD("lrem"), REDIS_CMD("lset"),
    REDIS_CMD("ltrim"), REDIS_CMD("mget"), REDIS_CMD("multi"),
    REDIS_CMD("persist"), REDIS_CMD("pexpire"), REDIS_CMD("pfadd"),
    REDIS_CMD("pfcount"), REDIS_CMD("pfmerge"), REDIS_CMD("ping"),
    REDIS_CMD("pttl"), REDIS_CMD("publish"), REDIS_CMD("randomkey"),
    REDIS_CMD("rename"), REDIS_CMD("rpop"), REDIS_CMD("rpush"),
    REDIS_CMD("sadd"), REDIS_CMD("scard"), REDIS_CMD("select"),
    REDIS_CMD("setex"), REDIS_CMD("sismember"), REDIS_CMD("smembers"),
    REDIS_CMD("spop"), REDIS_CMD("srem"), REDIS_CMD("strlen"),
    REDIS_CMD("ttl"), REDIS_CMD("type"), REDIS_CMD("unwatch"),
    REDIS_CMD("watch"), REDIS_CMD("zadd"), REDIS_CMD("zcard"),
    REDIS_CMD("zcount"), REDIS_CMD("zincrby"), REDIS_CMD("zrange"),
    REDIS_CMD("zrangebyscore"), REDIS_CMD("zrank"), REDIS_CMD("zrem"),
    REDIS_CMD("zremrangebyscore"), REDIS_CMD("zrevrange"),
    REDIS_CMD("zrevrank"), REDIS_CMD("zscore"),
    MRB_API_METHOD_END
};


/* redis_run_end's walk: arg is [the run, links others hold]. */
static int
redis_drop_held(mrb_state *mrb, mrb_value key, mrb_value connobj, void *arg)
{
    const void     **walk = arg;
    mrb_redis_conn  *c;

    if (mrb_data_p(connobj)) {
        c = DATA_PTR(connobj);
        if (c != NULL && mrb_redis_conn_release(c, walk[0]) != 0) {
            walk[1] = c;
        }
    }

    return 0;
}


/*
 * Drops the queue and the replies that run left on the listed objects,
 * and unlists those that hold no other run's; returns whether some stay
 * listed.  Allocates nothing (the list shrinks in place).
 */
static int
redis_drop_run_state(mrb_state *mrb, const mrb_run_rec *run)
{
    mrb_value   list, obj;
    redis_obj  *r;
    mrb_int     i, kept = 0;

    list = mrb_iv_get(mrb, mrb_obj_value(redis_class(mrb)),
                      mrb_intern_lit(mrb, "__run_state__"));
    if (!mrb_array_p(list)) {
        return 0;
    }

    for (i = 0; i < RARRAY_LEN(list); i++) {
        obj = RARRAY_PTR(list)[i];
        r = DATA_PTR(obj);

        if (r == NULL) {
            continue;
        }
        if (r->queue_owner == run) {
            redis_batch_clear(&r->queue);
            r->pipelining = 0;
            r->queue_owner = NULL;
        }
        if (r->replies_owner == run) {
            mrb_iv_remove(mrb, obj, mrb_intern_lit(mrb, "__replies__"));
            r->replies_owner = NULL;
        }

        if (r->queue_owner != NULL || r->replies_owner != NULL) {
            RARRAY_PTR(list)[kept++] = obj;
        } else {
            r->listed = 0;
        }
    }

    ARY_SET_LEN(mrb_ary_ptr(list), kept);
    return kept != 0;
}


static int
redis_run_end(mrb_state *mrb, const mrb_run_rec *run)
{
    mrb_value     conns;
    const void   *walk[2];
    int           left;

    left = redis_drop_run_state(mrb, run);

    /* a startup script's links stay until a request's run ends */
    if (run->startup) {
        return 1;
    }

    conns = mrb_iv_get(mrb, mrb_obj_value(redis_class(mrb)),
                       mrb_intern_lit(mrb, "__connections__"));

    walk[0] = run;
    walk[1] = NULL;

    if (mrb_hash_p(conns)) {
        mrb_hash_foreach(mrb, mrb_hash_ptr(conns), redis_drop_held, walk);
    }

    return walk[1] != NULL || left;
}


static void
redis_define(mrb_state *mrb)
{
    struct RClass  *c, *base, *conn_error, *reply_error, *conn, *cluster;
    int             ai = mrb_gc_arena_save(mrb);

    c = mrb_api_define_class(mrb, NULL, "Redis", NULL, redis_methods);
    MRB_SET_INSTANCE_TT(c, MRB_TT_DATA);
    mrb_iv_set(mrb, mrb_obj_value(mrb->kernel_module),
               mrb_intern_lit(mrb, "__redis_class__"), mrb_obj_value(c));
    mrb_api_define_methods(mrb, c, redis_command_methods);

    base = mrb_api_define_class(mrb, c, "BaseError",
                                mrb->eStandardError_class, NULL);
    conn_error = mrb_api_define_class(mrb, c, "ConnectionError", base, NULL);
    mrb_api_define_class(mrb, c, "CannotConnectError", conn_error, NULL);
    mrb_api_define_class(mrb, c, "TimeoutError", conn_error, NULL);
    mrb_api_define_class(mrb, c, "ProtocolError", conn_error, NULL);
    mrb_api_define_class(mrb, c, "OOMError", conn_error, NULL);
    reply_error = mrb_api_define_class(mrb, c, "ReplyError", base, NULL);
    mrb_api_define_class(mrb, c, "AuthError", reply_error, NULL);
    mrb_api_define_class(mrb, c, "ClosedError", base, NULL);
    mrb_api_define_class_methods(mrb, c, redis_class_methods);
    cluster = mrb_redis_cluster_define(mrb, c, base);
    mrb_api_define_methods(mrb, cluster, redis_command_methods);
    mrb_define_method(mrb, cluster, "call", redis_call, MRB_ARGS_ANY());

    /* holds a kept connection; not for scripts */
    conn = mrb_api_define_class(mrb, c, "Connection", NULL, NULL);
    MRB_SET_INSTANCE_TT(conn, MRB_TT_DATA);
    mrb_undef_class_method(mrb, conn, "new");

    /* the classes are constants: the arena need not keep them, and runs
     * get its room (a run's allocations must fit it, unit test_wait) */
    mrb_gc_arena_restore(mrb, ai);
}


const mrb_part  mrb_redis_part = {
    "Redis", redis_define, redis_run_end, NULL, NULL
};
