/*
 * Apache::Connection: the client connection of the current request.
 */

#include <http_core.h>

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


/* The identd user name, if IdentityCheck looked it up, or nil. */
static mrb_value
ap_mrb_conn_remote_logname(mrb_state *mrb, mrb_value self)
{
    return ap_mrb_str(mrb, ap_get_remote_logname(ap_mrb_request(mrb)));
}


static mrb_value
ap_mrb_conn_local_host(mrb_state *mrb, mrb_value self)
{
    return ap_mrb_str(mrb, ap_mrb_conn(mrb)->local_host);
}


/* 1 when input filters hold data already read from the client. */
static mrb_value
ap_mrb_conn_data_in_input_filters(mrb_state *mrb, mrb_value self)
{
    return mrb_int_value(mrb, ap_mrb_conn(mrb)->data_in_input_filters != 0);
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


static const mrb_api_method  ap_mrb_connection_methods[] = {
    { "remote_ip", ap_mrb_conn_remote_ip, MRB_ARGS_NONE() },
    { "remote_port", ap_mrb_conn_remote_port, MRB_ARGS_NONE() },
    { "local_ip", ap_mrb_conn_local_ip, MRB_ARGS_NONE() },
    { "local_port", ap_mrb_conn_local_port, MRB_ARGS_NONE() },
    { "remote_host", ap_mrb_conn_remote_host, MRB_ARGS_NONE() },
    { "remote_logname", ap_mrb_conn_remote_logname, MRB_ARGS_NONE() },
    { "local_host", ap_mrb_conn_local_host, MRB_ARGS_NONE() },
    { "data_in_input_filters", ap_mrb_conn_data_in_input_filters,
      MRB_ARGS_NONE() },
    { "keepalives", ap_mrb_conn_keepalives, MRB_ARGS_NONE() },
    { "keepalive?", ap_mrb_conn_keepalive, MRB_ARGS_NONE() },
    { "aborted?", ap_mrb_conn_aborted, MRB_ARGS_NONE() },
    { "id", ap_mrb_conn_id, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


void
ap_mrb_define_connection(mrb_state *mrb, struct RClass *apache)
{
    mrb_api_define_class(mrb, apache, "Connection", NULL,
                         ap_mrb_connection_methods);
}
