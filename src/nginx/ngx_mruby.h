/*
 * What the http and stream modules share: scripts named by directives, the
 * startup scripts and the worker's interpreter, and the parts of the Ruby
 * API that are the same for both.
 *
 * Each module's .so links its own copy of these files (see config).
 */

#ifndef _NGX_MRUBY_H_INCLUDED_
#define _NGX_MRUBY_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include <mruby.h>

#include "mrb_api.h"
#include "mrb_errbuf.h"
#include "mrb_interp.h"
#include "mrb_lib.h"
#include "mrb_script.h"


/*
 * A script named by a directive.  Inline code and files with an explicit
 * policy are compiled when the directive is read; a file with no policy
 * waits in path until its block's mruby_cache is known (the block is
 * merged), see ngx_mruby_script_resolve().
 */
typedef struct {
    mrb_script  *script;
    ngx_str_t    path;         /* a file waiting for its policy, or empty */
    ngx_str_t    conf_file;    /* where the directive was written */
    ngx_uint_t   line;
} ngx_mruby_script_t;


/* The start of each module's main configuration. */
typedef struct {
    ngx_array_t   init;           /* of ngx_mruby_script_t * */
    ngx_array_t   init_worker;
    ngx_array_t   exit_worker;
    ngx_flag_t    enabled;        /* workers need an interpreter */

    /* The interpreter init ran in, in the master: each worker this
     * configuration starts takes it over (a copy, by fork), so what init
     * defined is there in every worker, as in the original.  The cycle's
     * pool closes it in the master when the configuration goes. */
    mrb_interp   *init_interp;

    ngx_str_t     cache_dir;      /* mruby_cache_dir, or empty:
                                     NGX_MRUBY_CACHE_DIR */
} ngx_mruby_main_conf_t;


/* Where Cache.new(namespace:) keeps its files unless mruby_cache_dir says:
 * beside the pid file, in the run directory (/run: a tmpfs, so the files
 * are memory, not disk). */
#define NGX_MRUBY_CACHE_DIR  "nginx-mruby-cache"


/*
 * A module's processes: the names its log lines use and the interpreter
 * of the worker process.
 */
typedef struct {
    const mrb_server  *server;
    const char        *name;           /* "mruby": what log lines start with */
    const char        *init;           /* the startup directives */
    const char        *init_worker;
    const char        *exit_worker;

    mrb_interp        *interp;         /* the worker's, or NULL */
} ngx_mruby_process_t;


#define NGX_MRUBY_VERSION  "1.0.0"


/*
 * The mrb_server of a module: to scripts, both modules are the one Nginx
 * class of ngx_mruby.
 */
#define ngx_mruby_server(define, write, log, log_enabled, log_fds,           \
                         wake_after, wake_on_fd)                              \
    {                                                                         \
        "NGINX",                           /* Kernel#server_name */           \
        "Nginx",                           /* the server class */             \
        "ngx_mruby",                       /* Nginx.module_name */            \
        NGX_MRUBY_VERSION,                 /* Nginx.module_version */         \
        NGX_LOG_EMERG,                     /* Nginx::LOG_EMERG is 1 */        \
        define,                                                               \
        write,                                                                \
        log,                                                                  \
        log_enabled,                                                          \
        wake_after,                                                           \
        0,                                 /* a sleep that cannot wait     \
                                              raises */                       \
        wake_on_fd,                                                           \
        ngx_mruby_trim_later,                                                 \
        NULL,                              /* scripts run on the worker's  \
                                              one thread */                   \
        mrb_parts,                                                            \
        log_fds                                                               \
    }


/* "mruby_stat_on_error" values: a `stat` file that no longer compiles
 * leaves its last version running (keep), or fails its runs (fail). */
#define NGX_MRUBY_STAT_ON_ERROR_KEEP  0
#define NGX_MRUBY_STAT_ON_ERROR_FAIL  1

extern ngx_conf_enum_t  ngx_mruby_stat_on_error_values[];

