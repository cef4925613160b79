/*
 * ngx_stream_mruby: Ruby scripts in the access phase of stream (TCP/UDP)
 * servers, on the same core as the http module.
 */

#ifndef _NGX_STREAM_MRUBY_MODULE_H_INCLUDED_
#define _NGX_STREAM_MRUBY_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_stream.h>

#include <mruby.h>

#include "mrb_interp.h"
#include "mrb_script.h"
#include "ngx_mruby.h"


typedef struct {
    ngx_mruby_script_t   *handler;        /* mruby_stream(_code) */
    size_t                run_memory;     /* mruby_run_memory; 0: none */
    ngx_msec_t            run_timeout;    /* mruby_run_timeout; 0: none */
} ngx_stream_mruby_srv_conf_t;


/*
 * A session whose script waits (mrb_wait.h): in mrb_run_rec.data of a stream
 * run, kept in the connection's pool.
 */
typedef struct {
    ngx_stream_session_t  *session;
    mrb_run_rec           *waiting;       /* while its script waits */
    ngx_mruby_wake_t       wake;          /* Async.sleep's timer */
    ngx_mruby_fd_wait_t    fd_wait;       /* a Redis reply's socket */
    mrb_int                result;        /* when the script has ended */
    ngx_int_t              status;        /* NGX_OK, or NGX_ERROR */
    unsigned               resumed:1;     /* ... and the phase runs again */
} ngx_stream_mruby_ctx_t;


/* ngx_stream_mruby_module.c: the module, and what nginx gives the core */
extern ngx_module_t       ngx_stream_mruby_module;
extern const mrb_server   ngx_stream_mruby_server;
extern ngx_mruby_process_t  ngx_stream_mruby_process;


/* ngx_stream_mruby_core.c: Nginx::Stream, and waking a stream script */
struct RClass *ngx_stream_mruby_stream_define(mrb_state *mrb,
    struct RClass *nginx);
int ngx_stream_mruby_wake_after(mrb_run_rec *run, mrb_int msec);
int ngx_stream_mruby_wake_on_fd(mrb_run_rec *run, int fd, int events,
    mrb_int msec, int *ready);


/* ngx_stream_mruby_server_context.c */

/* mruby_stream_server_context_code: runs the code while the stream server
 * block is read. */
char *ngx_stream_mruby_server_context(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* Nginx::Stream.add_listener, which raises outside that code. */
mrb_value ngx_stream_mruby_add_listener(mrb_state *mrb, mrb_value self);


/* ngx_stream_mruby_connection.c: Nginx::Stream::Connection */
void ngx_stream_mruby_connection_define(mrb_state *mrb, struct RClass *stream);


#endif /* _NGX_STREAM_MRUBY_MODULE_H_INCLUDED_ */
