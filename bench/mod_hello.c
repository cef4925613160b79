/*
 * mod_hello: the C reference of the benchmarks (the mod_mruby paper, Table 2).
 *
 * Answers "hello world\n" as text/plain for requests whose handler is
 * "hello" (SetHandler hello): the least work an Apache module can do for a
 * dynamic response, so that every scripted mode is measured against it.
 *
 * With the query "sleep=N" it first sleeps N milliseconds: the "slow page"
 * of the access-limiter benchmark (the access-limiter post used a PHP script that slept).
 */

#include <stdlib.h>
#include <string.h>

#include "httpd.h"
#include "http_config.h"
#include "http_protocol.h"
#include "apr_time.h"

static int
hello_handler(request_rec *r)
{
    const char  *arg;

    if (r->handler == NULL || strcmp(r->handler, "hello") != 0) {
        return DECLINED;
    }

    if (r->args != NULL && strncmp(r->args, "sleep=", 6) == 0) {
        arg = r->args + 6;
        apr_sleep(apr_time_from_msec(atoi(arg)));
    }

    ap_set_content_type(r, "text/plain");
    if (!r->header_only) {
        ap_rputs("hello world\n", r);
    }
    return OK;
}

static void
hello_register_hooks(apr_pool_t *p)
{
    ap_hook_handler(hello_handler, NULL, NULL, APR_HOOK_MIDDLE);
}

module AP_MODULE_DECLARE_DATA hello_module = {
    STANDARD20_MODULE_STUFF,
    NULL,                       /* per-directory config creator */
    NULL,                       /* per-directory config merger */
    NULL,                       /* per-server config creator */
    NULL,                       /* per-server config merger */
    NULL,                       /* command table */
    hello_register_hooks
};