/* The post handler of mruby_run_timeout (an msec slot): at most a day. */
extern ngx_conf_post_t  ngx_mruby_run_timeout_post;

/* "mruby_cache" values: the policy of file scripts without one of their own */
#define NGX_MRUBY_CACHE_UNSET  NGX_CONF_UNSET_UINT


/* cmd->post of the startup directives: 1 for the inline (_code) forms */
#define NGX_MRUBY_CONF_CODE  (void *) 1

/*
 * The file and the inline form of a startup directive, in the main block
 * of type (NGX_HTTP_MAIN_CONF, ...) whose main configuration starts with
 * an ngx_mruby_main_conf_t.
 */
#define ngx_mruby_startup_commands(name, type, conf, field)                   \
    { ngx_string(name),                                                       \
      type|NGX_CONF_TAKE12,                                                   \
      ngx_mruby_conf_set_startup,                                             \
      conf,                                                                   \
      offsetof(ngx_mruby_main_conf_t, field),                                 \
      NULL },                                                                 \
    { ngx_string(name "_code"),                                               \
      type|NGX_CONF_TAKE1,                                                    \
      ngx_mruby_conf_set_startup,                                             \
      conf,                                                                   \
      offsetof(ngx_mruby_main_conf_t, field),                                 \
      NGX_MRUBY_CONF_CODE }


/* mruby_cache_dir, in the main block of type (NGX_HTTP_MAIN_CONF, ...) */
#define ngx_mruby_cache_dir_command(name, type, conf)                         \
    { ngx_string(name),                                                       \
      type|NGX_CONF_TAKE1,                                                    \
      ngx_mruby_conf_set_cache_dir,                                           \
      conf,                                                                   \
      offsetof(ngx_mruby_main_conf_t, cache_dir),                             \
      NULL }


/* ngx_mruby_conf.c */

/*
 * Reads a script directive: args[0] is a file and args[1] an optional
 * policy ("cache" = forever, "stat", "forever", "never"), or (code) args[0]
 * is inline Ruby.  Returns NGX_CONF_OK or an error for the directive.
 */
char *ngx_mruby_conf_script(ngx_conf_t *cf, ngx_str_t *args, ngx_uint_t nargs,
    ngx_uint_t code, ngx_mruby_script_t **sp);

/*
 * A script that a block may name once, from the directive's arguments, to
 * run in the workers of main configuration mcf.
 */
char *ngx_mruby_conf_set_script(ngx_conf_t *cf, ngx_uint_t code,
    ngx_mruby_script_t **sp, ngx_mruby_main_conf_t *mcf);

/*
 * The directive's inline code (args[1]) run now, while nginx reads the
 * configuration, in an interpreter of server's opened for it and closed
 * after: the server context directives.  NGX_CONF_OK, or NGX_CONF_ERROR
 * after an error line naming the directive's place.
 */
char *ngx_mruby_conf_run_code(ngx_conf_t *cf, const mrb_server *server);

/* The configuration such code is run for, or NULL outside it. */
ngx_conf_t *ngx_mruby_conf_running(void);

/*
 * For a script's add_listener(address: ...) (what names it in errors):
 * the address as a listen URL parsed into u (address: its String);
 * raises outside ngx_mruby_conf_run_code or for a bad address.
 */
void ngx_mruby_conf_listen_url(mrb_state *mrb, const char *what,
    mrb_value opts, ngx_url_t *u, mrb_value *address);

/*
 * nginx's defaults for a listen socket, as its own "listen" sets them, in
 * lsopt: an ngx_http_listen_opt_t or an ngx_stream_listen_opt_t.  The
 * socket type is an option since nginx 1.25 (QUIC for http; the stream
 * module's listen options, which we use from 1.25.5, have it too).
 */
#if (nginx_version >= 1025000)
#define ngx_mruby_listen_opt_type(lsopt)  (lsopt)->type = SOCK_STREAM
#else
#define ngx_mruby_listen_opt_type(lsopt)
#endif

