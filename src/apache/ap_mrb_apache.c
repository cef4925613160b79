/*
 * The Apache class itself: the constants of the Apache API and the class
 * methods that are Apache's own (the core defines the shared ones: rputs,
 * echo, return, errlogger, log, module_name, ...).  Also the small helpers
 * every Apache class uses to reach the request and convert strings.
 */

#include <string.h>
#include <syslog.h>
#include <unistd.h>
#include <sys/syscall.h>

#include <http_core.h>
#include <http_main.h>
#include <http_protocol.h>
#include <mod_auth.h>

#include <mruby.h>
#include <mruby/string.h>

#include "ap_mrb.h"
#include "mrb_wait.h"


request_rec *
ap_mrb_request(mrb_state *mrb)
{
    return mrb_interp_request(mrb);
}


/* The state of the current filter or authn run, or raises. */
void *
ap_mrb_run_data(mrb_state *mrb, ap_mrb_run_kind kind, const char *class_name)
{
    mrb_run_rec            *run = mrb_interp_run(mrb);
    const ap_mrb_run_kind  *k = run ? run->data : NULL;

    if (k == NULL || *k != kind) {
        mrb_raisef(mrb, E_RUNTIME_ERROR, "%s is only available in a script "
                   "run as a %s", class_name,
                   kind == AP_MRB_RUN_AUTHN ? "mruby authn provider"
                                            : "mruby filter");
    }

    return run->data;
}


mrb_value
ap_mrb_str(mrb_state *mrb, const char *s)
{
    return s ? mrb_str_new_cstr(mrb, s) : mrb_nil_value();
}


mrb_value
ap_mrb_str_at(mrb_state *mrb, const void *base, size_t offset)
{
    return ap_mrb_str(mrb, *(const char * const *) ((const char *) base
                                                    + offset));
}


/*
 * A Ruby string as a C string in pool p.  Apache's strings end at the
 * first NUL, so one inside would silently cut the value: refuse it.
 */
char *
ap_mrb_pstr(mrb_state *mrb, apr_pool_t *p, mrb_value str)
{
    const char  *s = RSTRING_PTR(str);
    apr_size_t   len = (apr_size_t) RSTRING_LEN(str);

    if (memchr(s, '\0', len) != NULL) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "string contains a null byte");
    }

    return apr_pstrmemdup(p, s, len);
}


/* The longest Apache.sleep: a day (what a request may sensibly wait, and
 * far inside apr_interval_time_t's microseconds). */
#define AP_MRB_SLEEP_MAX  86400.0

static mrb_value
ap_mrb_sleep(mrb_state *mrb, mrb_value self)
{
    mrb_float  sec;

    mrb_get_args(mrb, "f", &sec);

    /* NaN fails both compares: converting it, or a value too large for
     * the microsecond count, to an integer is undefined behaviour */
    if (!(sec >= 0 && sec <= AP_MRB_SLEEP_MAX)) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR, "sleep: %f is not a number of "
                   "seconds from 0 to %d", sec, (int) AP_MRB_SLEEP_MAX);
    }

    /* a content handler on the event MPM gives its thread back while it
     * waits (ap_mrb_wait.c); elsewhere this blocks the thread */
    mrb_wait_sleep(mrb, (mrb_int) (sec * 1000.0 + 0.5), "sleep");
    return mrb_int_value(mrb, (mrb_int) sec);
}


/* syslogger([level,] message): to syslog(3), level LOG_NOTICE by default. */
static mrb_value
ap_mrb_syslogger(mrb_state *mrb, mrb_value self)
{
    mrb_value  a, b;
    mrb_int    level = LOG_NOTICE;
    mrb_value  msg;

    if (mrb_get_args(mrb, "o|o", &a, &b) == 2) {
        level = mrb_as_int(mrb, a);
        msg = b;
    } else {
        msg = a;
    }

    msg = mrb_obj_as_string(mrb, msg);
    syslog((int) (level & LOG_PRIMASK), "%.*s", (int) RSTRING_LEN(msg),
           RSTRING_PTR(msg));
    return self;
}


/* The id of the thread running the script (the original's get_tid). */
static mrb_value
ap_mrb_get_tid(mrb_state *mrb, mrb_value self)
{
    return mrb_int_value(mrb, (mrb_int) syscall(SYS_gettid));
}


/* How many objects the current C call keeps alive in the GC arena: a
 * debugging aid of the original, for scripts that hunt a leak. */
static mrb_value
ap_mrb_count_arena(mrb_state *mrb, mrb_value self)
{
    return mrb_int_value(mrb, mrb_gc_arena_save(mrb));
}


