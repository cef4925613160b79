/*
 * Re-targeting the one server of an upstream block (Nginx::Upstream#server=
 * in http, Nginx::Stream::Connection#upstream_server= in stream): the
 * address a script gives, parsed without DNS, replaces the round-robin
 * peer's sockaddr and name in this worker.  The two modules' upstream
 * structures are alike but of other types: what is the same for both is
 * here, each module reads its own fields.
 *
 * A peer's old sockaddr and name stay valid: a connection being made or
 * a keepalive cache entry being filled may still point at them, and
 * overwriting them in place would file a connection to the old server
 * under the new address.  So every address a worker has targeted is kept,
 * once, for the worker's life (in the cycle's pool) and a re-target only
 * swaps pointers: memory grows with the number of distinct addresses,
 * never with the number of calls.
 */

#include "ngx_mruby.h"

#include <mruby/string.h>


typedef struct ngx_mruby_target_s  ngx_mruby_target_t;

struct ngx_mruby_target_s {
    ngx_addr_t           addr;
    ngx_mruby_target_t  *next;
};


/* this worker's targets; the cycle they were allocated in */
static ngx_mruby_target_t  *ngx_mruby_targets;
static ngx_cycle_t         *ngx_mruby_targets_cycle;


const ngx_addr_t *
ngx_mruby_upstream_target(ngx_cycle_t *cycle, u_char *text, size_t len,
    in_port_t default_port, const char **err)
{
    size_t               n;
    u_char               name[NGX_SOCKADDR_STRLEN];
    ngx_int_t            rc;
    ngx_addr_t           addr;
    ngx_pool_t          *pool;
    ngx_mruby_target_t  *t;

    if (ngx_mruby_targets_cycle != cycle) {
        ngx_mruby_targets = NULL;
        ngx_mruby_targets_cycle = cycle;
    }

    /* ngx_parse_addr_port allocates the sockaddr: a pool of its own */
    pool = ngx_create_pool(NGX_DEFAULT_POOL_SIZE, cycle->log);
    if (pool == NULL) {
        *err = "out of memory";
        return NULL;
    }

    t = NULL;

    rc = ngx_parse_addr_port(pool, &addr, text, len);

    if (rc != NGX_OK) {
        *err = (rc == NGX_DECLINED)
               ? "is not an IP address with an optional port (no DNS lookup "
                 "at request time)"
               : "out of memory";
        goto done;
    }

    if (ngx_inet_get_port(addr.sockaddr) == 0) {
        if (default_port == 0) {
            *err = "has no port";
            goto done;
        }

        ngx_inet_set_port(addr.sockaddr, default_port);
    }

    for (t = ngx_mruby_targets; t; t = t->next) {
        if (ngx_cmp_sockaddr(t->addr.sockaddr, t->addr.socklen,
                             addr.sockaddr, addr.socklen, 1)
            == NGX_OK)
        {
            goto done;
        }
    }

    n = ngx_sock_ntop(addr.sockaddr, addr.socklen, name, NGX_SOCKADDR_STRLEN,
                      1);

    t = ngx_palloc(cycle->pool, sizeof(ngx_mruby_target_t));
    if (t != NULL) {
        t->addr.sockaddr = ngx_palloc(cycle->pool, addr.socklen);
        t->addr.name.data = ngx_pnalloc(cycle->pool, n);
    }

    if (t == NULL || t->addr.sockaddr == NULL || t->addr.name.data == NULL) {
        t = NULL;
        *err = "out of memory";
        goto done;
    }

    ngx_memcpy(t->addr.sockaddr, addr.sockaddr, addr.socklen);
    t->addr.socklen = addr.socklen;
    ngx_memcpy(t->addr.name.data, name, n);
    t->addr.name.len = n;

    t->next = ngx_mruby_targets;
    ngx_mruby_targets = t;

done:

    ngx_destroy_pool(pool);

    return t ? &t->addr : NULL;
}


ngx_cycle_t *
ngx_mruby_upstream_cycle(void)
{
    /*
     * The upstreams a worker proxies with are its cycle's.  While nginx
     * (re)reads its configuration, ngx_cycle is still the cycle being
     * replaced, and the new one's servers are not set up yet.
     */
    ngx_cycle_t  *cycle = (ngx_cycle_t *) ngx_cycle;

    if (ngx_process == NGX_PROCESS_MASTER || cycle->conf_ctx == NULL
        || ngx_mruby_conf_running() != NULL)
    {
        return NULL;
    }

    return cycle;
}


void *
ngx_mruby_upstream_find(mrb_state *mrb, const char *what, const char *block,
    ngx_array_t *upstreams, size_t host_offset, size_t flags_offset,
    ngx_uint_t create, const char *name)
{
    char        *uscf;
    size_t       len = ngx_strlen(name);
    ngx_str_t   *host;
    ngx_uint_t   i;

    for (i = 0; i < upstreams->nelts; i++) {
        uscf = ((char **) upstreams->elts)[i];
        host = (ngx_str_t *) (uscf + host_offset);

        if ((*(ngx_uint_t *) (uscf + flags_offset) & create)
            && host->len == len
            && ngx_strncasecmp(host->data, (u_char *) name, len) == 0)
        {
            return uscf;
        }
    }

    mrb_raisef(mrb, E_ARGUMENT_ERROR, "%s: no %s block \"%s\"", what, block,
               name);

    return NULL;
}


void
ngx_mruby_upstream_check_peers(mrb_state *mrb, const char *what,
    const char *name, void *peers, ngx_uint_t number, ngx_uint_t backups,
    void *shpool)
{
    if (peers == NULL) {
        mrb_raisef(mrb, E_RUNTIME_ERROR, "%s: upstream \"%s\" is not set up "
                   "before nginx has read its configuration", what, name);
    }

    if (number != 1 || backups != 0) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR, "%s: upstream \"%s\" has %d server "
                   "addresses, %s needs exactly one", what, name,
                   (int) (number + backups), what);
    }

    if (shpool != NULL) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR, "%s: upstream \"%s\" keeps its "
                   "servers in a shared \"zone\", which a worker cannot "
                   "re-target alone; remove the zone", what, name);
    }
}


const ngx_addr_t *
ngx_mruby_upstream_target_arg(mrb_state *mrb, const char *what,
    ngx_cycle_t *cycle, mrb_value addr, in_port_t default_port)
{
    char              *text = mrb_str_to_cstr(mrb, addr);
    const char        *err;
    const ngx_addr_t  *target;

    target = ngx_mruby_upstream_target(cycle, (u_char *) text,
                                       ngx_strlen(text), default_port, &err);
    if (target == NULL) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR, "%s: \"%s\" %s", what, text, err);
    }

    return target;
}
