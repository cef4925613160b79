/*
 * ngx_mruby: Ruby (mruby) scripts in every request phase of nginx, on the
 * server-neutral core in src/core.
 */

#ifndef _NGX_HTTP_MRUBY_MODULE_H_INCLUDED_
#define _NGX_HTTP_MRUBY_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <mruby.h>

#include "mrb_http_check.h"
#include "mrb_interp.h"
#include "mrb_script.h"
#include "ngx_mruby.h"


/*
 * Where a script runs.  The first NGX_HTTP_MRUBY_NHANDLERS are the
 * per-location handlers; the others are runs of another kind.
 */
typedef enum {
    NGX_HTTP_MRUBY_POST_READ = 0,
    NGX_HTTP_MRUBY_SERVER_REWRITE,
    NGX_HTTP_MRUBY_REWRITE,
    NGX_HTTP_MRUBY_ACCESS,
    NGX_HTTP_MRUBY_CONTENT,
    NGX_HTTP_MRUBY_LOG,
    NGX_HTTP_MRUBY_HEADER_FILTER,
    NGX_HTTP_MRUBY_BODY_FILTER,
    NGX_HTTP_MRUBY_NHANDLERS,

    NGX_HTTP_MRUBY_SET = NGX_HTTP_MRUBY_NHANDLERS,   /* mruby_set */
    NGX_HTTP_MRUBY_SSL_HANDSHAKE
} ngx_http_mruby_phase_e;


/*
 * cmd->post of the script directives: the phase, and whether the argument
 * is inline code (the _code forms) rather than a file.
 */
#define NGX_HTTP_MRUBY_CMD(phase, code)                                       \
    (void *) (uintptr_t) ((phase) << 1 | (code))
#define ngx_http_mruby_cmd_phase(post)   ((uintptr_t) (post) >> 1)
#define ngx_http_mruby_cmd_code(post)    ((uintptr_t) (post) & 1)


typedef struct {
    ngx_mruby_main_conf_t  common;        /* first: see ngx_mruby.h */
    ngx_uint_t             handlers;      /* bit per phase used anywhere */
    size_t                 stack_size;    /* mruby_stack_size: of a run
                                             that may wait (mrb_wait.h) */
} ngx_http_mruby_main_conf_t;


typedef struct {
    ngx_mruby_script_t   *ssl_handshake;
    size_t                ssl_run_memory; /* the handshake run's budgets:
                                             the server's own (merged) */
    ngx_msec_t            ssl_run_timeout;
    ngx_uint_t            keepalive;      /* of an upstream block:
                                             mruby_upstream_keepalive */
} ngx_http_mruby_srv_conf_t;


typedef struct {
    ngx_uint_t            index;          /* of the variable */
    ngx_mruby_script_t   *script;
} ngx_http_mruby_set_t;


typedef struct {
    ngx_mruby_script_t   *handlers[NGX_HTTP_MRUBY_NHANDLERS];
    ngx_array_t          *sets;           /* of ngx_http_mruby_set_t */
    ngx_uint_t            cache;          /* mrb_cache_policy or UNSET */
    ngx_uint_t            stat_on_error;  /* NGX_MRUBY_STAT_ON_ERROR_* */
    ngx_flag_t            read_body;
    ngx_flag_t            add_handler;
    off_t                 body_limit;     /* 0: only client_max_body_size */
    off_t                 filter_limit;   /* the body filter's; 0: none */
    ngx_msec_t            slow_log;       /* mruby_slow_log; 0: off */
    int64_t               slow_ns;        /* the same, for mrb_run_rec */
    size_t                run_memory;     /* mrb_run.memory_limit */
    ngx_msec_t            run_timeout;    /* each run's time budget; 0:
                                             none (mrb_run_budget.h) */
} ngx_http_mruby_loc_conf_t;


typedef struct ngx_http_mruby_ctx_s  ngx_http_mruby_ctx_t;

/*
 * What a run of the http module carries in mrb_run_rec.data: the phase tells
 * the Ruby API what is allowed and what the rest points to.
 */
