/*
 * Nginx::Stream::Connection: the client connection of the session and,
 * made with an upstream's name, that stream upstream's one server, which
 * upstream_server= re-targets for this worker (ngx_mruby_upstream.c).
 *
 * The original's scripts call the connection's readers both on an
 * instance and on the class (Nginx::Stream::Connection.local_ip): both
 * forms are given, from the same functions.
 */

#include "ngx_stream_mruby_module.h"

#include <mruby/class.h>
#include <mruby/data.h>
#include <mruby/string.h>


static const mrb_data_type  ngx_stream_mruby_conn_type = {
    "Nginx::Stream::Connection", NULL
};


/*
 * Nginx::Stream::Connection.new([upstream]): with a name, the stream
 * upstream block so called, which must have exactly one server address
 * (round robin's peer list of one, in this worker's memory).
 */
static mrb_value
ngx_stream_mruby_conn_init(mrb_state *mrb, mrb_value self)
{
    char                              *name = NULL;
    ngx_cycle_t                       *cycle;
    ngx_stream_upstream_rr_peers_t    *peers;
    ngx_stream_upstream_srv_conf_t    *uscf;
    ngx_stream_upstream_main_conf_t   *umcf;

    mrb_get_args(mrb, "|z!", &name);

    mrb_data_init(self, NULL, &ngx_stream_mruby_conn_type);

    if (name == NULL) {
        return self;
    }

    cycle = ngx_mruby_upstream_cycle();
    umcf = (cycle == NULL)
           ? NULL
           : ngx_stream_cycle_get_module_main_conf(cycle,
                                                   ngx_stream_upstream_module);
    if (umcf == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Nginx::Stream::Connection: an "
                  "upstream only in a worker (a session script or an "
                  "init-worker script), with a stream block");
    }

    uscf = ngx_mruby_upstream_find(mrb, "Nginx::Stream::Connection",
               "stream upstream", &umcf->upstreams,
               offsetof(ngx_stream_upstream_srv_conf_t, host),
               offsetof(ngx_stream_upstream_srv_conf_t, flags),
               NGX_STREAM_UPSTREAM_CREATE, name);

    peers = uscf->peer.data;
    ngx_mruby_upstream_check_peers(mrb, "Nginx::Stream::Connection", name,
        peers, peers ? peers->number : 0,
        (peers && peers->next) ? peers->next->number : 0,
#if (NGX_STREAM_UPSTREAM_ZONE)
        peers ? peers->shpool : NULL
#else
        NULL
#endif
        );

    /* the upstream lives as long as the worker: no copy to free */
    mrb_data_init(self, uscf, &ngx_stream_mruby_conn_type);

    return self;
}


static ngx_stream_upstream_rr_peer_t *
ngx_stream_mruby_conn_peer(mrb_state *mrb, mrb_value self)
{
    ngx_stream_upstream_srv_conf_t  *uscf;
    ngx_stream_upstream_rr_peers_t  *peers;

    uscf = mrb_data_get_ptr(mrb, self, &ngx_stream_mruby_conn_type);
    if (uscf == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Nginx::Stream::Connection: no "
                  "upstream; make it with Nginx::Stream::Connection.new(name)");
    }

    peers = uscf->peer.data;

    return peers->peer;
}


/* #upstream_server: "127.0.0.1:8080" */
static mrb_value
ngx_stream_mruby_conn_upstream_server(mrb_state *mrb, mrb_value self)
{
    ngx_stream_upstream_rr_peer_t  *peer = ngx_stream_mruby_conn_peer(mrb,
                                                                      self);

    return mrb_str_new(mrb, (const char *) peer->name.data,
                       (mrb_int) peer->name.len);
}


/*
 * #upstream_server = "10.0.0.2:5000": the sessions of this worker proxied
 * to the upstream after this go there.  An IP address and a port: nothing
 * is resolved.
 */
