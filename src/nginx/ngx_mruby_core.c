/*
 * The parts of the Ruby API that the http and stream modules share: the
 * error log as mruby sees it, constants (one table), and the client
 * connection.
 */

#include "ngx_mruby.h"

#include <mruby/class.h>
#include <mruby/string.h>


/*
 * msg with its control characters escaped (\n, \r, \t, \xHH), as Apache
 * writes them, into buf: a script's message is one log line, never a
 * forged second one.  Returns the length, cut at what nginx writes.
 */
static size_t
ngx_mruby_log_escape(u_char *buf, size_t size, const char *msg, size_t len)
{
    u_char   c, *p = buf, *end = buf + size;
    size_t   i;

    for (i = 0; i < len && end - p >= 4; i++) {
        c = (u_char) msg[i];

        if (c >= 0x20 && c != 0x7f) {
            *p++ = c;

        } else if (c == '\n' || c == '\r' || c == '\t') {
            *p++ = '\\';
            *p++ = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';

        } else {
            p = ngx_sprintf(p, "\\x%02xd", (ngx_uint_t) c);
        }
    }

    return (size_t) (p - buf);
}


void
ngx_mruby_log(ngx_log_t *log, int level, const char *msg, size_t len)
{
    u_char  buf[NGX_MAX_ERROR_STR];
    size_t  i;

    /* MRB_LOG_* are syslog's numbers, one below nginx's NGX_LOG_* */

    for (i = 0; i < len; i++) {
        if ((u_char) msg[i] < 0x20 || msg[i] == 0x7f) {
            len = ngx_mruby_log_escape(buf, sizeof(buf), msg, len);
            msg = (const char *) buf;
            break;
        }
    }

    ngx_log_error((ngx_uint_t) level + 1, log, 0, "%*s", len, msg);
}


/* ngx_mruby_log's filter, as in ngx_log_error() */
int
ngx_mruby_log_enabled(ngx_log_t *log, int level)
{
    return log->log_level >= (ngx_uint_t) level + 1;
}


int
ngx_mruby_log_fds(ngx_log_t *log, int *fds, int max)
{
    int  n = 0, i;

    /* a syslog or memory log has a writer and no file of its own; two
     * error_log lines that name one file share its descriptor */
    for ( /* void */ ; log != NULL && n < max; log = log->next) {
        if (log->writer != NULL || log->file == NULL
            || log->file->fd == NGX_INVALID_FILE
            || log->log_level < NGX_LOG_ALERT)
        {
            continue;
        }

        for (i = 0; i < n && fds[i] != log->file->fd; i++) {
            /* void */
        }

        if (i == n) {
            fds[n++] = log->file->fd;
        }
    }

    return n;
}


/* nginx's return codes and log levels, the same in http and stream */
static const mrb_api_const  ngx_mruby_codes[] = {
    { "OK", NGX_OK },
    { "ERROR", NGX_ERROR },
    { "AGAIN", NGX_AGAIN },
    { "BUSY", NGX_BUSY },
    { "DONE", NGX_DONE },
    { "DECLINED", NGX_DECLINED },
    { "ABORT", NGX_ABORT },

    { "LOG_STDERR", NGX_LOG_STDERR },
    { "LOG_EMERG", NGX_LOG_EMERG },
    { "LOG_ALERT", NGX_LOG_ALERT },
    { "LOG_CRIT", NGX_LOG_CRIT },
    { "LOG_ERR", NGX_LOG_ERR },
    { "LOG_WARN", NGX_LOG_WARN },
    { "LOG_NOTICE", NGX_LOG_NOTICE },
    { "LOG_INFO", NGX_LOG_INFO },
    { "LOG_DEBUG", NGX_LOG_DEBUG },
    MRB_API_CONST_END
};


void
ngx_mruby_define_codes(mrb_state *mrb, struct RClass *c)
{
    mrb_api_define_consts(mrb, c, ngx_mruby_codes);
}


mrb_value
ngx_mruby_conn_remote_ip(mrb_state *mrb, mrb_value self)
{
    ngx_connection_t  *c = ngx_mruby_connection(mrb);

    return mrb_str_new(mrb, (const char *) c->addr_text.data,
                       (mrb_int) c->addr_text.len);
}


mrb_value
ngx_mruby_conn_remote_port(mrb_state *mrb, mrb_value self)
{
    ngx_connection_t  *c = ngx_mruby_connection(mrb);

    return mrb_fixnum_value(ngx_inet_get_port(c->sockaddr));
}


mrb_value
ngx_mruby_conn_local_ip(mrb_state *mrb, mrb_value self)
{
    u_char             addr[NGX_SOCKADDR_STRLEN];
    ngx_str_t          s;
    ngx_connection_t  *c = ngx_mruby_connection(mrb);

    s.data = addr;
    s.len = sizeof(addr);

    if (ngx_connection_local_sockaddr(c, &s, 0) != NGX_OK) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "cannot get the local address");
    }

    return mrb_str_new(mrb, (const char *) s.data, (mrb_int) s.len);
}


mrb_value
ngx_mruby_conn_local_port(mrb_state *mrb, mrb_value self)
{
    ngx_connection_t  *c = ngx_mruby_connection(mrb);

    if (ngx_connection_local_sockaddr(c, NULL, 0) != NGX_OK) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "cannot get the local address");
    }

    return mrb_fixnum_value(ngx_inet_get_port(c->local_sockaddr));
}


const mrb_api_method  ngx_mruby_connection_methods[] = {
    { "remote_ip", ngx_mruby_conn_remote_ip, MRB_ARGS_NONE() },
    { "remote_port", ngx_mruby_conn_remote_port, MRB_ARGS_NONE() },
    { "local_ip", ngx_mruby_conn_local_ip, MRB_ARGS_NONE() },
    { "local_port", ngx_mruby_conn_local_port, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


struct RClass *
ngx_mruby_define_connection(mrb_state *mrb, struct RClass *outer)
{
    return mrb_api_define_class(mrb, outer, "Connection", NULL,
                                ngx_mruby_connection_methods);
}