typedef struct {
    ngx_http_mruby_phase_e   phase;
    ngx_http_mruby_ctx_t    *ctx;         /* request phases */
    void                    *filter;      /* body filter: the body */
    ngx_connection_t        *connection;  /* TLS handshake */
} ngx_http_mruby_run_data_t;


/* A request's state across phases (cleared by an internal redirect). */
struct ngx_http_mruby_ctx_s {
    ngx_chain_t          *out;            /* rputs / echo */
    ngx_chain_t         **last_out;
    off_t                 out_len;

    ngx_str_t             redirect;       /* Nginx.redirect "/path" */

    /* a run of a phase up to content, which may wait (mrb_wait.h) */
    ngx_http_mruby_run_data_t  data;
    mrb_run_rec          *waiting;        /* while its script waits */
    ngx_http_mruby_set_t *wait_set;       /* when that is an mruby_set's
                                             (until its phase runs again) */
    ngx_mruby_wake_t      wake;           /* Async.sleep's timer */
    ngx_mruby_fd_wait_t   fd_wait;        /* a Redis reply's socket */
    ngx_http_request_t   *sr_last;        /* Async::HTTP.last_response */
    ngx_int_t             sr_rc;          /* its error status, or 0 */
    mrb_int               resumed_result; /* a run that ended on a resume */
    ngx_int_t             resumed_status; /* NGX_OK, or the error status */

    unsigned              body_read:1;
    unsigned              body_waiting:1;
    unsigned              wait_phase:4;   /* where the script waits */
    unsigned              resumed:1;      /* wait_phase's run has ended */
    unsigned              resumed_returned:1;
    unsigned              wait_cleanup:1; /* the cleanup is registered */
    unsigned              sr_waiting:1;   /* the script waits for sr_last */
    unsigned              sr_done:1;      /* which has ended */
};


extern ngx_module_t  ngx_http_mruby_module;
extern ngx_module_t  ngx_http_mruby_filter_module;


/* ngx_http_mruby_module.c: the module, and what nginx gives the core */
extern const mrb_server  ngx_http_mruby_server;
extern ngx_mruby_process_t  ngx_http_mruby_process;
ngx_http_mruby_ctx_t *ngx_http_mruby_get_ctx(ngx_http_request_t *r);
ngx_int_t ngx_http_mruby_run(ngx_http_request_t *r, ngx_mruby_script_t *s,
    ngx_http_mruby_run_data_t *data, mrb_run_rec *run, mrb_int dflt);

/* ngx_http_mruby_metrics.c: the mruby_metrics directive, and the phases'
 * names (by ngx_http_mruby_phase_e) in the metrics' labels */
extern const char *const  ngx_http_mruby_phase_names[];
char *ngx_http_mruby_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);

/* ngx_http_mruby_directive.c */
extern ngx_command_t  ngx_http_mruby_commands[];
char *ngx_http_mruby_merge_handlers(ngx_conf_t *cf,
    ngx_http_mruby_loc_conf_t *prev, ngx_http_mruby_loc_conf_t *conf);

/* ngx_http_mruby_handler.c */
ngx_int_t ngx_http_mruby_handler_init(ngx_conf_t *cf,
    ngx_http_mruby_main_conf_t *mmcf);

/* What a script of a phase before content (after it ended) or of the
 * content phase leaves to nginx; see the handlers. */
ngx_int_t ngx_http_mruby_phase_done(ngx_http_request_t *r,
    ngx_http_mruby_ctx_t *ctx, ngx_http_mruby_phase_e phase, mrb_int result,
    unsigned returned);
ngx_int_t ngx_http_mruby_content_done(ngx_http_request_t *r,
    ngx_http_mruby_ctx_t *ctx, mrb_int result, unsigned returned);

/* ngx_http_mruby_subrequest.c: Nginx::Async::HTTP */
void ngx_http_mruby_subrequest_define(mrb_state *mrb, struct RClass *nginx);

/* ngx_http_mruby_wait.c */
int ngx_http_mruby_wake_after(mrb_run_rec *run, mrb_int msec);
int ngx_http_mruby_wake_on_fd(mrb_run_rec *run, int fd, int events,
    mrb_int msec, int *ready);

