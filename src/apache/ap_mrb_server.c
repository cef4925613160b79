/*
 * Apache::Server: the server (virtual host) of the current request, or,
 * outside a request (post_config and child_init scripts), the main server.
 */

#include <http_core.h>

#include "ap_mrb.h"


static server_rec *
ap_mrb_server_rec(mrb_state *mrb)
{
    mrb_run_rec  *run = mrb_interp_run(mrb);

    if (run != NULL && run->request != NULL) {
        return ((request_rec *) run->request)->server;
    }

    return mrb_interp_log_target(mrb_interp_from_state(mrb));
}


#define AP_MRB_SERVER_STR(name, expr)                                         \
    static mrb_value                                                          \
    ap_mrb_server_##name(mrb_state *mrb, mrb_value self)                      \
    {                                                                         \
        server_rec  *s = ap_mrb_server_rec(mrb);                              \
        return ap_mrb_str(mrb, expr);                                         \
    }

#define AP_MRB_SERVER_INT(name, expr)                                         \
    static mrb_value                                                          \
    ap_mrb_server_##name(mrb_state *mrb, mrb_value self)                      \
    {                                                                         \
        server_rec  *s = ap_mrb_server_rec(mrb);                              \
        return mrb_int_value(mrb, (mrb_int) (expr));                          \
    }

AP_MRB_SERVER_STR(hostname, s->server_hostname)
AP_MRB_SERVER_STR(admin, s->server_admin)
AP_MRB_SERVER_STR(scheme, s->server_scheme)
AP_MRB_SERVER_STR(error_fname, s->error_fname)
AP_MRB_SERVER_STR(path, s->path)
AP_MRB_SERVER_STR(defn_name, s->defn_name)
AP_MRB_SERVER_STR(document_root, ((core_server_config *)
    ap_get_core_module_config(s->module_config))->ap_document_root)

AP_MRB_SERVER_INT(port, s->port)
AP_MRB_SERVER_INT(defn_line_number, s->defn_line_number)
AP_MRB_SERVER_INT(loglevel, s->log.level)
/* Timeouts in microseconds (APR's interval), as the original gave them. */
AP_MRB_SERVER_INT(timeout, s->timeout)
AP_MRB_SERVER_INT(keep_alive, s->keep_alive)
AP_MRB_SERVER_INT(keep_alive_timeout, s->keep_alive_timeout)
AP_MRB_SERVER_INT(keep_alive_max, s->keep_alive_max)
AP_MRB_SERVER_INT(is_virtual, s->is_virtual)
AP_MRB_SERVER_INT(limit_req_line, s->limit_req_line)
AP_MRB_SERVER_INT(limit_req_fieldsize, s->limit_req_fieldsize)
AP_MRB_SERVER_INT(limit_req_fields, s->limit_req_fields)
AP_MRB_SERVER_INT(pathlen, s->pathlen)


/*
 * server.timeout = microseconds: the server's Timeout for the rest of the
 * current request, as the original set it, and for its connection's socket
 * (not on an HTTP/2 stream: see below).
 * Apache's modules read the Timeout from r->server when they wait
 * (mod_cgi and mod_cgid for a script's output, mod_proxy for a backend
 * without ProxyTimeout), so a script in fixups cuts a slow CGI.  The
 * original wrote the server_rec that every request and thread of the
 * child reads, until something set it back; here the request gets a copy
 * of it in its pool, so other requests keep the configured Timeout and
 * nothing needs setting back.  The copy shares everything else with the
 * server (its module configurations included).
 */
static mrb_value
ap_mrb_server_set_timeout(mrb_state *mrb, mrb_value self)
{
    request_rec   *r = ap_mrb_request(mrb);
    apr_socket_t  *sock;
    server_rec    *copy;
    mrb_int        usec;

    mrb_get_args(mrb, "i", &usec);

    if (usec <= 0) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "timeout must be positive "
                  "(microseconds)");
    }

    /* an HTTP/2 stream's connection is mod_http2's secondary one, which
     * shares the socket of the client's connection: that socket's timeout
     * is the session's, for every stream on it, not this request's */
    if (r->connection->master == NULL) {
        sock = ap_get_conn_socket(r->connection);
        if (sock == NULL
            || apr_socket_timeout_set(sock, (apr_interval_time_t) usec)
               != APR_SUCCESS)
        {
            mrb_raise(mrb, E_RUNTIME_ERROR, "cannot set this connection's "
                      "timeout");
        }
    }

    if (r->server->timeout != (apr_interval_time_t) usec) {
        copy = apr_pmemdup(r->pool, r->server, sizeof(*copy));
        copy->timeout = (apr_interval_time_t) usec;
        r->server = copy;
    }

    return mrb_int_value(mrb, usec);
}


#define AP_MRB_M(name)  { #name, ap_mrb_server_##name, MRB_ARGS_NONE() }

static const mrb_api_method  ap_mrb_server_methods[] = {
    AP_MRB_M(hostname),
    AP_MRB_M(admin),
    AP_MRB_M(scheme),
    AP_MRB_M(error_fname),
    AP_MRB_M(path),
    AP_MRB_M(defn_name),
    AP_MRB_M(document_root),
    AP_MRB_M(port),
    AP_MRB_M(defn_line_number),
    AP_MRB_M(loglevel),
    AP_MRB_M(timeout),
    AP_MRB_M(keep_alive),
    AP_MRB_M(keep_alive_timeout),
    AP_MRB_M(keep_alive_max),
    AP_MRB_M(is_virtual),
    AP_MRB_M(limit_req_line),
    AP_MRB_M(limit_req_fieldsize),
    AP_MRB_M(limit_req_fields),
    AP_MRB_M(pathlen),
    { "timeout=", ap_mrb_server_set_timeout, MRB_ARGS_REQ(1) },

    /* the original mod_mruby's names */
    { "server_hostname", ap_mrb_server_hostname, MRB_ARGS_NONE() },
    { "server_admin", ap_mrb_server_admin, MRB_ARGS_NONE() },
    { "redirect_server_scheme", ap_mrb_server_scheme, MRB_ARGS_NONE() },
    { "redirect_server_port", ap_mrb_server_port, MRB_ARGS_NONE() },

    MRB_API_METHOD_END
};


void
ap_mrb_define_server(mrb_state *mrb, struct RClass *apache)
{
    mrb_api_define_class(mrb, apache, "Server", NULL, ap_mrb_server_methods);
}
