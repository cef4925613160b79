/*
 * Nginx::Connection (the client connection of the request) and
 * Nginx::Server (the server block and nginx's paths).
 */

#include "ngx_http_mruby_module.h"

#include <mruby/class.h>
#include <mruby/string.h>


ngx_connection_t *
ngx_mruby_connection(mrb_state *mrb)
{
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    return r->connection;
}


/* Nginx::Server#document_root and Nginx::Request#document_root */
mrb_value
ngx_http_mruby_document_root(mrb_state *mrb, mrb_value self)
{
    ngx_str_t  name = ngx_string("document_root");

    return ngx_http_mruby_var_value(mrb, ngx_http_mruby_request(mrb), &name);
}


static mrb_value
ngx_http_mruby_server_realpath_root(mrb_state *mrb, mrb_value self)
{
    ngx_str_t  name = ngx_string("realpath_root");

    return ngx_http_mruby_var_value(mrb, ngx_http_mruby_request(mrb), &name);
}


/* nginx's prefix path (-p), where relative paths of the configuration go */
static mrb_value
ngx_http_mruby_server_prefix(mrb_state *mrb, mrb_value self)
{
    return ngx_http_mruby_str(mrb, (ngx_str_t *) &ngx_cycle->prefix);
}


static const mrb_api_method  ngx_http_mruby_server_methods[] = {
    { "document_root", ngx_http_mruby_document_root, MRB_ARGS_NONE() },
    { "realpath_root", ngx_http_mruby_server_realpath_root, MRB_ARGS_NONE() },
    /* the original's path: $realpath_root */
    { "path", ngx_http_mruby_server_realpath_root, MRB_ARGS_NONE() },
    { "prefix", ngx_http_mruby_server_prefix, MRB_ARGS_NONE() },
    { "add_listener", ngx_http_mruby_server_add_listener, MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};


void
ngx_http_mruby_connection_define(mrb_state *mrb, struct RClass *nginx)
{
    ngx_mruby_define_connection(mrb, nginx);

    mrb_api_define_class(mrb, nginx, "Server", NULL,
                         ngx_http_mruby_server_methods);
}
