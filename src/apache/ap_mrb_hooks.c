/*
 * Request phases: one hook per phase and order (APR_HOOK_FIRST, MIDDLE,
 * LAST) that runs the script the request's per-directory configuration
 * holds for that slot, and the handlers named mruby-native-script
 * (mrubyHandlerCode) and mruby-script (the requested file is the script).
 *
 * A run borrows an interpreter from the process's idle ones and gives it
 * back when it ends (mrb_interp_take): threads wait for each other only for
 * that, never for a run.
 */

#include <string.h>

#include <http_core.h>
#include <http_main.h>
#include <http_protocol.h>
#include <http_request.h>

#include "ap_mrb.h"
#include "mrb_alloc.h"
#include "mrb_wait.h"

APLOG_USE_MODULE(mruby);

#define AP_MRB_NAMES(name) \
    { "mruby" name "First", "mruby" name "Middle", "mruby" name "Last" }

/* The directive of each slot, for error-log lines. */
static const char *const ap_mrb_hook_names[AP_MRB_NPHASES][AP_MRB_NORDERS] = {
    AP_MRB_NAMES("PostReadRequest"),
    AP_MRB_NAMES("QuickHandler"),
    AP_MRB_NAMES("TranslateName"),
    AP_MRB_NAMES("MapToStorage"),
    AP_MRB_NAMES("AccessChecker"),
    AP_MRB_NAMES("CheckUserId"),
    AP_MRB_NAMES("AuthChecker"),
    AP_MRB_NAMES("Fixups"),
    AP_MRB_NAMES("InsertFilter"),
    AP_MRB_NAMES("Handler"),
    AP_MRB_NAMES("LogTransaction")
};

/* The phases as the metrics' phase label names them (mrb_metrics.h). */
static const char *const ap_mrb_phase_names[AP_MRB_NPHASES] = {
    "post_read_request", "quick_handler", "translate_name", "map_to_storage",
    "access_checker", "check_user_id", "auth_checker", "fixups",
    "insert_filter", "handler", "log_transaction"
};

static const char *const ap_mrb_proc_names[AP_MRB_NPROC_PHASES]
                                          [AP_MRB_NORDERS] = {
    AP_MRB_NAMES("PostConfig"),
    AP_MRB_NAMES("ChildInit")
};


/*
 * A new interpreter of a child: the main server's post_config scripts, then
 * its child_init ones.  The fork gave the child one copy of the parent's
 * post_config interpreter (a prefork child serves with it); every other
 * interpreter gets what those scripts define by running them again.
 */
static void
ap_mrb_interp_init(mrb_interp *interp, void *arg)
{
    ap_mrb_run_startup_scripts(interp, arg, AP_MRB_POST_CONFIG);
    ap_mrb_run_startup_scripts(interp, arg, AP_MRB_CHILD_INIT);
}


static AP_MRB_NOINLINE void
ap_mrb_interp_failed(request_rec *r, const char *err)
{
    if (r != NULL) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                      "mod_mruby: cannot create an interpreter: %s", err);
    } else {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, ap_server_conf,
                     "mod_mruby: cannot create an interpreter: %s", err);
    }
}


mrb_interp *
ap_mrb_interp_take(request_rec *r)
{
    mrb_interp  *interp;
    char         err[MRB_ERR_MSG_LEN];

    interp = mrb_interp_take(&ap_mrb_server, ap_server_conf,
                             ap_mrb_interp_init, ap_server_conf,
                             err, sizeof(err));
    if (interp == NULL) {
        ap_mrb_interp_failed(r, err);
    }

    return interp;
}


/* What a hook may return to Apache: its own codes or a final HTTP status
 * (a 1xx would be sent as the response, followed by a body). */
static int
ap_mrb_valid_result(mrb_int rc)
{
    return rc == OK || rc == DECLINED || rc == DONE
           || mrb_http_valid_final_status(rc);
}


/*
 * A run that failed or returned what Apache cannot take: the error goes to
 * the log as one line and the client gets a 500, or, when the response has
 * started, a truncated response: a partial body must not pass for a whole
 * one.
 */
