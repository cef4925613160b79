/*
 * mruby_stream_server_context_code: Ruby run while nginx reads a stream
 * server block (ngx_mruby_conf_run_code), where Nginx::Stream.add_listener
 * adds listen sockets to that server, as the http module's
 * mruby_server_context_handler_code does for http.
 */

#include "ngx_stream_mruby_module.h"


char *
ngx_stream_mruby_server_context(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    return ngx_mruby_conf_run_code(cf, &ngx_stream_mruby_server);
}


/*
 * Nginx::Stream.add_listener(address: "127.0.0.1:9000"): a "listen" of the
 * stream server being read, with nginx's defaults, refusing an address the
 * configuration listens on already (as nginx's own listen does).  nginx
 * 1.25.5 gave stream servers names, several of them an address, and
 * ngx_stream_add_listen(); there an address is refused when this server
 * listens on it already.
 */

#if (nginx_version >= 1025005)

/* Whether the server cscf listens on sockaddr already. */
static ngx_uint_t
ngx_stream_mruby_listens(ngx_stream_core_main_conf_t *cmcf,
    ngx_stream_core_srv_conf_t *cscf, struct sockaddr *sockaddr,
    socklen_t socklen)
{
    ngx_uint_t                    p, a, s;
    ngx_stream_conf_port_t       *port;
    ngx_stream_conf_addr_t       *addr;
    ngx_stream_core_srv_conf_t  **server;

    if (cmcf->ports == NULL) {
        return 0;
    }

    port = cmcf->ports->elts;

    for (p = 0; p < cmcf->ports->nelts; p++) {
        addr = port[p].addrs.elts;

        for (a = 0; a < port[p].addrs.nelts; a++) {
            if (addr[a].opt.type != SOCK_STREAM
                || ngx_cmp_sockaddr(addr[a].opt.sockaddr, addr[a].opt.socklen,
                                    sockaddr, socklen, 1) != NGX_OK)
            {
                continue;
            }

            server = addr[a].servers.elts;

            for (s = 0; s < addr[a].servers.nelts; s++) {
                if (server[s] == cscf) {
                    return 1;
                }
            }
        }
    }

    return 0;
}


static void
ngx_stream_mruby_listen(mrb_state *mrb, ngx_conf_t *cf,
    ngx_stream_core_srv_conf_t *cscf, ngx_stream_core_main_conf_t *cmcf,
    ngx_url_t *u, mrb_value address)
{
    ngx_uint_t               n;
    ngx_stream_listen_opt_t  lsopt;

    ngx_mruby_listen_opt_defaults(&lsopt);

    for (n = 0; n < u->naddrs; n++) {
        if (ngx_stream_mruby_listens(cmcf, cscf, u->addrs[n].sockaddr,
                                     u->addrs[n].socklen))
        {
            mrb_raisef(mrb, E_ARGUMENT_ERROR, "Nginx::Stream.add_listener: "
                       "\"%v\" is listened on already", address);
        }
    }

    cscf->listen = 1;

    for (n = 0; n < u->naddrs; n++) {
        lsopt.sockaddr = u->addrs[n].sockaddr;
        lsopt.socklen = u->addrs[n].socklen;
        lsopt.addr_text = u->addrs[n].name;
        lsopt.wildcard = ngx_inet_wildcard(lsopt.sockaddr);

        if (ngx_stream_add_listen(cf, cscf, &lsopt) != NGX_OK) {
            mrb_raisef(mrb, E_RUNTIME_ERROR, "Nginx::Stream.add_listener: "
                       "cannot listen on %v", address);
        }
    }
}

#else

static void
ngx_stream_mruby_listen(mrb_state *mrb, ngx_conf_t *cf,
    ngx_stream_core_srv_conf_t *cscf, ngx_stream_core_main_conf_t *cmcf,
    ngx_url_t *u, mrb_value address)
{
    ngx_uint_t            n, i;
    ngx_stream_listen_t  *ls, *als;

    ls = ngx_array_push_n(&cmcf->listen, u->naddrs);
    if (ls == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Nginx::Stream.add_listener: out of "
                  "memory");
    }

    cscf->listen = 1;

    ngx_memzero(ls, sizeof(ngx_stream_listen_t));

    ls->backlog = NGX_LISTEN_BACKLOG;
    ls->rcvbuf = -1;
    ls->sndbuf = -1;
    ls->type = SOCK_STREAM;
    ls->ctx = cf->ctx;
#if (NGX_HAVE_TCP_FASTOPEN)
    ls->fastopen = -1;
#endif
#if (NGX_HAVE_INET6)
    ls->ipv6only = 1;
#endif

    als = cmcf->listen.elts;

    for (n = 0; n < u->naddrs; n++) {
        ls[n] = ls[0];
        ls[n].sockaddr = u->addrs[n].sockaddr;
        ls[n].socklen = u->addrs[n].socklen;
        ls[n].addr_text = u->addrs[n].name;
        ls[n].wildcard = ngx_inet_wildcard(ls[n].sockaddr);

        for (i = 0; i < cmcf->listen.nelts - u->naddrs + n; i++) {
            if (ls[n].type == als[i].type
                && ngx_cmp_sockaddr(als[i].sockaddr, als[i].socklen,
                                    ls[n].sockaddr, ls[n].socklen, 1)
                   == NGX_OK)
            {
                cmcf->listen.nelts -= u->naddrs;
                mrb_raisef(mrb, E_ARGUMENT_ERROR, "Nginx::Stream.add_listener: "
                           "\"%v\" is listened on already", address);
            }
        }
    }
}

#endif


mrb_value
ngx_stream_mruby_add_listener(mrb_state *mrb, mrb_value self)
{
    ngx_url_t                     u;
    mrb_value                     opts, address;
    ngx_conf_t                   *cf;
    ngx_stream_core_srv_conf_t   *cscf;
    ngx_stream_core_main_conf_t  *cmcf;

    mrb_get_args(mrb, "H", &opts);
    ngx_mruby_conf_listen_url(mrb, "Nginx::Stream.add_listener", opts, &u,
                              &address);
    cf = ngx_mruby_conf_running();

    cscf = ngx_stream_conf_get_module_srv_conf(cf, ngx_stream_core_module);
    cmcf = ngx_stream_conf_get_module_main_conf(cf, ngx_stream_core_module);

    ngx_stream_mruby_listen(mrb, cf, cscf, cmcf, &u, address);

    return mrb_nil_value();
}
