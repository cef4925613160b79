/*
 * mruby_metrics: a location that answers with the per-script metrics of
 * the core (mrb_metrics.h), in Prometheus' text format, or as JSON with
 * ?format=json.  The figures are the sums over every worker; any worker
 * can answer.
 */

#include "ngx_http_mruby_module.h"
#include "mrb_metrics.h"


/* The phases as the metrics' phase label names them. */
const char *const  ngx_http_mruby_phase_names[] = {
    "post_read", "server_rewrite", "rewrite", "access", "content", "log",
    "header_filter", "body_filter", "set", "ssl_handshake"
};


static ngx_int_t
ngx_http_mruby_metrics_handler(ngx_http_request_t *r)
{
    char                  *text;
    size_t                 len;
    ngx_buf_t             *b;
    ngx_int_t              rc;
    ngx_chain_t            out;
    mrb_metrics_format_e   format;
    char                   err[MRB_ERR_MSG_LEN];

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    format = mrb_metrics_format_of_query((const char *) r->args.data,
                                         r->args.len);

    if (mrb_metrics_format(format, "nginx", &text, &len, err, sizeof(err))
        != 0)
    {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0, "%s", err);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b = ngx_create_temp_buf(r->pool, len);
    if (b == NULL) {
        free(text);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->last = ngx_cpymem(b->last, text, len);
    free(text);
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = len;
    if (format == MRB_METRICS_JSON) {
        ngx_str_set(&r->headers_out.content_type, MRB_METRICS_TYPE_JSON);
    } else {
        ngx_str_set(&r->headers_out.content_type,
                    MRB_METRICS_TYPE_PROMETHEUS);
    }
    r->headers_out.content_type_len = r->headers_out.content_type.len;

    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;
    return ngx_http_output_filter(r, &out);
}


/* mruby_metrics: this location answers with the metrics. */
char *
ngx_http_mruby_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_mruby_metrics_handler;

    return NGX_CONF_OK;
}