#if (NGX_HAVE_SETFIB)
#define ngx_mruby_listen_opt_setfib(lsopt)  (lsopt)->setfib = -1
#else
#define ngx_mruby_listen_opt_setfib(lsopt)
#endif

#if (NGX_HAVE_TCP_FASTOPEN)
#define ngx_mruby_listen_opt_fastopen(lsopt)  (lsopt)->fastopen = -1
#else
#define ngx_mruby_listen_opt_fastopen(lsopt)
#endif

#if (NGX_HAVE_INET6)
#define ngx_mruby_listen_opt_ipv6only(lsopt)  (lsopt)->ipv6only = 1
#else
#define ngx_mruby_listen_opt_ipv6only(lsopt)
#endif

#define ngx_mruby_listen_opt_defaults(lsopt)                                  \
    ngx_memzero(lsopt, sizeof(*(lsopt)));                                     \
    (lsopt)->backlog = NGX_LISTEN_BACKLOG;                                    \
    (lsopt)->rcvbuf = -1;                                                     \
    (lsopt)->sndbuf = -1;                                                     \
    ngx_mruby_listen_opt_type(lsopt);                                         \
    ngx_mruby_listen_opt_setfib(lsopt);                                       \
    ngx_mruby_listen_opt_fastopen(lsopt);                                     \
    ngx_mruby_listen_opt_ipv6only(lsopt)

/* Creates a waiting file script with policy; NGX_OK or NGX_ERROR (logged). */
ngx_int_t ngx_mruby_script_resolve(ngx_conf_t *cf, ngx_mruby_script_t *s,
    ngx_uint_t policy);

