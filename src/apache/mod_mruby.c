/*
 * mod_mruby: Ruby (mruby) scripts in every phase of Apache httpd.
 *
 * This is the module's main file (so that <IfModule mod_mruby.c> works): the
 * module record, the process-level hooks (pre_config, post_config,
 * child_init), and the mrb_server through which the core writes response
 * bodies, logs, and defines the Apache classes into each interpreter.
 */

#include <limits.h>
#include <stdint.h>
#include <unistd.h>

#include <http_core.h>
#include <http_main.h>
#include <http_protocol.h>
#include <ap_mpm.h>
#include <unixd.h>

#include "ap_mrb.h"
#include "mrb_lib.h"
#include "mrb_metrics.h"
#include "mrb_run_budget.h"
#include "mrb_shdict.h"
#include "mrb_shdict_file.h"


/* A body of 2 GB or more: ap_rwrite takes an int. */
static AP_MRB_NOINLINE int
ap_mrb_rwrite_large(request_rec *r, const char *data, size_t len)
{
    while (len > INT_MAX) {
        if (ap_rwrite(data, INT_MAX, r) < 0) {
            return -1;
        }

        data += INT_MAX;
        len -= INT_MAX;
    }

    return ap_rwrite(data, (int) len, r) < 0 ? -1 : 0;
}


/* Server.rputs / echo: the response body, or the body a filter makes. */
static int
ap_mrb_write(mrb_run_rec *run, const char *data, size_t len)
{
    const ap_mrb_run_kind  *kind = run->data;
    request_rec            *r = run->request;

    if (kind != NULL && (*kind == AP_MRB_RUN_OUTPUT_FILTER
                         || *kind == AP_MRB_RUN_INPUT_FILTER))
    {
        return ap_mrb_filter_write(run->data, data, len);
    }

    /*
     * After the response's EOS (a log_transaction script) the bytes would
     * go out on the connection behind the response, where a keep-alive
     * client reads them as the start of the next one.
     */
    if (r->eos_sent) {
        return -1;
    }

    if (len > INT_MAX) {
        return ap_mrb_rwrite_large(r, data, len);
    }

    /* fails once the client has gone (the connection is aborted) */
    return ap_rwrite(data, (int) len, r) < 0 ? -1 : 0;
}


/* The file ap_mrb_log writes to (mrb_server log_fds): the request's
 * virtual host's error log, else the target's; none for syslog or a
 * provider.  apr_os_file_get only reads the apr_file_t. */
static int
ap_mrb_log_fds(void *log_target, mrb_run_rec *run, int *fds, int max)
{
    request_rec    *r = run ? run->request : NULL;
    server_rec     *s = r != NULL ? r->server : log_target;
    apr_os_file_t   fd;

    if (max < 1 || s == NULL || s->error_log == NULL
        || apr_os_file_get(&fd, s->error_log) != APR_SUCCESS)
    {
        return 0;
    }

    fds[0] = fd;
    return 1;
}


/* MRB_LOG_* are syslog's numbers, and so are APLOG_EMERG..APLOG_DEBUG. */
static void
ap_mrb_log(void *log_target, mrb_run_rec *run, int level, const char *msg,
    size_t len)
{
    request_rec  *r = run ? run->request : NULL;
    server_rec   *s = log_target;
    int           n = len > INT_MAX ? INT_MAX : (int) len;

    if (r != NULL) {
        ap_log_rerror(APLOG_MARK, level, 0, r, "%.*s", n, msg);
    } else {
        ap_log_error(APLOG_MARK, level, 0, s, "%.*s", n, msg);
    }
}


/* ap_mrb_log's filter: notice and above always pass, as in Apache. */
static int
ap_mrb_log_enabled(void *log_target, mrb_run_rec *run, int level)
{
    request_rec  *r = run ? run->request : NULL;

    if (r != NULL) {
        return APLOG_R_IS_LEVEL(r, level);
    }

    return APLOG_IS_LEVEL((server_rec *) log_target, level);
}


static void
ap_mrb_define(mrb_state *mrb, struct RClass *apache)
{
    ap_mrb_define_apache(mrb, apache);
    ap_mrb_define_tables(mrb, apache);
    ap_mrb_define_finfo(mrb, apache);
    ap_mrb_define_request(mrb, apache);  /* after the two above */
    ap_mrb_define_server(mrb, apache);
    ap_mrb_define_connection(mrb, apache);
    ap_mrb_define_scoreboard(mrb, apache);
    ap_mrb_define_filter(mrb, apache);
    ap_mrb_define_authn(mrb, apache);
}


/* Whether the MPM runs a child's requests on several threads (event,
 * worker); an MPM that cannot say counts as threaded. */
static int
ap_mrb_threaded(void)
{
    int  threaded;

    return ap_mpm_query(AP_MPMQ_IS_THREADED, &threaded) != APR_SUCCESS
           || threaded != AP_MPMQ_NOT_SUPPORTED;
}