static AP_MRB_NOINLINE int
ap_mrb_run_failed(request_rec *r, mrb_script *script, mrb_run_rec *run, int rc,
    mrb_int default_result, const char *what)
{
    int  status;

    if (rc == 0) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "%s: %s returned %ld, "
                      "which is neither an Apache code (OK, DECLINED, DONE) "
                      "nor a final HTTP status (200-599)", what, mrb_script_name(script),
                      (long) run->result);
    } else {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "%s: %s", what,
                      run->error);
    }

    if (!r->sent_bodyct) {
        /* the script failed reading the body: the client's error (413) */
        status = ap_mrb_req_ctx_get(r)->body_status;
        return status != 0 ? status : HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!r->eos_sent) {
        r->connection->aborted = 1;
        return DONE;
    }

    return (int) default_result;
}


/*
 * A request script that has written body bytes has answered, whatever it
 * returned (the rule on nginx too): a handler that declined would glue its
 * output to the next handler's response, an earlier phase's to the
 * handler's.  A handler gives OK; an earlier phase DONE, which ends the
 * request with what was written.  Declining after output is logged: it
 * says the script meant something else.
 */
static AP_MRB_NOINLINE int
ap_mrb_answered(request_rec *r, mrb_script *script, mrb_run_rec *run,
    mrb_int default_result, const char *what)
{
    if (run->returned && run->result == DECLINED) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "%s: %s wrote output "
                      "and returned DECLINED: the output is the response",
                      what, mrb_script_name(script));
    }

    return default_result == OK ? OK : DONE;
}


int
ap_mrb_run_result(request_rec *r, mrb_script *script, mrb_run_rec *run, int rc,
    mrb_int default_result, const char *what)
{
    if (rc == 0 && ap_mrb_valid_result(run->result)) {
        if (run->written != 0 && run->data == NULL
            && (run->result == DECLINED || run->result == OK))
        {
            return ap_mrb_answered(r, script, run, default_result, what);
        }

        return (int) run->result;
    }

    return ap_mrb_run_failed(r, script, run, rc, default_result, what);
}


/* What ap_mrb_run's flags say of the run. */
#define AP_MRB_RUN_MAY_WAIT    1  /* a content handler: it may wait */
#define AP_MRB_RUN_TRANSLATES  2  /* translate_name: see ap_mrb_run */

/*
 * Runs one script for request r in phase (the metrics' label); what names
 * it in error lines.  data is
 * the filter of a filter script, NULL in a request phase.  A content
 * handler (AP_MRB_RUN_MAY_WAIT) that waits on the event MPM returns
 * SUSPENDED (ap_mrb_wait.c).
 *
 * A translate_name script that hands the request to mod_proxy (r.proxyreq
 * set, r.filename "proxy:URL") and returns nothing answers OK, as
 * mod_proxy's own translate_name does for such a request: declining would
 * let the core refuse it with 403.  (The original answered OK from every
 * script that returned nothing.)
 */
static int
ap_mrb_run(request_rec *r, mrb_script *script, void *data,
    mrb_int default_result, const char *phase, const char *what,
    unsigned flags)
{
    mrb_interp       *interp;
    mrb_run_rec       run;
    int               rc;
    ap_mrb_srv_conf  *sconf;
    ap_mrb_dir_conf  *dconf;

    interp = ap_mrb_interp_take(r);
    if (interp == NULL) {
        return HTTP_INTERNAL_SERVER_ERROR;
    }

    sconf = ap_get_module_config(r->server->module_config, &mruby_module);
    dconf = ap_get_module_config(r->per_dir_config, &mruby_module);

    mrb_run_init(&run, r, default_result);
    run.data = data;
    run.phase = phase;
    run.slow_ns = dconf->slow_ns > 0 ? dconf->slow_ns : 0;
    run.stat_on_error_fail = sconf->stat_on_error_fail == 1;
    run.memory_limit = ap_mrb_run_memory(r);
    run.timeout_ms = ap_mrb_run_timeout(r);
    run.may_wait = (flags & AP_MRB_RUN_MAY_WAIT) && ap_mrb_wait_possible(r);

    rc = mrb_script_run(interp, script, &run);
    mrb_interp_give_back(interp);

    if (rc == MRB_RUN_WAITING) {
        return ap_mrb_wait_begin(r, interp, &run, script, what);
    }

    if ((flags & AP_MRB_RUN_TRANSLATES) && rc == 0 && !run.returned
        && r->proxyreq != PROXYREQ_NONE && r->filename != NULL
        && strncmp(r->filename, "proxy:", 6) == 0)
    {
        run.result = OK;
    }

    return ap_mrb_run_result(r, script, &run, rc, default_result, what);
}


int
ap_mrb_run_script(request_rec *r, mrb_script *script, void *data,
    mrb_int default_result, const char *phase, const char *what)
{
    return ap_mrb_run(r, script, data, default_result, phase, what, 0);
}


