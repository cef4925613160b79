/*
 * mruby_upstream_keepalive and Nginx::Upstream: a script re-targets the
 * one server of an upstream block (Nginx::Upstream#server=), and
 * connections to it are kept alive.
 *
 * The original carried a renamed copy of nginx's keepalive module for the
 * directive.  Debian's nginx has that module built in, and its module
 * structure is a global symbol, so the directive here calls the module's
 * own "keepalive" handler on the upstream's configuration: one cache
 * implementation, nginx's.  The symbol is weak so that this module still
 * loads into an nginx built without it (the directive then fails).
 */

#include "ngx_http_mruby_module.h"

#include <mruby/class.h>
#include <mruby/data.h>
#include <mruby/string.h>


extern ngx_module_t  ngx_http_upstream_keepalive_module
    __attribute__((weak));


char *
ngx_http_mruby_upstream_keepalive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_mruby_srv_conf_t *mscf = conf;

    char               *rv;
    ngx_int_t           n;
    ngx_str_t          *value;
    ngx_command_t      *c;
    ngx_http_conf_ctx_t  *ctx;

    if (&ngx_http_upstream_keepalive_module == NULL) {
        return "needs nginx's ngx_http_upstream_keepalive_module, which this "
               "nginx is built without";
    }

    for (c = ngx_http_upstream_keepalive_module.commands; c->name.len; c++) {
        if (c->name.len == sizeof("keepalive") - 1
            && ngx_strncmp(c->name.data, "keepalive", c->name.len) == 0)
        {
            break;
        }
    }

    if (c->name.len == 0 || c->conf != NGX_HTTP_SRV_CONF_OFFSET) {
        return "cannot find the \"keepalive\" directive of "
               "ngx_http_upstream_keepalive_module";
    }

    ctx = cf->ctx;

    rv = c->set(cf, c,
                ctx->srv_conf[ngx_http_upstream_keepalive_module.ctx_index]);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    value = cf->args->elts;
    n = ngx_atoi(value[1].data, value[1].len);

    /* the keepalive handler has accepted the number */
    mscf->keepalive = (n > 0) ? (ngx_uint_t) n : 0;

    return NGX_CONF_OK;
}


/* An Nginx::Upstream: its upstream block, in the cycle that holds it. */
typedef struct {
    ngx_http_upstream_srv_conf_t  *uscf;
    ngx_cycle_t                   *cycle;
} ngx_http_mruby_upstream_t;


static const mrb_data_type  ngx_http_mruby_upstream_type = {
    "Nginx::Upstream", mrb_free
};


static ngx_http_mruby_upstream_t *
ngx_http_mruby_upstream_get(mrb_state *mrb, mrb_value self)
{
    ngx_http_mruby_upstream_t  *u;

    u = mrb_data_get_ptr(mrb, self, &ngx_http_mruby_upstream_type);
    if (u == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Nginx::Upstream is not initialized");
    }

    return u;
}


static ngx_http_upstream_rr_peer_t *
ngx_http_mruby_upstream_peer(ngx_http_mruby_upstream_t *u)
{
    ngx_http_upstream_rr_peers_t  *peers = u->uscf->peer.data;

    return peers->peer;
}


/*
 * Nginx::Upstream.new(name): the upstream block called name, which must
 * have exactly one server address (round robin's peer list of one, in
 * this worker's memory, so that server= can change it).
 */
static mrb_value
ngx_http_mruby_upstream_init(mrb_state *mrb, mrb_value self)
{
    char                            *name;
    ngx_cycle_t                     *cycle;
    ngx_http_mruby_upstream_t       *u;
    ngx_http_upstream_rr_peers_t    *peers;
    ngx_http_upstream_srv_conf_t    *uscf;
    ngx_http_upstream_main_conf_t   *umcf;

    mrb_get_args(mrb, "z", &name);

    u = DATA_PTR(self);
    if (u != NULL) {
        mrb_free(mrb, u);
    }

    mrb_data_init(self, NULL, &ngx_http_mruby_upstream_type);

    cycle = ngx_mruby_upstream_cycle();
    umcf = (cycle == NULL)
           ? NULL
           : ngx_http_cycle_get_module_main_conf(cycle,
                                                 ngx_http_upstream_module);
    if (umcf == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Nginx::Upstream: only in a worker "
                  "(a request script or an init-worker script)");
    }

    uscf = ngx_mruby_upstream_find(mrb, "Nginx::Upstream", "upstream",
               &umcf->upstreams,
               offsetof(ngx_http_upstream_srv_conf_t, host),
               offsetof(ngx_http_upstream_srv_conf_t, flags),
               NGX_HTTP_UPSTREAM_CREATE, name);

    peers = uscf->peer.data;
    ngx_mruby_upstream_check_peers(mrb, "Nginx::Upstream", name, peers,
        peers ? peers->number : 0,
        (peers && peers->next) ? peers->next->number : 0,
#if (NGX_HTTP_UPSTREAM_ZONE)
        peers ? peers->shpool : NULL
#else
        NULL
#endif
        );

    u = mrb_malloc(mrb, sizeof(ngx_http_mruby_upstream_t));
    u->uscf = uscf;
    u->cycle = cycle;

    mrb_data_init(self, u, &ngx_http_mruby_upstream_type);

    return self;
}


