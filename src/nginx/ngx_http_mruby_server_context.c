/*
 * mruby_server_context_handler_code: Ruby run while nginx reads a server
 * block (ngx_mruby_conf_run_code), where Nginx::Server#add_listener adds
 * listen sockets to that server (the original's test configuration makes
 * its ports this way).
 */

#include "ngx_http_mruby_module.h"

#include <mruby/hash.h>


char *
ngx_http_mruby_server_context(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    return ngx_mruby_conf_run_code(cf, &ngx_http_mruby_server);
}


static mrb_value
ngx_http_mruby_opt(mrb_state *mrb, mrb_value opts, const char *name)
{
    return mrb_hash_get(mrb, opts, mrb_symbol_value(mrb_intern_cstr(mrb,
                                                                    name)));
}


/*
 * Nginx::Server#add_listener(address: "127.0.0.1:8080"[, ssl: true]
 * [, http2: true]): a "listen" of the server being read, with nginx's
 * defaults for everything else.
 */
mrb_value
ngx_http_mruby_server_add_listener(mrb_state *mrb, mrb_value self)
{
    ngx_url_t                   u;
    ngx_uint_t                  n;
    mrb_value                   opts, address;
    ngx_conf_t                 *cf;
    ngx_http_listen_opt_t       lsopt;
    ngx_http_core_srv_conf_t   *cscf;

    mrb_get_args(mrb, "H", &opts);
    ngx_mruby_conf_listen_url(mrb, "Nginx::Server#add_listener", opts, &u,
                              &address);
    cf = ngx_mruby_conf_running();

    ngx_mruby_listen_opt_defaults(&lsopt);

    if (mrb_test(ngx_http_mruby_opt(mrb, opts, "ssl"))) {
#if (NGX_HTTP_SSL)
        lsopt.ssl = 1;
#else
        mrb_raise(mrb, E_ARGUMENT_ERROR, "Nginx::Server#add_listener: ssl needs nginx "
                  "built with the http_ssl module");
#endif
    }

    if (mrb_test(ngx_http_mruby_opt(mrb, opts, "http2"))) {
#if (NGX_HTTP_V2)
        lsopt.http2 = 1;
#else
        mrb_raise(mrb, E_ARGUMENT_ERROR, "Nginx::Server#add_listener: http2 needs nginx "
                  "built with the http_v2 module");
#endif
    }

    cscf = ngx_http_conf_get_module_srv_conf(cf, ngx_http_core_module);
    cscf->listen = 1;

    for (n = 0; n < u.naddrs; n++) {
        lsopt.sockaddr = u.addrs[n].sockaddr;
        lsopt.socklen = u.addrs[n].socklen;
        lsopt.addr_text = u.addrs[n].name;
        lsopt.wildcard = ngx_inet_wildcard(lsopt.sockaddr);

        if (ngx_http_add_listen(cf, cscf, &lsopt) != NGX_OK) {
            mrb_raisef(mrb, E_RUNTIME_ERROR, "Nginx::Server#add_listener: "
                       "cannot listen on %v", address);
        }
    }

    return mrb_nil_value();
}
