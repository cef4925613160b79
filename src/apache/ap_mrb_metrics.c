/*
 * SetHandler mruby-metrics: answers with the per-script metrics of the
 * core (mrb_metrics.h), in Prometheus' text format, or as JSON with
 * ?format=json.  The figures are the sums over every child; any child can
 * answer.
 */

#include <stdlib.h>

#include <http_protocol.h>

#include "ap_mrb.h"
#include "mrb_metrics.h"

APLOG_USE_MODULE(mruby);


int
ap_mrb_metrics_handler(request_rec *r)
{
    char                  *text;
    size_t                 len;
    int                    rc;
    mrb_metrics_format_e   format;
    char                   err[MRB_ERR_MSG_LEN];

    if (r->method_number != M_GET) {
        r->allowed = AP_METHOD_BIT << M_GET;
        return HTTP_METHOD_NOT_ALLOWED;
    }

    rc = ap_discard_request_body(r);
    if (rc != OK) {
        return rc;
    }

    format = mrb_metrics_format_of_query(r->args,
                                         r->args != NULL ? strlen(r->args)
                                                         : 0);

    if (mrb_metrics_format(format, "apache", &text, &len, err, sizeof(err))
        != 0)
    {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "%s", err);
        return HTTP_INTERNAL_SERVER_ERROR;
    }

    ap_set_content_type(r, format == MRB_METRICS_JSON
                           ? MRB_METRICS_TYPE_JSON
                           : MRB_METRICS_TYPE_PROMETHEUS);
    ap_set_content_length(r, (apr_off_t) len);

    if (!r->header_only) {
        ap_rwrite(text, (int) len, r);
    }

    free(text);
    return OK;
}
