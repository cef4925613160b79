/*
 * The parts of the Ruby API that the http and stream modules share: the
 * error log as mruby sees it, and constants.
 */

#include "ngx_mruby.h"


void
ngx_mruby_log(ngx_log_t *log, int level, const char *msg, size_t len)
{
    /* MRB_LOG_* are syslog's numbers, one below nginx's NGX_LOG_* */

    ngx_log_error((ngx_uint_t) level + 1, log, 0, "%*s", len, msg);
}


void
ngx_mruby_define_log_levels(mrb_state *mrb, struct RClass *c)
{
    static const struct {
        const char  *name;
        mrb_int      level;
    } levels[] = {
        { "LOG_STDERR", NGX_LOG_STDERR },
        { "LOG_EMERG", NGX_LOG_EMERG },
        { "LOG_ALERT", NGX_LOG_ALERT },
        { "LOG_CRIT", NGX_LOG_CRIT },
        { "LOG_ERR", NGX_LOG_ERR },
        { "LOG_WARN", NGX_LOG_WARN },
        { "LOG_NOTICE", NGX_LOG_NOTICE },
        { "LOG_INFO", NGX_LOG_INFO },
        { "LOG_DEBUG", NGX_LOG_DEBUG }
    };

    ngx_uint_t  i;

    for (i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        mrb_define_const(mrb, c, levels[i].name,
                         mrb_fixnum_value(levels[i].level));
    }
}
