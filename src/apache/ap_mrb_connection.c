/*
 * Apache::Connection: the client connection of the current request.
 */

#include "ap_mrb.h"


static conn_rec *
ap_mrb_conn(mrb_state *mrb)
{
    return ap_mrb_request(mrb)->connection;
}


static mrb_value
ap_mrb_conn_remote_ip(mrb_state *mrb, mrb_value self)
{
    return ap_mrb_str(mrb, ap_mrb_conn(mrb)->client_ip);
}


static mrb_value
ap_mrb_conn_remote_port(mrb_state *mrb, mrb_value self)
{
    conn_rec  *c = ap_mrb_conn(mrb);

    return mrb_int_value(mrb, c->client_addr ? c->client_addr->port : 0);
}


static mrb_value
ap_mrb_conn_local_ip(mrb_state *mrb, mrb_value self)
{
    return ap_mrb_str(mrb, ap_mrb_conn(mrb)->local_ip);
}


static mrb_value
ap_mrb_conn_local_port(mrb_state *mrb, mrb_value self)
{
    conn_rec  *c = ap_mrb_conn(mrb);

    return mrb_int_value(mrb, c->local_addr ? c->local_addr->port : 0);
}


/* The client's host name if Apache looked it up (HostnameLookups), or nil. */
static mrb_value
ap_mrb_conn_remote_host(mrb_state *mrb, mrb_value self)
{
    return ap_mrb_str(mrb, ap_mrb_conn(mrb)->remote_host);
}


static mrb_value
ap_mrb_conn_keepalives(mrb_state *mrb, mrb_value self)
{
    return mrb_int_value(mrb, ap_mrb_conn(mrb)->keepalives);
}


static mrb_value
ap_mrb_conn_keepalive(mrb_state *mrb, mrb_value self)
{
    return mrb_bool_value(ap_mrb_conn(mrb)->keepalive == AP_CONN_KEEPALIVE);
}


static mrb_value
ap_mrb_conn_aborted(mrb_state *mrb, mrb_value self)
{
    return mrb_bool_value(ap_mrb_conn(mrb)->aborted != 0);
}


static mrb_value
ap_mrb_conn_id(mrb_state *mrb, mrb_value self)
{
    return mrb_int_value(mrb, ap_mrb_conn(mrb)->id);
}


void
ap_mrb_define_connection(mrb_state *mrb, struct RClass *apache)
{
    static const struct {
        const char  *name;
        mrb_func_t   fn;
    } methods[] = {
        { "remote_ip", ap_mrb_conn_remote_ip },
        { "remote_port", ap_mrb_conn_remote_port },
        { "local_ip", ap_mrb_conn_local_ip },
        { "local_port", ap_mrb_conn_local_port },
        { "remote_host", ap_mrb_conn_remote_host },
        { "keepalives", ap_mrb_conn_keepalives },
        { "keepalive?", ap_mrb_conn_keepalive },
        { "aborted?", ap_mrb_conn_aborted },
        { "id", ap_mrb_conn_id }
    };
    struct RClass  *c;
    size_t          i;

    c = mrb_define_class_under(mrb, apache, "Connection", mrb->object_class);

    for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        mrb_define_method(mrb, c, methods[i].name, methods[i].fn,
                          MRB_ARGS_NONE());
    }
}