/* A content handler's script: it may wait without holding its thread. */
static int
ap_mrb_run_handler(request_rec *r, mrb_script *script, const char *what)
{
    return ap_mrb_run(r, script, NULL, OK, "handler", what,
                      AP_MRB_RUN_MAY_WAIT);
}


void
ap_mrb_run_startup_scripts(mrb_interp *interp, server_rec *s,
    ap_mrb_proc_phase phase)
{
    ap_mrb_srv_conf  *sconf = ap_get_module_config(s->module_config,
                                                   &mruby_module);
    mrb_script       *script;
    mrb_run_rec       run;
    int               o;

    for (o = 0; o < AP_MRB_NORDERS; o++) {
        script = sconf->proc_hooks[phase][o];
        if (script == NULL) {
            continue;
        }

        mrb_run_init(&run, NULL, OK);
        run.startup = 1;
        run.memory_limit = MRB_RUN_STARTUP_MEMORY;

        if (mrb_script_run(interp, script, &run) != 0) {
            ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "%s: %s",
                         ap_mrb_proc_names[phase][o], run.error);
        }
    }
}


static int
ap_mrb_run_phase(request_rec *r, ap_mrb_phase phase, ap_mrb_order order,
    mrb_int default_result)
{
    ap_mrb_dir_conf  *dconf = ap_get_module_config(r->per_dir_config,
                                                   &mruby_module);
    mrb_script       *script = dconf->hooks[phase][order];

    if (script == NULL) {
        return DECLINED;
    }

    return ap_mrb_run(r, script, NULL, default_result,
                      ap_mrb_phase_names[phase],
                      ap_mrb_hook_names[phase][order],
                      phase == AP_MRB_HANDLER ? AP_MRB_RUN_MAY_WAIT
                      : phase == AP_MRB_TRANSLATE_NAME ? AP_MRB_RUN_TRANSLATES
                      : 0);
}


/*
 * One C function per phase and order: Apache orders hooks by function.
 * Every phase but the handler declines by default so that Apache's own
 * processing continues; a handler script has produced the response, so
 * its default is OK, as in the original mod_mruby.
 */
#define AP_MRB_DEFINE_HOOKS(fn, phase, dflt)                                  \
    static int fn##_first(request_rec *r)                                     \
    { return ap_mrb_run_phase(r, phase, AP_MRB_FIRST, dflt); }                \
    static int fn##_middle(request_rec *r)                                    \
    { return ap_mrb_run_phase(r, phase, AP_MRB_MIDDLE, dflt); }               \
    static int fn##_last(request_rec *r)                                      \
    { return ap_mrb_run_phase(r, phase, AP_MRB_LAST, dflt); }

AP_MRB_DEFINE_HOOKS(ap_mrb_post_read_request, AP_MRB_POST_READ_REQUEST,
                    DECLINED)
AP_MRB_DEFINE_HOOKS(ap_mrb_translate_name, AP_MRB_TRANSLATE_NAME, DECLINED)
AP_MRB_DEFINE_HOOKS(ap_mrb_map_to_storage, AP_MRB_MAP_TO_STORAGE, DECLINED)
AP_MRB_DEFINE_HOOKS(ap_mrb_access_checker, AP_MRB_ACCESS_CHECKER, DECLINED)
AP_MRB_DEFINE_HOOKS(ap_mrb_check_user_id, AP_MRB_CHECK_USER_ID, DECLINED)
AP_MRB_DEFINE_HOOKS(ap_mrb_auth_checker, AP_MRB_AUTH_CHECKER, DECLINED)
AP_MRB_DEFINE_HOOKS(ap_mrb_fixups, AP_MRB_FIXUPS, DECLINED)
AP_MRB_DEFINE_HOOKS(ap_mrb_handler, AP_MRB_HANDLER, OK)
AP_MRB_DEFINE_HOOKS(ap_mrb_log_transaction, AP_MRB_LOG_TRANSACTION, DECLINED)

/* quick_handler: a lookup (lookup_uri) is no request to serve. */
#define AP_MRB_DEFINE_QUICK(order, suffix)                                    \
    static int ap_mrb_quick_handler_##suffix(request_rec *r, int lookup)      \
    {                                                                         \
        return lookup ? DECLINED                                              \
            : ap_mrb_run_phase(r, AP_MRB_QUICK_HANDLER, order, DECLINED);     \
    }