static mrb_value
ngx_stream_mruby_conn_set_upstream_server(mrb_state *mrb, mrb_value self)
{
    mrb_value                       addr;
    const ngx_addr_t               *target;
    ngx_stream_upstream_rr_peer_t  *peer;

    mrb_get_args(mrb, "S", &addr);
    peer = ngx_stream_mruby_conn_peer(mrb, self);

    target = ngx_mruby_upstream_target_arg(mrb,
                 "Nginx::Stream::Connection#upstream_server=",
                 (ngx_cycle_t *) ngx_cycle, addr, 0);

    ngx_mruby_upstream_retarget(peer, target);

    return addr;
}


/* the session's run (mrb_interp_request raises outside one) */
static mrb_run_rec *
ngx_stream_mruby_conn_run(mrb_state *mrb)
{
    (void) mrb_interp_request(mrb);

    return mrb_interp_run(mrb);
}


/* stream_status: the verdict the handler gives (DECLINED unless set) */
static mrb_value
ngx_stream_mruby_conn_stream_status(mrb_state *mrb, mrb_value self)
{
    return mrb_int_value(mrb, ngx_stream_mruby_conn_run(mrb)->result);
}


/* stream_status = Nginx::Stream::ABORT: as Nginx.return */
static mrb_value
ngx_stream_mruby_conn_set_stream_status(mrb_state *mrb, mrb_value self)
{
    mrb_int  code;

    mrb_get_args(mrb, "i", &code);

    ngx_stream_mruby_conn_run(mrb)->result = code;

    return mrb_int_value(mrb, code);
}


/* local_ip_port: the listen address the session came in on, as written */
static mrb_value
ngx_stream_mruby_conn_local_ip_port(mrb_state *mrb, mrb_value self)
{
    ngx_connection_t  *c = ngx_mruby_connection(mrb);

    return mrb_str_new(mrb, (const char *) c->listening->addr_text.data,
                       (mrb_int) c->listening->addr_text.len);
}


/* proxy_protocol_ip: the source address of a PROXY protocol header, or nil */
static mrb_value
ngx_stream_mruby_conn_proxy_protocol_ip(mrb_state *mrb, mrb_value self)
{
    ngx_connection_t  *c = ngx_mruby_connection(mrb);

    if (c->proxy_protocol == NULL) {
        return mrb_nil_value();
    }

    return mrb_str_new(mrb, (const char *) c->proxy_protocol->src_addr.data,
                       (mrb_int) c->proxy_protocol->src_addr.len);
}


/* the readers, as instance and as class methods */
static const mrb_api_method  ngx_stream_mruby_conn_readers[] = {
    { "remote_addr", ngx_mruby_conn_remote_ip, MRB_ARGS_NONE() },
    { "local_addr", ngx_mruby_conn_local_ip, MRB_ARGS_NONE() },
    { "local_ip_port", ngx_stream_mruby_conn_local_ip_port, MRB_ARGS_NONE() },
    { "proxy_protocol_ip", ngx_stream_mruby_conn_proxy_protocol_ip,
      MRB_ARGS_NONE() },
    { "proxy_protocol_addr", ngx_stream_mruby_conn_proxy_protocol_ip,
      MRB_ARGS_NONE() },
    { "stream_status", ngx_stream_mruby_conn_stream_status, MRB_ARGS_NONE() },
    { "stream_status=", ngx_stream_mruby_conn_set_stream_status,
      MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};


static const mrb_api_method  ngx_stream_mruby_conn_methods[] = {
    { "initialize", ngx_stream_mruby_conn_init, MRB_ARGS_OPT(1) },
    { "upstream_server", ngx_stream_mruby_conn_upstream_server,
      MRB_ARGS_NONE() },
    { "upstream_server=", ngx_stream_mruby_conn_set_upstream_server,
      MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};


void
ngx_stream_mruby_connection_define(mrb_state *mrb, struct RClass *stream)
{
    struct RClass  *c;

    c = ngx_mruby_define_connection(mrb, stream);

    MRB_SET_INSTANCE_TT(c, MRB_TT_DATA);

    mrb_api_define_methods(mrb, c, ngx_stream_mruby_conn_methods);
    mrb_api_define_methods(mrb, c, ngx_stream_mruby_conn_readers);
    mrb_api_define_class_methods(mrb, c, ngx_mruby_connection_methods);
    mrb_api_define_class_methods(mrb, c, ngx_stream_mruby_conn_readers);
}