/* "mruby_cache on|off|stat|forever|never" into an ngx_uint_t policy. */
char *ngx_mruby_conf_set_cache(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* A main configuration of size bytes, starting with ngx_mruby_main_conf_t */
void *ngx_mruby_create_main_conf(ngx_conf_t *cf, size_t size);

/* The startup directives, see ngx_mruby_startup_commands(). */
char *ngx_mruby_conf_set_startup(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* "mruby_cache_dir path": a path relative to nginx's prefix. */
char *ngx_mruby_conf_set_cache_dir(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


/* ngx_mruby_process.c: mcf may be NULL (the module is not configured) */

ngx_int_t ngx_mruby_init_master(ngx_mruby_process_t *p,
    ngx_mruby_main_conf_t *mcf, ngx_cycle_t *cycle);
ngx_int_t ngx_mruby_init_worker(ngx_mruby_process_t *p,
    ngx_mruby_main_conf_t *mcf, ngx_cycle_t *cycle);
void ngx_mruby_exit_worker(ngx_mruby_process_t *p,
    ngx_mruby_main_conf_t *mcf, ngx_cycle_t *cycle);

/* The worker's interpreter, or NULL after an error-log line. */
mrb_interp *ngx_mruby_interp(ngx_mruby_process_t *p, ngx_log_t *log);

/*
 * Runs s in the worker's interpreter with run (initialized): NGX_OK,
 * NGX_AGAIN when the script waits (run->may_wait; run->waiting is the
 * waiting run, see mrb_wait.h), or NGX_ERROR after one error-log line with
 * the exception's class, message and backtrace.
 */
ngx_int_t ngx_mruby_run(ngx_mruby_process_t *p, ngx_mruby_script_t *s,
    mrb_run_rec *run, ngx_log_t *log);

/*
 * What wakes a waiting script after a time (Async.sleep, the deadline of
 * a Redis reply): nginx's timer, then checked against the exact deadline
 * (ngx_mruby_wake_timer).  The adapter sets handler, data, ev.data and
 * ev.log; ev.data is the connection the script serves, as for nginx's own
 * events: its debug log names a timer by that connection's descriptor.
 * Zeroed memory is an unarmed one.
 */
typedef struct {
    ngx_event_t           ev;       /* first: the event is the wake */
    ngx_event_handler_pt  handler;  /* the adapter's: resumes the script */
    void                 *data;     /* the adapter's: what it resumes */
    int64_t               due;      /* ns on nginx's clock; 0: at once */
    ngx_queue_t           queue;    /* in the early ones, when early */
    unsigned              early:1;
} ngx_mruby_wake_t;

/*
 * A descriptor a waiting script watches (mrb_server.wake_on_fd: a Redis
 * reply), as a connection of the worker's event loop while it is watched;
 * the run's wake timer is the deadline.  Zeroed memory is an unwatched one.
 */
typedef struct {
    ngx_connection_t  *conn;
    ngx_mruby_wake_t  *wake;    /* its handler resumes the script */
    int               *ready;   /* set to 1 when the descriptor is ready */
} ngx_mruby_fd_wait_t;

/*
 * Watches fd for events (MRB_FD_READ, MRB_FD_WRITE) until it is ready,
 * then ends the watch, removes wake's timer, sets *ready and calls wake's
 * handler.  NGX_OK, or NGX_ERROR (no free connection, epoll refused).
 */
ngx_int_t ngx_mruby_fd_watch(ngx_mruby_fd_wait_t *w, ngx_mruby_wake_t *wake,
    int fd, int events, int *ready, ngx_log_t *log);

/* Ends the watch, if any; the descriptor stays open (it is not ours). */
void ngx_mruby_fd_unwatch(ngx_mruby_fd_wait_t *w);

/*
 * Calls wake's handler at the first pass of the event loop at or after
 * msec milliseconds from now, never sooner (Async.sleep, http and stream).
 */
void ngx_mruby_wake_timer(ngx_mruby_wake_t *wake, mrb_int msec);

/* Disarms wake, whatever it waits on. */
void ngx_mruby_wake_stop(ngx_mruby_wake_t *wake);

/* Posts the wakes that fired early and are due now to the current pass of
 * the loop (ngx_mruby_wake_timer); a script about to start calls it. */
void ngx_mruby_wake_poll(void);

/* mrb_server.trim_later: a timer of the worker that trims interp's stacks
 * (mrb_wait_trim), cancelable: it does not hold up the worker's exit. */
void ngx_mruby_trim_later(mrb_interp *interp);

/*
 * The request or session goes while its script waits (a client that left,
 * a timeout, the worker's end): the wake timer and the watch go and the
 * script ends now; *waiting becomes NULL.
 */
void ngx_mruby_wait_end(ngx_mruby_process_t *p, ngx_mruby_wake_t *wake,
    ngx_mruby_fd_wait_t *fd_wait, mrb_run_rec **waiting);


/* ngx_mruby_upstream.c */

/*
 * The address text ("127.0.0.1:8080", "[::1]", default_port when it has
 * none; 0: a port is required) as this worker's copy for the life of
 * cycle, which a round-robin peer may point to; the same copy for the
 * same address.  NULL with *err (what is wrong with the text) otherwise:
 * a host name is refused, nothing is resolved.
 */
const ngx_addr_t *ngx_mruby_upstream_target(ngx_cycle_t *cycle, u_char *text,
    size_t len, in_port_t default_port, const char **err);

/*
 * ngx_mruby_upstream_target for a Ruby argument: raises ArgumentError
 * "what: \"text\" why" instead of returning NULL.
 */
const ngx_addr_t *ngx_mruby_upstream_target_arg(mrb_state *mrb,
    const char *what, ngx_cycle_t *cycle, mrb_value addr,
    in_port_t default_port);

/* The cycle whose upstreams a script may re-target, or NULL where none
 * is: in the master, and while a configuration is read. */
ngx_cycle_t *ngx_mruby_upstream_cycle(void);

/*
 * The upstream block called name (any case) among upstreams, an array of
 * pointers to a module's upstream configurations (http's or stream's:
 * the offsets of their host and flags, and the flag of a block that
 * "upstream" made).  Raises ArgumentError "what: no <block> block" when
 * there is none.
 */
void *ngx_mruby_upstream_find(mrb_state *mrb, const char *what,
    const char *block, ngx_array_t *upstreams, size_t host_offset,
    size_t flags_offset, ngx_uint_t create, const char *name);

/*
 * Raises unless the round-robin peer list of upstream name (peers, with
 * number servers, backups backup servers and shpool its shared zone or
 * NULL) is one that one worker may re-target: set up, one server, no
 * zone.
 */
void ngx_mruby_upstream_check_peers(mrb_state *mrb, const char *what,
    const char *name, void *peers, ngx_uint_t number, ngx_uint_t backups,
    void *shpool);

/* Points a round-robin peer (http's or stream's) at target: failures of
 * the old server say nothing about the new one. */
#define ngx_mruby_upstream_retarget(peer, target)                            \
    do {                                                                      \
        (peer)->sockaddr = (target)->sockaddr;                                \
        (peer)->socklen = (target)->socklen;                                  \
        (peer)->name = (target)->name;                                        \
        (peer)->fails = 0;                                                    \
        (peer)->checked = 0;                                                  \
    } while (0)


/* ngx_mruby_file_watch.c */

/* Puts this worker's file watch into its event loop (or says why not). */
void ngx_mruby_file_watch_init(ngx_cycle_t *cycle);

/* Takes it out of the loop as the worker exits: nginx alerts for a
 * connection left open. */
void ngx_mruby_file_watch_exit(void);

/* Logs what the `stat` scripts of the configuration need of inotify. */
void ngx_mruby_file_watch_limits(ngx_cycle_t *cycle);


/* ngx_mruby_core.c */

/* Writes msg at an MRB_LOG_* level to log. */
void ngx_mruby_log(ngx_log_t *log, int level, const char *msg, size_t len);
int ngx_mruby_log_enabled(ngx_log_t *log, int level);

/* The files of log's chain that an alert goes to (mrb_server log_fds):
 * reads the log structures only. */
int ngx_mruby_log_fds(ngx_log_t *log, int *fds, int max);

/*
 * Defines the mrb_server log(), log_enabled() and log_fds() of a module:
 * each writes to, asks or reads the log that log_of(log_target, run)
 * picks.
 */
#define ngx_mruby_log_hooks(log, log_enabled, log_fds, log_of)                \
    static void                                                               \
    log(void *log_target, mrb_run_rec *run, int level, const char *msg,       \
        size_t len)                                                           \
    {                                                                         \
        ngx_mruby_log(log_of(log_target, run), level, msg, len);              \
    }                                                                         \
                                                                              \
    static int                                                                \
    log_enabled(void *log_target, mrb_run_rec *run, int level)                \
    {                                                                         \
        return ngx_mruby_log_enabled(log_of(log_target, run), level);         \
    }                                                                         \
                                                                              \
    static int                                                                \
    log_fds(void *log_target, mrb_run_rec *run, int *fds, int max)            \
    {                                                                         \
        return ngx_mruby_log_fds(log_of(log_target, run), fds, max);          \
    }

/* nginx's return codes (OK, DECLINED, ...) and log levels (LOG_*) in c. */
void ngx_mruby_define_codes(mrb_state *mrb, struct RClass *c);

/*
 * outer::Connection: remote_ip, remote_port, local_ip and local_port of the
 * connection that ngx_mruby_connection() gives (the methods of
 * ngx_mruby_connection_methods, which stream also gives the class).
 */
struct RClass *ngx_mruby_define_connection(mrb_state *mrb,
    struct RClass *outer);

extern const mrb_api_method  ngx_mruby_connection_methods[];
mrb_value ngx_mruby_conn_remote_ip(mrb_state *mrb, mrb_value self);
mrb_value ngx_mruby_conn_local_ip(mrb_state *mrb, mrb_value self);

/*
 * The client connection of the current run (the request's, the stream
 * session's): each module defines it.
 */
ngx_connection_t *ngx_mruby_connection(mrb_state *mrb);


#endif /* _NGX_MRUBY_H_INCLUDED_ */