AP_MRB_DEFINE_QUICK(AP_MRB_FIRST, first)
AP_MRB_DEFINE_QUICK(AP_MRB_MIDDLE, middle)
AP_MRB_DEFINE_QUICK(AP_MRB_LAST, last)

/* insert_filter: nothing to return. */
#define AP_MRB_DEFINE_INSERT(order, suffix)                                   \
    static void ap_mrb_insert_filter_##suffix(request_rec *r)                 \
    {                                                                         \
        (void) ap_mrb_run_phase(r, AP_MRB_INSERT_FILTER, order, DECLINED);    \
    }

AP_MRB_DEFINE_INSERT(AP_MRB_FIRST, first)
AP_MRB_DEFINE_INSERT(AP_MRB_MIDDLE, middle)
AP_MRB_DEFINE_INSERT(AP_MRB_LAST, last)


/* SetHandler mruby-native-script: the inline mrubyHandlerCode. */
static int
ap_mrb_native_handler(request_rec *r, ap_mrb_dir_conf *dconf)
{
    if (dconf->handler_code == NULL) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "handler "
                      AP_MRB_HANDLER_NATIVE " without mrubyHandlerCode for "
                      "%s", r->uri);
        return HTTP_INTERNAL_SERVER_ERROR;
    }

    return ap_mrb_run_handler(r, dconf->handler_code, "mrubyHandlerCode");
}


/*
 * SetHandler / AddHandler mruby-script: the requested file is the script.
 * Where mrubyHandlerEnable is not On the file is refused rather than
 * handed to the default handler, which would send its source.
 */
static int
ap_mrb_script_handler(request_rec *r, ap_mrb_dir_conf *dconf)
{
    mrb_script  *script;
    char         err[MRB_ERR_MSG_LEN];

    if (dconf->handler_enable != 1) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "handler "
                      AP_MRB_HANDLER_SCRIPT " for %s, but mrubyHandlerEnable "
                      "is not On here", r->filename);
        return HTTP_FORBIDDEN;
    }

    if (r->finfo.filetype == APR_NOFILE) {
        return HTTP_NOT_FOUND;
    }

    if (r->finfo.filetype != APR_REG) {
        return DECLINED;
    }

    script = mrb_script_for_file(r->filename,
                                 ap_mrb_cache_policy(dconf, r->server),
                                 err, sizeof(err));
    if (script == NULL) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, AP_MRB_HANDLER_SCRIPT
                      ": %s", err);
        return HTTP_INTERNAL_SERVER_ERROR;
    }

    return ap_mrb_run_handler(r, script, AP_MRB_HANDLER_SCRIPT);
}


static AP_MRB_NOINLINE int
ap_mrb_named_handler(request_rec *r)
{
    ap_mrb_dir_conf  *dconf = ap_get_module_config(r->per_dir_config,
                                                   &mruby_module);

    if (strcmp(r->handler, AP_MRB_HANDLER_NATIVE) == 0) {
        return ap_mrb_native_handler(r, dconf);
    }

    if (strcmp(r->handler, AP_MRB_HANDLER_SCRIPT) == 0) {
        return ap_mrb_script_handler(r, dconf);
    }

    if (strcmp(r->handler, AP_MRB_HANDLER_METRICS) == 0) {
        return ap_mrb_metrics_handler(r);
    }

    return DECLINED;
}


/*
 * Every request of the server asks, whatever its handler: one compare
 * answers most of them (Apache lowercases handler names), before the
 * stack frame of a handler is made.
 */
static int
ap_mrb_handler_by_name(request_rec *r)
{
    if (r->handler == NULL || r->handler[0] != 'm') {
        return DECLINED;
    }

    return ap_mrb_named_handler(r);
}


/*
 * Hooks are registered when a directive first asks for a phase and order,
 * not all at startup: Apache calls every registered hook on every request,
 * and 33 hooks that find nothing to run cost more than a cached script run.
 * Apache sorts hooks again after the configuration is processed, and
 * forgets them on restart, when it calls ap_mrb_register_request_hooks
 * again.
 */
static unsigned char  ap_mrb_hook_registered[AP_MRB_NPHASES][AP_MRB_NORDERS];

static const int  ap_mrb_apr_orders[AP_MRB_NORDERS] = {
    APR_HOOK_FIRST, APR_HOOK_MIDDLE, APR_HOOK_LAST
};

#define AP_MRB_FNS3(fn)  { fn##_first, fn##_middle, fn##_last }

static ap_HOOK_post_read_request_t *const ap_mrb_post_read_request_fns[] =
    AP_MRB_FNS3(ap_mrb_post_read_request);