/*
 * A phase handler whose run returned NGX_AGAIN: the request waits for its
 * script (NGX_DONE to return), or an error status.
 */
ngx_int_t ngx_http_mruby_wait_begin(ngx_http_request_t *r,
    ngx_http_mruby_ctx_t *ctx, ngx_http_mruby_phase_e phase, mrb_run_rec *run);

/* ngx_http_mruby_filter_module.c */
void ngx_http_mruby_filter_define(mrb_state *mrb, struct RClass *nginx);

/* ngx_http_mruby_variable.c */
char *ngx_http_mruby_set(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_http_mruby_merge_sets(ngx_conf_t *cf,
    ngx_http_mruby_loc_conf_t *prev, ngx_http_mruby_loc_conf_t *conf);
ngx_int_t ngx_http_mruby_sets_run(ngx_http_request_t *r,
    ngx_http_mruby_ctx_t *ctx, ngx_http_mruby_phase_e phase);

/* The waiting mruby_set script of r (ctx->wait_set) has ended with rc
 * (mrb_wait_resume's, out its run): its variable gets the value, or none
 * after an error-log line.  out->value is in the caller's GC arena. */
void ngx_http_mruby_set_ended(ngx_http_request_t *r,
    ngx_http_mruby_ctx_t *ctx, mrb_state *mrb, int rc, mrb_run_rec *out);
void ngx_http_mruby_var_define(mrb_state *mrb, struct RClass *nginx);
mrb_value ngx_http_mruby_var_value(mrb_state *mrb, ngx_http_request_t *r,
    ngx_str_t *name);

/* ngx_http_mruby_ssl.c */
ngx_int_t ngx_http_mruby_ssl_init(ngx_conf_t *cf);
void ngx_http_mruby_ssl_define(mrb_state *mrb, struct RClass *nginx);

/* ngx_http_mruby_core.c: the Nginx class */
void ngx_http_mruby_nginx_define(mrb_state *mrb, struct RClass *nginx);
ngx_http_request_t *ngx_http_mruby_request(mrb_state *mrb);
ngx_http_mruby_run_data_t *ngx_http_mruby_run_data(mrb_state *mrb,
    ngx_http_mruby_phase_e phase, const char *what);
mrb_value ngx_http_mruby_get_status(mrb_state *mrb, mrb_value self);
mrb_value ngx_http_mruby_set_status(mrb_state *mrb, mrb_value self);
mrb_value ngx_http_mruby_str(mrb_state *mrb, ngx_str_t *s);
ngx_int_t ngx_http_mruby_pstr(ngx_pool_t *pool, mrb_value v, ngx_str_t *s);
void ngx_http_mruby_copy_checked(mrb_state *mrb, ngx_http_request_t *r,
    const mrb_http_str *from, ngx_str_t *to, const char *what);

/* ngx_http_mruby_request.c */
void ngx_http_mruby_request_define(mrb_state *mrb, struct RClass *nginx);

/* ngx_http_mruby_headers.c */
void ngx_http_mruby_headers_define(mrb_state *mrb, struct RClass *nginx);
ngx_int_t ngx_http_mruby_headers_out_set(ngx_http_request_t *r,
    ngx_str_t *key, ngx_str_t *value);

/* ngx_http_mruby_connection.c */
void ngx_http_mruby_connection_define(mrb_state *mrb, struct RClass *nginx);

/* ngx_http_mruby_server_context.c */

/* mruby_server_context_handler_code: runs the code while the server block
 * is read. */
char *ngx_http_mruby_server_context(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* Nginx::Server#add_listener, which raises outside that code. */
mrb_value ngx_http_mruby_server_add_listener(mrb_state *mrb, mrb_value self);

/* ngx_http_mruby_upstream.c */

/* mruby_upstream_keepalive N: nginx's own "keepalive N" for the block. */
char *ngx_http_mruby_upstream_keepalive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* Nginx::Upstream */
void ngx_http_mruby_upstream_define(mrb_state *mrb, struct RClass *nginx);
mrb_value ngx_http_mruby_document_root(mrb_state *mrb, mrb_value self);


#endif /* _NGX_HTTP_MRUBY_MODULE_H_INCLUDED_ */
