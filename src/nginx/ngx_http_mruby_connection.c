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


static mrb_value
ngx_http_mruby_server_variable(mrb_state *mrb, const char *name, size_t len)
{
    ngx_str_t                   key;
    ngx_http_request_t         *r = ngx_http_mruby_request(mrb);
    ngx_http_variable_value_t  *vv;

    key.data = (u_char *) name;
    key.len = len;

    vv = ngx_http_get_variable(r, &key, ngx_hash_key(key.data, key.len));

    if (vv == NULL || vv->not_found) {
        return mrb_nil_value();
    }

    return mrb_str_new(mrb, (const char *) vv->data, (mrb_int) vv->len);
}


static mrb_value
ngx_http_mruby_server_document_root(mrb_state *mrb, mrb_value self)
{
    return ngx_http_mruby_server_variable(mrb, "document_root",
                                          sizeof("document_root") - 1);
}


static mrb_value
ngx_http_mruby_server_realpath_root(mrb_state *mrb, mrb_value self)
{
    return ngx_http_mruby_server_variable(mrb, "realpath_root",
                                          sizeof("realpath_root") - 1);
}


/* nginx's prefix path (-p), where relative paths of the configuration go */
static mrb_value
ngx_http_mruby_server_path(mrb_state *mrb, mrb_value self)
{
    return ngx_http_mruby_str(mrb, (ngx_str_t *) &ngx_cycle->prefix);
}


static const ngx_mruby_method_t  ngx_http_mruby_server_methods[] = {
    { "document_root", ngx_http_mruby_server_document_root, MRB_ARGS_NONE() },
    { "realpath_root", ngx_http_mruby_server_realpath_root, MRB_ARGS_NONE() },
    { "path", ngx_http_mruby_server_path, MRB_ARGS_NONE() },
    ngx_mruby_null_method
};


void
ngx_http_mruby_connection_define(mrb_state *mrb, struct RClass *nginx)
{
    ngx_mruby_define_connection(mrb, nginx);

    ngx_mruby_define_class(mrb, nginx, "Server",
                           ngx_http_mruby_server_methods);
}