static ap_HOOK_quick_handler_t *const ap_mrb_quick_handler_fns[] =
    AP_MRB_FNS3(ap_mrb_quick_handler);
static ap_HOOK_translate_name_t *const ap_mrb_translate_name_fns[] =
    AP_MRB_FNS3(ap_mrb_translate_name);
static ap_HOOK_map_to_storage_t *const ap_mrb_map_to_storage_fns[] =
    AP_MRB_FNS3(ap_mrb_map_to_storage);
static ap_HOOK_access_checker_t *const ap_mrb_access_checker_fns[] =
    AP_MRB_FNS3(ap_mrb_access_checker);
static ap_HOOK_check_user_id_t *const ap_mrb_check_user_id_fns[] =
    AP_MRB_FNS3(ap_mrb_check_user_id);
static ap_HOOK_auth_checker_t *const ap_mrb_auth_checker_fns[] =
    AP_MRB_FNS3(ap_mrb_auth_checker);
static ap_HOOK_fixups_t *const ap_mrb_fixups_fns[] =
    AP_MRB_FNS3(ap_mrb_fixups);
static ap_HOOK_insert_filter_t *const ap_mrb_insert_filter_fns[] =
    AP_MRB_FNS3(ap_mrb_insert_filter);
static ap_HOOK_handler_t *const ap_mrb_handler_fns[] =
    AP_MRB_FNS3(ap_mrb_handler);
static ap_HOOK_log_transaction_t *const ap_mrb_log_transaction_fns[] =
    AP_MRB_FNS3(ap_mrb_log_transaction);


void
ap_mrb_hook_use(ap_mrb_phase phase, ap_mrb_order order)
{
    int  o = ap_mrb_apr_orders[order];

    if (ap_mrb_hook_registered[phase][order]) {
        return;
    }

    ap_mrb_hook_registered[phase][order] = 1;

    switch (phase) {
    case AP_MRB_POST_READ_REQUEST:
        ap_hook_post_read_request(ap_mrb_post_read_request_fns[order],
                                  NULL, NULL, o);
        break;
    case AP_MRB_QUICK_HANDLER:
        ap_hook_quick_handler(ap_mrb_quick_handler_fns[order], NULL, NULL, o);
        break;
    case AP_MRB_TRANSLATE_NAME:
        ap_hook_translate_name(ap_mrb_translate_name_fns[order], NULL, NULL,
                               o);
        break;
    case AP_MRB_MAP_TO_STORAGE:
        ap_hook_map_to_storage(ap_mrb_map_to_storage_fns[order], NULL, NULL,
                               o);
        break;
    case AP_MRB_ACCESS_CHECKER:
        ap_hook_access_checker(ap_mrb_access_checker_fns[order], NULL, NULL,
                               o);
        break;
    /*
     * check_user_id and auth_checker go through the 2.4 authn/authz
     * registration, per configuration: our scripts come from the
     * per-directory configuration, so a subrequest with the same
     * configuration need not repeat them.
     */
    case AP_MRB_CHECK_USER_ID:
        ap_hook_check_authn(ap_mrb_check_user_id_fns[order], NULL, NULL, o,
                            AP_AUTH_INTERNAL_PER_CONF);
        break;
    case AP_MRB_AUTH_CHECKER:
        ap_hook_check_authz(ap_mrb_auth_checker_fns[order], NULL, NULL, o,
                            AP_AUTH_INTERNAL_PER_CONF);
        break;
    case AP_MRB_FIXUPS:
        ap_hook_fixups(ap_mrb_fixups_fns[order], NULL, NULL, o);
        break;
    case AP_MRB_INSERT_FILTER:
        ap_hook_insert_filter(ap_mrb_insert_filter_fns[order], NULL, NULL, o);
        break;
    case AP_MRB_HANDLER:
        ap_hook_handler(ap_mrb_handler_fns[order], NULL, NULL, o);
        break;
    case AP_MRB_LOG_TRANSACTION:
        ap_hook_log_transaction(ap_mrb_log_transaction_fns[order], NULL, NULL,
                                o);
        break;
    default:
        break;
    }
}


void
ap_mrb_register_request_hooks(void)
{
    memset(ap_mrb_hook_registered, 0, sizeof(ap_mrb_hook_registered));

    /* the named handlers: they are what SetHandler asked for */
    ap_hook_handler(ap_mrb_handler_by_name, NULL, NULL, APR_HOOK_MIDDLE);
}