const mrb_server ap_mrb_server = {
    .name = "Apache",
    .class_name = "Apache",
    .module_name = "mod_mruby",
    .module_version = MOD_MRUBY_VERSION,
    .log_level_base = APLOG_EMERG,
    .define = ap_mrb_define,
    .write = ap_mrb_write,
    .log = ap_mrb_log,
    .log_enabled = ap_mrb_log_enabled,
    .log_fds = ap_mrb_log_fds,
    .wake_after = ap_mrb_wake_after,
    .wake_on_fd = ap_mrb_wake_on_fd,   /* Redis: as a sleep, same places */
    .sleep_blocks = 1,      /* a sleep that cannot suspend blocks */
    .threaded = ap_mrb_threaded,
    .parts = mrb_parts
};


/*
 * The registry of shared dictionaries is kept by Apache across the
 * restarts that unload this module, so that the next load (maybe of a
 * newer build, after an upgrade) keeps their contents.
 */
static void
ap_mrb_shdict_keep(void)
{
    void  *keep;

    keep = ap_retained_data_get(MRB_SHDICT_KEEP_NAME);
    if (keep == NULL) {
        keep = ap_retained_data_create(MRB_SHDICT_KEEP_NAME,
                                       mrb_shdict_keep_size());
    }

    mrb_shdict_keep_in(keep);
}


static int
ap_mrb_pre_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp)
{
    ap_mrb_shdict_keep();
    mrb_shdict_config_begin();
    ap_mrb_handler_files = 0;
    return OK;
}


/*
 * The parent's post_config interpreter of this configuration, and the pool
 * it dies with: a prefork child takes over its copy (ap_mrb_child_init).
 */
static mrb_interp  *ap_mrb_parent_interp;
static apr_pool_t  *ap_mrb_parent_pool;


static apr_status_t
ap_mrb_interp_cleanup(void *data)
{
    if (data == ap_mrb_parent_interp) {
        ap_mrb_parent_interp = NULL;
    }

    mrb_interp_close(data);
    return APR_SUCCESS;
}


static int
ap_mrb_has_scripts(server_rec *s, ap_mrb_proc_phase phase)
{
    ap_mrb_srv_conf  *sconf = ap_get_module_config(s->module_config,
                                                   &mruby_module);
    int               o;

    for (o = 0; o < AP_MRB_NORDERS; o++) {
        if (sconf->proc_hooks[phase][o] != NULL) {
            return 1;
        }
    }

    return 0;
}


/*
 * The directory of Cache.new(namespace:) files, made now while the parent
 * may be root and given to the User that children run as.  A directory
 * that cannot be made is no reason to stop the server: it is logged, and
 * Cache.new says the same to the script that needs it.
 */
static void
ap_mrb_cache_dir_init(apr_pool_t *pconf, server_rec *s)
{
    char              err[MRB_ERR_MSG_LEN];
    const char       *dir;
    ap_mrb_srv_conf  *sconf;

    sconf = ap_get_module_config(s->module_config, &mruby_module);
    dir = sconf->cache_dir != NULL
          ? sconf->cache_dir : ap_runtime_dir_relative(pconf, AP_MRB_CACHE_DIR);

    if (mrb_shdict_file_set_dir(dir, (long) ap_unixd_config.user_id,
                                (long) ap_unixd_config.group_id, err,
                                sizeof(err)) != 0)
    {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "mod_mruby: %s "
                     "(mrubyCacheDir)", err);
    }
}


/*
 * The parent's configuration is gone, with the interpreter of its
 * post_config scripts, and the module is unloaded next: the Cache stores
 * those scripts opened are unmapped, where a new load could not find them.
 * A child leaves its own to its exit.
 */
static apr_status_t
ap_mrb_cache_close(void *parent)
{
    if (getpid() == (pid_t) (intptr_t) parent) {
        mrb_shdict_file_close_all();
    }

    return APR_SUCCESS;
}


/* The configuration that opened the metrics table is gone. */
static apr_status_t
ap_mrb_metrics_close(void *data)
{
    mrb_metrics_close();
    return APR_SUCCESS;
}


/*
 * post_config scripts run in the parent, in an interpreter of its own that
 * lives as long as this configuration.  A prefork child takes over its
 * copy of it, so that what they defined is there in the child, as in the
 * original; each interpreter of a threaded child runs them again as it is
 * made (ap_mrb_interp_init).  Apache reads
 * its configuration twice at startup; the first pass only prepares the
 * second, so the scripts run once at startup and once per restart.
 */