/* Nginx::Upstream#server: "127.0.0.1:8080", the address proxied to */
static mrb_value
ngx_http_mruby_upstream_server(mrb_state *mrb, mrb_value self)
{
    ngx_http_upstream_rr_peer_t  *peer;

    peer = ngx_http_mruby_upstream_peer(ngx_http_mruby_upstream_get(mrb,
                                                                    self));

    return ngx_http_mruby_str(mrb, &peer->name);
}


/*
 * Nginx::Upstream#server = "10.0.0.2:8080" (port 80 when none): the
 * requests of this worker proxied to the upstream after this go there.
 * An IP address only: nothing is resolved at request time.
 */
static mrb_value
ngx_http_mruby_upstream_set_server(mrb_state *mrb, mrb_value self)
{
    mrb_value                     addr;
    const ngx_addr_t             *target;
    ngx_http_mruby_upstream_t    *u;

    mrb_get_args(mrb, "S", &addr);
    u = ngx_http_mruby_upstream_get(mrb, self);

    target = ngx_mruby_upstream_target_arg(mrb, "Nginx::Upstream#server=",
                                           u->cycle, addr, 80);

    ngx_mruby_upstream_retarget(ngx_http_mruby_upstream_peer(u), target);

    return addr;
}


/* Nginx::Upstream#keepalive_cache: mruby_upstream_keepalive's number */
static mrb_value
ngx_http_mruby_upstream_keepalive_cache(mrb_state *mrb, mrb_value self)
{
    ngx_http_mruby_upstream_t  *u = ngx_http_mruby_upstream_get(mrb, self);
    ngx_http_mruby_srv_conf_t  *mscf;

    mscf = u->uscf->srv_conf[ngx_http_mruby_module.ctx_index];

    return mrb_int_value(mrb, (mrb_int) mscf->keepalive);
}


/*
 * Nginx::Upstream#keepalive_cache=: nginx's keepalive module allocates
 * its cache entries from the number when the configuration is loaded and
 * keeps them in a structure of its own; changing the number later would
 * not resize the cache, so this says so instead.
 */
static mrb_value
ngx_http_mruby_upstream_set_keepalive_cache(mrb_state *mrb, mrb_value self)
{
    mrb_int  n;

    mrb_get_args(mrb, "i", &n);

    mrb_raise(mrb, E_NOTIMP_ERROR, "Nginx::Upstream#keepalive_cache=: nginx "
              "sizes an upstream's keepalive cache when it loads the "
              "configuration; set it with mruby_upstream_keepalive");

    return mrb_nil_value();
}


static const mrb_api_method  ngx_http_mruby_upstream_methods[] = {
    { "initialize", ngx_http_mruby_upstream_init, MRB_ARGS_REQ(1) },
    { "server", ngx_http_mruby_upstream_server, MRB_ARGS_NONE() },
    { "server=", ngx_http_mruby_upstream_set_server, MRB_ARGS_REQ(1) },
    { "keepalive_cache", ngx_http_mruby_upstream_keepalive_cache,
      MRB_ARGS_NONE() },
    { "keepalive_cache=", ngx_http_mruby_upstream_set_keepalive_cache,
      MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};


void
ngx_http_mruby_upstream_define(mrb_state *mrb, struct RClass *nginx)
{
    struct RClass  *c;

    c = mrb_api_define_class(mrb, nginx, "Upstream", NULL,
                             ngx_http_mruby_upstream_methods);

    MRB_SET_INSTANCE_TT(c, MRB_TT_DATA);
}