static mrb_value
ap_mrb_server_version(mrb_state *mrb, mrb_value self)
{
    return mrb_str_new_cstr(mrb, ap_get_server_description());
}


static mrb_value
ap_mrb_server_build(mrb_state *mrb, mrb_value self)
{
    return mrb_str_new_cstr(mrb, ap_get_server_built());
}


#define AP_MRB_CONST(name)  { #name, name }

static const mrb_api_const  ap_mrb_consts[] = {
    AP_MRB_CONST(OK),
    AP_MRB_CONST(DECLINED),
    AP_MRB_CONST(DONE),
    AP_MRB_CONST(SUSPENDED),

    AP_MRB_CONST(APLOG_EMERG),
    AP_MRB_CONST(APLOG_ALERT),
    AP_MRB_CONST(APLOG_CRIT),
    AP_MRB_CONST(APLOG_ERR),
    AP_MRB_CONST(APLOG_WARNING),
    AP_MRB_CONST(APLOG_NOTICE),
    AP_MRB_CONST(APLOG_INFO),
    AP_MRB_CONST(APLOG_DEBUG),

    /* the syslog names, and LOG_WARN as nginx spells it: one script for
     * both servers can log with Server::LOG_WARN */
    { "LOG_EMERG", APLOG_EMERG },
    { "LOG_ALERT", APLOG_ALERT },
    { "LOG_CRIT", APLOG_CRIT },
    { "LOG_ERR", APLOG_ERR },
    { "LOG_WARNING", APLOG_WARNING },
    { "LOG_WARN", APLOG_WARNING },
    { "LOG_NOTICE", APLOG_NOTICE },
    { "LOG_INFO", APLOG_INFO },
    { "LOG_DEBUG", APLOG_DEBUG },

    AP_MRB_CONST(M_GET),
    AP_MRB_CONST(M_PUT),
    AP_MRB_CONST(M_POST),
    AP_MRB_CONST(M_DELETE),
    AP_MRB_CONST(M_CONNECT),
    AP_MRB_CONST(M_OPTIONS),
    AP_MRB_CONST(M_TRACE),
    AP_MRB_CONST(M_PATCH),
    AP_MRB_CONST(M_PROPFIND),
    AP_MRB_CONST(M_PROPPATCH),
    AP_MRB_CONST(M_MKCOL),
    AP_MRB_CONST(M_COPY),
    AP_MRB_CONST(M_MOVE),
    AP_MRB_CONST(M_LOCK),
    AP_MRB_CONST(M_UNLOCK),
    AP_MRB_CONST(M_VERSION_CONTROL),
    AP_MRB_CONST(M_CHECKOUT),
    AP_MRB_CONST(M_UNCHECKOUT),
    AP_MRB_CONST(M_CHECKIN),
    AP_MRB_CONST(M_UPDATE),
    AP_MRB_CONST(M_LABEL),
    AP_MRB_CONST(M_REPORT),
    AP_MRB_CONST(M_MKWORKSPACE),
    AP_MRB_CONST(M_MKACTIVITY),
    AP_MRB_CONST(M_BASELINE_CONTROL),
    AP_MRB_CONST(M_MERGE),
    AP_MRB_CONST(M_INVALID),

    AP_MRB_CONST(PROXYREQ_NONE),
    AP_MRB_CONST(PROXYREQ_PROXY),
    AP_MRB_CONST(PROXYREQ_REVERSE),
    AP_MRB_CONST(PROXYREQ_RESPONSE),

    AP_MRB_CONST(AUTH_DENIED),
    AP_MRB_CONST(AUTH_GRANTED),
    AP_MRB_CONST(AUTH_USER_FOUND),
    AP_MRB_CONST(AUTH_USER_NOT_FOUND),
    AP_MRB_CONST(AUTH_GENERAL_ERROR),

    MRB_API_CONST_END
};


static const mrb_api_method  ap_mrb_class_methods[] = {
    { "sleep", ap_mrb_sleep, MRB_ARGS_REQ(1) },
    { "syslogger", ap_mrb_syslogger, MRB_ARGS_ARG(1, 1) },
    { "syslog", ap_mrb_syslogger, MRB_ARGS_REQ(2) },
    { "get_tid", ap_mrb_get_tid, MRB_ARGS_NONE() },
    { "count_arena", ap_mrb_count_arena, MRB_ARGS_NONE() },
    { "server_version", ap_mrb_server_version, MRB_ARGS_NONE() },
    { "server_build", ap_mrb_server_build, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


void
ap_mrb_define_apache(mrb_state *mrb, struct RClass *apache)
{
    mrb_api_define_consts(mrb, apache, ap_mrb_consts);
    mrb_api_define_class_methods(mrb, apache, ap_mrb_class_methods);
}
