/*
 * Re-targeting the one server of an upstream block (Nginx::Upstream#server=
 * in http, Nginx::Stream::Connection#upstream_server= in stream): the
 * address a script gives, parsed without DNS, replaces the round-robin
 * peer's sockaddr and name in this worker.
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