static int
ap_mrb_post_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
    server_rec *s)
{
    mrb_interp  *interp;
    char         err[MRB_ERR_MSG_LEN];

    mrb_shdict_config_end();

    /* scripts are compiled: the configuration-time compiler's work is done */
    mrb_script_compiler_close();
    ap_mrb_srv_conf_inherit(s);

    if (ap_state_query(AP_SQ_MAIN_STATE) == AP_SQ_MS_CREATE_PRE_CONFIG) {
        return OK;
    }

    ap_mrb_file_watch_limits(s);
    ap_mrb_cache_dir_init(pconf, s);
    apr_pool_cleanup_register(pconf, (void *) (intptr_t) getpid(),
                              ap_mrb_cache_close, apr_pool_cleanup_null);

    /* until this configuration goes; without it nothing is counted,
     * Apache serves */
    if (mrb_metrics_open(err, sizeof(err)) != 0) {
        ap_log_error(APLOG_MARK, APLOG_ALERT, 0, s, "mod_mruby: %s", err);

    } else {
        apr_pool_cleanup_register(pconf, NULL, ap_mrb_metrics_close,
                                  apr_pool_cleanup_null);
    }

    if (!ap_mrb_has_scripts(s, AP_MRB_POST_CONFIG)) {
        return OK;
    }

    interp = mrb_interp_open(&ap_mrb_server, s, err, sizeof(err));
    if (interp == NULL) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s,
                     "mod_mruby: cannot create an interpreter: %s", err);
        return HTTP_INTERNAL_SERVER_ERROR;
    }

    apr_pool_cleanup_register(pconf, interp, ap_mrb_interp_cleanup,
                              apr_pool_cleanup_null);

    ap_mrb_run_startup_scripts(interp, s, AP_MRB_POST_CONFIG);
    ap_mrb_parent_interp = interp;
    ap_mrb_parent_pool = pconf;
    return OK;
}


static apr_status_t
ap_mrb_child_exit(void *data)
{
    mrb_interp_close_idle();
    return APR_SUCCESS;
}


/*
 * Every interpreter runs the post_config and child_init scripts when it is
 * created, on the first script that finds none idle.
 *
 * A threaded child joins its threads before it destroys pchild: the idle
 * interpreters are closed then, so that their finalizers run.  A prefork
 * child serves one request at a time: its interpreter is made ready now, so
 * the scripts run as the child starts, and left to the exit, because
 * SIGTERM ends a prefork child from its signal handler, where freeing
 * memory and running finalizers is not safe.  That interpreter is the
 * parent's post_config one when there is one (the child's copy, made by
 * the fork), with the child_init scripts run in it.
 */
static apr_status_t
ap_mrb_clock_stop(void *data)
{
    mrb_run_clock_stop();
    return APR_SUCCESS;
}


static void
ap_mrb_child_init(apr_pool_t *pchild, server_rec *s)
{
    mrb_interp  *interp;
    char         err[MRB_ERR_MSG_LEN];

    if (mrb_metrics_attach(err, sizeof(err)) != 0) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "mod_mruby: %s", err);
    }

    ap_mrb_wait_child_init(pchild);

    if (mrb_run_clock_start(err, sizeof(err)) != 0) {
        ap_log_error(APLOG_MARK, APLOG_ALERT, 0, s, "%s", err);
    } else {
        apr_pool_cleanup_register(pchild, NULL, ap_mrb_clock_stop,
                                  apr_pool_cleanup_null);
    }

    if (ap_mrb_threaded()) {
        apr_pool_cleanup_register(pchild, NULL, ap_mrb_child_exit,
                                  apr_pool_cleanup_null);
        ap_mrb_file_watch_child_init(pchild, s, 1);
        return;
    }

    ap_mrb_file_watch_child_init(pchild, s, 0);

    if (ap_mrb_parent_interp != NULL) {
        /* the child's now: the configuration's pool does not close it */
        interp = ap_mrb_parent_interp;
        apr_pool_cleanup_kill(ap_mrb_parent_pool, interp,
                              ap_mrb_interp_cleanup);
        ap_mrb_parent_interp = NULL;

        mrb_interp_seed_random(interp);
        ap_mrb_run_startup_scripts(interp, s, AP_MRB_CHILD_INIT);
        mrb_interp_seal(interp);
        mrb_interp_give_back(interp);
        return;
    }

    if (ap_mrb_has_scripts(s, AP_MRB_CHILD_INIT)) {
        interp = ap_mrb_interp_take(NULL);
        if (interp != NULL) {
            mrb_interp_give_back(interp);
        }
    }
}


static void
ap_mrb_register_hooks(apr_pool_t *p)
{
    ap_hook_pre_config(ap_mrb_pre_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_post_config(ap_mrb_post_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_child_init(ap_mrb_child_init, NULL, NULL, APR_HOOK_MIDDLE);

    ap_mrb_register_request_hooks();
    ap_mrb_register_wait_hooks();
    ap_mrb_register_filters();
    ap_mrb_register_authn_provider(p);
}


AP_DECLARE_MODULE(mruby) = {
    STANDARD20_MODULE_STUFF,
    ap_mrb_create_dir_conf,
    ap_mrb_merge_dir_conf,
    ap_mrb_create_srv_conf,
    NULL,
    ap_mrb_cmds,
    ap_mrb_register_hooks
};
