/*
 * Configuration: the per-directory and per-server records, their merging,
 * and the directives.
 *
 * Scripts are created while the configuration is read, so that a syntax
 * error in a cached (`cache` flag, mrubyCodeCache forever) or inline script
 * fails `apache2 -t` with the directive and "file:line: message".  They are
 * freed by a cleanup of the configuration pool.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <http_core.h>
#include <http_main.h>

#include "ap_mrb.h"
#include "mrb_alloc.h"
#include "mrb_run_budget.h"
#include "mrb_shdict.h"

APLOG_USE_MODULE(mruby);

/* What a hook directive stands for: cmd->info of its command_rec. */
typedef struct {
    int           phase;     /* ap_mrb_phase or ap_mrb_proc_phase */
    ap_mrb_order  order;
} ap_mrb_hook_cmd;

#define AP_MRB_ORDERS(phase) \
    { { phase, AP_MRB_FIRST }, { phase, AP_MRB_MIDDLE }, { phase, AP_MRB_LAST } }

static ap_mrb_hook_cmd ap_mrb_hook_cmds[AP_MRB_NPHASES][AP_MRB_NORDERS] = {
    AP_MRB_ORDERS(AP_MRB_POST_READ_REQUEST),
    AP_MRB_ORDERS(AP_MRB_QUICK_HANDLER),
    AP_MRB_ORDERS(AP_MRB_TRANSLATE_NAME),
    AP_MRB_ORDERS(AP_MRB_MAP_TO_STORAGE),
    AP_MRB_ORDERS(AP_MRB_ACCESS_CHECKER),
    AP_MRB_ORDERS(AP_MRB_CHECK_USER_ID),
    AP_MRB_ORDERS(AP_MRB_AUTH_CHECKER),
    AP_MRB_ORDERS(AP_MRB_FIXUPS),
    AP_MRB_ORDERS(AP_MRB_INSERT_FILTER),
    AP_MRB_ORDERS(AP_MRB_HANDLER),
    AP_MRB_ORDERS(AP_MRB_LOG_TRANSACTION)
};

static ap_mrb_hook_cmd ap_mrb_proc_cmds[AP_MRB_NPROC_PHASES][AP_MRB_NORDERS] = {
    AP_MRB_ORDERS(AP_MRB_POST_CONFIG),
    AP_MRB_ORDERS(AP_MRB_CHILD_INIT)
};

static const char *const ap_mrb_phase_names[AP_MRB_NPHASES] = {
    "post_read_request", "quick_handler", "translate_name", "map_to_storage",
    "access_checker", "check_user_id", "auth_checker", "fixups",
    "insert_filter", "handler", "log_transaction"
};

void *
ap_mrb_create_dir_conf(apr_pool_t *p, char *dir)
{
    ap_mrb_dir_conf  *conf = apr_pcalloc(p, sizeof(ap_mrb_dir_conf));

    conf->handler_enable = AP_MRB_UNSET;
    conf->cache_policy = AP_MRB_UNSET;
    conf->body_limit = AP_MRB_UNSET;
    conf->filter_limit = AP_MRB_UNSET;
    conf->slow_ns = AP_MRB_UNSET;
    conf->run_memory = AP_MRB_UNSET;
    conf->run_timeout_ms = AP_MRB_UNSET;
    return conf;
}


/* Each script and flag of add, or where add has none, of base. */
static AP_MRB_NOINLINE ap_mrb_dir_conf *
ap_mrb_dir_conf_combine(apr_pool_t *p, const ap_mrb_dir_conf *base,
    const ap_mrb_dir_conf *add)
{
    ap_mrb_dir_conf  *conf;
    int               ph, o;

    conf = apr_palloc(p, sizeof(ap_mrb_dir_conf));
    conf->used = 1;

    for (ph = 0; ph < AP_MRB_NPHASES; ph++) {
        for (o = 0; o < AP_MRB_NORDERS; o++) {
            conf->hooks[ph][o] = add->hooks[ph][o] ? add->hooks[ph][o]
                                                   : base->hooks[ph][o];
        }
    }

#define AP_MRB_MERGE_PTR(field) \
    conf->field = add->field ? add->field : base->field
#define AP_MRB_MERGE_FLAG(field) \
    conf->field = add->field != AP_MRB_UNSET ? add->field : base->field

    AP_MRB_MERGE_PTR(handler_code);
    AP_MRB_MERGE_PTR(output_filter);
    AP_MRB_MERGE_PTR(input_filter);
    AP_MRB_MERGE_PTR(authn_check_password);
    AP_MRB_MERGE_PTR(authn_get_realm_hash);
    AP_MRB_MERGE_FLAG(handler_enable);
    AP_MRB_MERGE_FLAG(cache_policy);
    AP_MRB_MERGE_FLAG(body_limit);
    AP_MRB_MERGE_FLAG(filter_limit);
    AP_MRB_MERGE_FLAG(slow_ns);
    AP_MRB_MERGE_FLAG(run_memory);
    AP_MRB_MERGE_FLAG(run_timeout_ms);

#undef AP_MRB_MERGE_PTR
#undef AP_MRB_MERGE_FLAG

    return conf;
}


/*
 * A nested container inherits every script and flag it does not set.
 * Apache merges on every request, once per matching container, and most
 * containers set nothing of ours: then one side is the answer as it is
 * (configurations are read-only once read), and costs two tests.
 */
void *
ap_mrb_merge_dir_conf(apr_pool_t *p, void *basev, void *addv)
{
    ap_mrb_dir_conf  *base = basev, *add = addv;

    if (!add->used) {
        return base;
    }

    if (!base->used) {
        return add;
    }

    return ap_mrb_dir_conf_combine(p, base, add);
}


void *
ap_mrb_create_srv_conf(apr_pool_t *p, server_rec *s)
{
    ap_mrb_srv_conf  *conf = apr_pcalloc(p, sizeof(ap_mrb_srv_conf));

    conf->cache_policy = AP_MRB_UNSET;
    conf->stat_on_error_fail = AP_MRB_UNSET;
    return conf;
}


void
ap_mrb_srv_conf_inherit(server_rec *main_server)
{
    ap_mrb_srv_conf  *main_conf, *conf;
    server_rec       *s;

    main_conf = ap_get_module_config(main_server->module_config,
                                     &mruby_module);
    if (main_conf->stat_on_error_fail == AP_MRB_UNSET) {
        main_conf->stat_on_error_fail = 0;
    }

    for (s = main_server->next; s != NULL; s = s->next) {
        conf = ap_get_module_config(s->module_config, &mruby_module);
        if (conf->stat_on_error_fail == AP_MRB_UNSET) {
            conf->stat_on_error_fail = main_conf->stat_on_error_fail;
        }
    }
}


/*
 * The cache policy of a file script without the `cache` flag: the nearest
 * mrubyCodeCache of its container, its virtual host, the main server.
 */
mrb_cache_policy
ap_mrb_cache_policy(const ap_mrb_dir_conf *dconf, server_rec *s)
{
    const ap_mrb_srv_conf  *sconf;

    if (dconf != NULL && dconf->cache_policy != AP_MRB_UNSET) {
        return dconf->cache_policy;
    }

    sconf = ap_get_module_config(s->module_config, &mruby_module);
    if (sconf->cache_policy != AP_MRB_UNSET) {
        return sconf->cache_policy;
    }

    if (ap_server_conf != NULL && s != ap_server_conf) {
        sconf = ap_get_module_config(ap_server_conf->module_config,
                                     &mruby_module);
        if (sconf->cache_policy != AP_MRB_UNSET) {
            return sconf->cache_policy;
        }
    }

    return MRB_CACHE_STAT;
}


static apr_status_t
ap_mrb_script_cleanup(void *data)
{
    mrb_script_free(data);
    return APR_SUCCESS;
}


static void
ap_mrb_own_script(apr_pool_t *p, mrb_script *script)
{
    apr_pool_cleanup_register(p, script, ap_mrb_script_cleanup,
                              apr_pool_cleanup_null);
}


/* "file [cache]": a file script, owned by the configuration pool.  dconf
 * gives the cache policy; the caller marks it used if the script goes in it
 * (a process phase's goes in the server config: a per-directory config
 * marked used costs every request a full merge). */
static const char *
ap_mrb_file_script(cmd_parms *cmd, ap_mrb_dir_conf *dconf, const char *file,
    const char *flag, mrb_script **script)
{
    const char        *path;
    mrb_cache_policy   policy;
    char               err[MRB_ERR_MSG_LEN];

    if (flag != NULL && strcasecmp(flag, "cache") != 0) {
        return apr_psprintf(cmd->pool, "%s: the second argument must be "
                            "\"cache\", not \"%s\"", cmd->cmd->name, flag);
    }

    path = ap_server_root_relative(cmd->pool, file);
    if (path == NULL) {
        return apr_psprintf(cmd->pool, "%s: invalid file path \"%s\"",
                            cmd->cmd->name, file);
    }

    policy = flag != NULL ? MRB_CACHE_FOREVER
                          : ap_mrb_cache_policy(cmd->path ? dconf : NULL,
                                                cmd->server);

    *script = mrb_script_from_file(path, policy, err, sizeof(err));
    if (*script == NULL) {
        return apr_psprintf(cmd->pool, "%s: %s", cmd->cmd->name, err);
    }

    ap_mrb_own_script(cmd->pool, *script);
    return NULL;
}


/* Inline code, compiled now; errors name the configuration file and line. */
static const char *
ap_mrb_code_script(cmd_parms *cmd, const char *code, mrb_script **script)
{
    const char  *origin = cmd->directive ? cmd->directive->filename
                                         : cmd->config_file->name;
    int          line = cmd->directive ? cmd->directive->line_num
                                       : (int) cmd->config_file->line_number;
    char         err[MRB_ERR_MSG_LEN];

    *script = mrb_script_from_code(code, strlen(code), origin, line,
                                   err, sizeof(err));
    if (*script == NULL) {
        return apr_psprintf(cmd->pool, "%s: %s", cmd->cmd->name, err);
    }

    ap_mrb_own_script(cmd->pool, *script);
    return NULL;
}


/*
 * Some phases run before Apache has mapped the request to a container, so
 * a script put in one would never run: refuse it where it cannot work.
 */
static const char *
ap_mrb_check_phase_context(cmd_parms *cmd, ap_mrb_phase phase)
{
    const char  *err;

    switch (phase) {

    case AP_MRB_POST_READ_REQUEST:
    case AP_MRB_QUICK_HANDLER:
    case AP_MRB_MAP_TO_STORAGE:
        err = ap_check_cmd_context(cmd, NOT_IN_DIR_LOC_FILE);
        break;

    case AP_MRB_TRANSLATE_NAME:
        /* <Location> is walked before translate_name, <Directory> after */
        err = ap_check_cmd_context(cmd, NOT_IN_DIRECTORY | NOT_IN_FILES);
        break;

    default:
        return NULL;
    }

    if (err == NULL) {
        return NULL;
    }

    return apr_psprintf(cmd->pool, "%s: Apache runs %s before it knows the "
                        "request's container, so use it at server or "
                        "<VirtualHost> level%s", err, ap_mrb_phase_names[phase],
                        phase == AP_MRB_TRANSLATE_NAME ? " or in <Location>"
                                                       : "");
}


static const char *
ap_mrb_cmd_hook(cmd_parms *cmd, void *mconfig, const char *file,
    const char *flag)
{
    const ap_mrb_hook_cmd  *hc = cmd->info;
    ap_mrb_dir_conf        *dconf = mconfig;
    const char             *err;

    err = ap_mrb_check_phase_context(cmd, hc->phase);
    if (err != NULL) {
        return err;
    }

    ap_mrb_hook_use(hc->phase, hc->order);
    dconf->used = 1;
    return ap_mrb_file_script(cmd, dconf, file, flag,
                              &dconf->hooks[hc->phase][hc->order]);
}


static const char *
ap_mrb_cmd_hook_code(cmd_parms *cmd, void *mconfig, const char *code)
{
    const ap_mrb_hook_cmd  *hc = cmd->info;
    ap_mrb_dir_conf        *dconf = mconfig;
    const char             *err;

    err = ap_mrb_check_phase_context(cmd, hc->phase);
    if (err != NULL) {
        return err;
    }

    ap_mrb_hook_use(hc->phase, hc->order);
    dconf->used = 1;
    return ap_mrb_code_script(cmd, code, &dconf->hooks[hc->phase][hc->order]);
}


/* post_config and child_init belong to the server process, not a request. */
static const char *
ap_mrb_check_proc_context(cmd_parms *cmd)
{
    const char  *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);

    if (err == NULL) {
        return NULL;
    }

    return apr_psprintf(cmd->pool, "%s: post_config and child_init scripts "
                        "run once per server process, not per virtual host "
                        "or container: use it in the main server config",
                        err);
}


static const char *
ap_mrb_cmd_proc_hook(cmd_parms *cmd, void *mconfig, const char *file,
    const char *flag)
{
    const ap_mrb_hook_cmd  *hc = cmd->info;
    ap_mrb_srv_conf        *sconf;
    const char             *err;

    err = ap_mrb_check_proc_context(cmd);
    if (err != NULL) {
        return err;
    }

    sconf = ap_get_module_config(cmd->server->module_config, &mruby_module);
    return ap_mrb_file_script(cmd, mconfig, file, flag,
                              &sconf->proc_hooks[hc->phase][hc->order]);
}


static const char *
ap_mrb_cmd_proc_hook_code(cmd_parms *cmd, void *mconfig, const char *code)
{
    const ap_mrb_hook_cmd  *hc = cmd->info;
    ap_mrb_srv_conf        *sconf;
    const char             *err;

    err = ap_mrb_check_proc_context(cmd);
    if (err != NULL) {
        return err;
    }

    sconf = ap_get_module_config(cmd->server->module_config, &mruby_module);
    return ap_mrb_code_script(cmd, code,
                              &sconf->proc_hooks[hc->phase][hc->order]);
}


/* "file [cache]" into the per-directory slot at offset cmd->info. */
static const char *
ap_mrb_cmd_file_slot(cmd_parms *cmd, void *mconfig, const char *file,
    const char *flag)
{
    ap_mrb_dir_conf   *dconf = mconfig;
    mrb_script       **slot = (mrb_script **) ((char *) mconfig
                                               + (apr_size_t) cmd->info);

    dconf->used = 1;
    return ap_mrb_file_script(cmd, dconf, file, flag, slot);
}


static const char *
ap_mrb_cmd_handler_code(cmd_parms *cmd, void *mconfig, const char *code)
{
    ap_mrb_dir_conf  *dconf = mconfig;

    dconf->used = 1;
    return ap_mrb_code_script(cmd, code, &dconf->handler_code);
}


static const char *
ap_mrb_cmd_handler_enable(cmd_parms *cmd, void *mconfig, int on)
{
    ap_mrb_dir_conf  *dconf = mconfig;

    dconf->handler_enable = on;
    dconf->used = 1;
    ap_mrb_handler_files |= on;
    return NULL;
}


/* A size in bytes into the apr_off_t field of the directive (cmd->info). */
static const char *
ap_mrb_cmd_limit(cmd_parms *cmd, void *mconfig, const char *arg)
{
    ap_mrb_dir_conf  *dconf = mconfig;
    char             *end;
    apr_off_t         limit;

    if (apr_strtoff(&limit, arg, &end, 10) != APR_SUCCESS || *end != '\0'
        || limit < 0)
    {
        return apr_psprintf(cmd->pool, "%s: expected a number of bytes "
                            "(0 for no limit of ours), not \"%s\"",
                            cmd->cmd->name, arg);
    }

    *(apr_off_t *) ((char *) dconf + (size_t) cmd->info) = limit;
    dconf->used = 1;
    return NULL;
}


/* mrubySlowLog 50ms: a time as Apache's Timeout directives take it, a
 * bare number in milliseconds; 0 turns the log off. */
static const char *
ap_mrb_cmd_slow_log(cmd_parms *cmd, void *mconfig, const char *arg)
{
    ap_mrb_dir_conf       *dconf = mconfig;
    apr_interval_time_t    t;

    if (ap_timeout_parameter_parse(arg, &t, "ms") != APR_SUCCESS || t < 0) {
        return apr_psprintf(cmd->pool, "%s: expected a time such as 50ms, "
                            "2s or 0 (off), not \"%s\"", cmd->cmd->name,
                            arg);
    }

    dconf->slow_ns = (apr_int64_t) t * 1000;
    dconf->used = 1;
    return NULL;
}


apr_off_t
ap_mrb_body_limit(request_rec *r)
{
    ap_mrb_dir_conf  *dconf = ap_get_module_config(r->per_dir_config,
                                                   &mruby_module);

    return dconf->body_limit == AP_MRB_UNSET ? MRB_HTTP_BODY_LIMIT_DEFAULT
                                             : dconf->body_limit;
}


apr_off_t
ap_mrb_filter_limit(request_rec *r)
{
    ap_mrb_dir_conf  *dconf = ap_get_module_config(r->per_dir_config,
                                                   &mruby_module);

    return dconf->filter_limit == AP_MRB_UNSET
           ? MRB_HTTP_FILTER_BODY_LIMIT_DEFAULT : dconf->filter_limit;
}


size_t
ap_mrb_run_memory(request_rec *r)
{
    ap_mrb_dir_conf  *dconf = ap_get_module_config(r->per_dir_config,
                                                   &mruby_module);

    return dconf->run_memory == AP_MRB_UNSET ? MRB_RUN_MEMORY_DEFAULT
                                             : (size_t) dconf->run_memory;
}


uint32_t
ap_mrb_run_timeout(request_rec *r)
{
    ap_mrb_dir_conf  *dconf = ap_get_module_config(r->per_dir_config,
                                                   &mruby_module);

    return dconf->run_timeout_ms == AP_MRB_UNSET
           ? MRB_RUN_TIMEOUT_DEFAULT_MS : (uint32_t) dconf->run_timeout_ms;
}


/* mrubyRunTimeout 1 | 0.25 | 250ms: seconds, or milliseconds with "ms". */
static const char *
ap_mrb_cmd_run_timeout(cmd_parms *cmd, void *mconfig, const char *arg)
{
    ap_mrb_dir_conf  *dconf = mconfig;
    char             *end;
    double            v;

    errno = 0;
    v = strtod(arg, &end);
    if (end != arg && strcmp(end, "ms") == 0) {
        v /= 1000;
    } else if (end != arg && strcmp(end, "s") == 0) {
        end++;
    }

    if (end == arg || (*end != '\0' && strcmp(end, "ms") != 0)
        || errno != 0 || !(v >= 0) || v * 1000 > MRB_RUN_TIMEOUT_MAX_MS)
    {
        return apr_psprintf(cmd->pool, "%s: expected seconds (1, 0.5) or "
                            "milliseconds (250ms), at most a day, 0 for no "
                            "time budget; not \"%s\"", cmd->cmd->name, arg);
    }

    dconf->run_timeout_ms = (long) (v * 1000 + 0.5);
    dconf->used = 1;
    return NULL;
}


static const char *
ap_mrb_cmd_code_cache(cmd_parms *cmd, void *mconfig, const char *arg)
{
    ap_mrb_dir_conf   *dconf = mconfig;
    ap_mrb_srv_conf   *sconf;
    mrb_cache_policy   policy;

    if (mrb_cache_policy_parse(arg, &policy) != 0) {
        return apr_psprintf(cmd->pool, "%s: expected stat, forever or never, "
                            "not \"%s\"", cmd->cmd->name, arg);
    }

    if (cmd->path != NULL) {
        dconf->cache_policy = policy;
        dconf->used = 1;
        return NULL;
    }

    sconf = ap_get_module_config(cmd->server->module_config, &mruby_module);
    sconf->cache_policy = policy;
    return NULL;
}


static const char *
ap_mrb_cmd_stat_on_error(cmd_parms *cmd, void *mconfig, const char *arg)
{
    ap_mrb_srv_conf  *sconf;

    sconf = ap_get_module_config(cmd->server->module_config, &mruby_module);

    if (strcmp(arg, "keep") == 0) {
        sconf->stat_on_error_fail = 0;
    } else if (strcmp(arg, "fail") == 0) {
        sconf->stat_on_error_fail = 1;
    } else {
        return apr_psprintf(cmd->pool, "%s: expected keep or fail, not "
                            "\"%s\"", cmd->cmd->name, arg);
    }

    return NULL;
}


static const char *
ap_mrb_cmd_shared_dict(cmd_parms *cmd, void *mconfig, const char *name,
    const char *size_arg)
{
    const char  *err;
    size_t       size;
    char         buf[MRB_ERR_MSG_LEN];

    err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    if (err != NULL) {
        return apr_psprintf(cmd->pool, "%s: a shared dictionary belongs to "
                            "the whole server: declare it in the main server "
                            "config", err);
    }

    if (mrb_shdict_parse_size(size_arg, &size) != 0) {
        return apr_psprintf(cmd->pool, "%s: invalid size \"%s\" (use e.g. "
                            "65536, 512k or 1m)", cmd->cmd->name, size_arg);
    }

    if (mrb_shdict_zone_add(name, size, buf, sizeof(buf)) != 0) {
        return apr_psprintf(cmd->pool, "%s: %s", cmd->cmd->name, buf);
    }

    return NULL;
}


static const char *
ap_mrb_cmd_cache_dir(cmd_parms *cmd, void *mconfig, const char *arg)
{
    const char       *err;
    ap_mrb_srv_conf  *sconf;

    err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    if (err != NULL) {
        return apr_psprintf(cmd->pool, "%s: the Cache directory belongs to "
                            "the whole server: set it in the main server "
                            "config", err);
    }

    sconf = ap_get_module_config(cmd->server->module_config, &mruby_module);
    sconf->cache_dir = ap_server_root_relative(cmd->pool, arg);

    if (sconf->cache_dir == NULL) {
        return apr_psprintf(cmd->pool, "%s: invalid path \"%s\"",
                            cmd->cmd->name, arg);
    }

    return NULL;
}


/* Directives valid in the server config, <VirtualHost> and containers,
 * but not in .htaccess: a script is code run by the server. */
#define AP_MRB_WHERE  (RSRC_CONF | ACCESS_CONF)

#define AP_MRB_HOOK(name, phase, order)                                       \
    AP_INIT_TAKE12("mruby" name, ap_mrb_cmd_hook,                             \
        &ap_mrb_hook_cmds[phase][order], AP_MRB_WHERE,                        \
        "a Ruby script file and optionally \"cache\""),                      \
    AP_INIT_TAKE1("mruby" name "Code", ap_mrb_cmd_hook_code,                  \
        &ap_mrb_hook_cmds[phase][order], AP_MRB_WHERE,                        \
        "Ruby code, in quotes")

#define AP_MRB_PHASE(name, phase)                                             \
    AP_MRB_HOOK(name "First", phase, AP_MRB_FIRST),                           \
    AP_MRB_HOOK(name "Middle", phase, AP_MRB_MIDDLE),                         \
    AP_MRB_HOOK(name "Last", phase, AP_MRB_LAST)

#define AP_MRB_PROC_HOOK(name, phase, order)                                  \
    AP_INIT_TAKE12("mruby" name, ap_mrb_cmd_proc_hook,                        \
        &ap_mrb_proc_cmds[phase][order], AP_MRB_WHERE,                        \
        "a Ruby script file and optionally \"cache\""),                      \
    AP_INIT_TAKE1("mruby" name "Code", ap_mrb_cmd_proc_hook_code,             \
        &ap_mrb_proc_cmds[phase][order], AP_MRB_WHERE,                        \
        "Ruby code, in quotes")

#define AP_MRB_PROC_PHASE(name, phase)                                        \
    AP_MRB_PROC_HOOK(name "First", phase, AP_MRB_FIRST),                      \
    AP_MRB_PROC_HOOK(name "Middle", phase, AP_MRB_MIDDLE),                    \
    AP_MRB_PROC_HOOK(name "Last", phase, AP_MRB_LAST)

#define AP_MRB_SLOT(name, field, help)                                        \
    AP_INIT_TAKE12(name, ap_mrb_cmd_file_slot,                                \
        (void *) APR_OFFSETOF(ap_mrb_dir_conf, field), AP_MRB_WHERE, help)

const command_rec ap_mrb_cmds[] = {
    AP_MRB_PROC_PHASE("PostConfig", AP_MRB_POST_CONFIG),
    AP_MRB_PROC_PHASE("ChildInit", AP_MRB_CHILD_INIT),

    AP_MRB_PHASE("PostReadRequest", AP_MRB_POST_READ_REQUEST),
    AP_MRB_PHASE("QuickHandler", AP_MRB_QUICK_HANDLER),
    AP_MRB_PHASE("TranslateName", AP_MRB_TRANSLATE_NAME),
    AP_MRB_PHASE("MapToStorage", AP_MRB_MAP_TO_STORAGE),
    AP_MRB_PHASE("AccessChecker", AP_MRB_ACCESS_CHECKER),
    AP_MRB_PHASE("CheckUserId", AP_MRB_CHECK_USER_ID),
    AP_MRB_PHASE("AuthChecker", AP_MRB_AUTH_CHECKER),
    AP_MRB_PHASE("Fixups", AP_MRB_FIXUPS),
    AP_MRB_PHASE("InsertFilter", AP_MRB_INSERT_FILTER),
    AP_MRB_PHASE("Handler", AP_MRB_HANDLER),
    AP_MRB_PHASE("LogTransaction", AP_MRB_LOG_TRANSACTION),

    /* the original accepted a bare mrubyHandler (and never ran it): here
     * it is the handler script a reader of the configuration expects */
    AP_INIT_TAKE12("mrubyHandler", ap_mrb_cmd_hook,
        &ap_mrb_hook_cmds[AP_MRB_HANDLER][AP_MRB_MIDDLE], AP_MRB_WHERE,
        "a Ruby script file and optionally \"cache\" (as "
        "mrubyHandlerMiddle)"),

    AP_INIT_TAKE1("mrubyHandlerCode", ap_mrb_cmd_handler_code, NULL,
        AP_MRB_WHERE, "Ruby code run for requests whose handler is "
        AP_MRB_HANDLER_NATIVE),
    AP_INIT_FLAG("mrubyHandlerEnable", ap_mrb_cmd_handler_enable, NULL,
        AP_MRB_WHERE, "On to run requested files whose handler is "
        AP_MRB_HANDLER_SCRIPT " as Ruby scripts"),

    AP_MRB_SLOT("mrubyAuthnCheckPassword", authn_check_password,
        "a Ruby script file (and optionally \"cache\") that checks a "
        "password for AuthBasicProvider mruby"),
    AP_MRB_SLOT("mrubyAuthnGetRealmHash", authn_get_realm_hash,
        "a Ruby script file (and optionally \"cache\") that gives the realm "
        "hash for AuthDigestProvider mruby"),
    AP_MRB_SLOT("mrubyOutputFilter", output_filter,
        "a Ruby script file (and optionally \"cache\") for SetOutputFilter "
        AP_MRB_FILTER_NAME),
    AP_MRB_SLOT("mrubyInputFilter", input_filter,
        "a Ruby script file (and optionally \"cache\") for SetInputFilter "
        AP_MRB_FILTER_NAME),

    AP_INIT_TAKE1("mrubyRequestBodyLimit", ap_mrb_cmd_limit,
        (void *) APR_OFFSETOF(ap_mrb_dir_conf, body_limit), AP_MRB_WHERE,
        "the most request body bytes a script reads (r.body, "
        "mrubyInputFilter); more is answered with 413"),
    AP_INIT_TAKE1("mrubyRunTimeout", ap_mrb_cmd_run_timeout, NULL,
        AP_MRB_WHERE, "the time each script run may take, waits not "
        "counted (seconds, or 250ms; 0: none); past it the run is stopped "
        "with a 500"),
    AP_INIT_TAKE1("mrubyOutputFilterLimit", ap_mrb_cmd_limit,
        (void *) APR_OFFSETOF(ap_mrb_dir_conf, filter_limit), AP_MRB_WHERE,
        "the most response body bytes mrubyOutputFilter holds for its "
        "script; a larger response is answered with 500"),
    AP_INIT_TAKE1("mrubySlowLog", ap_mrb_cmd_slow_log, NULL, AP_MRB_WHERE,
        "a time (50ms, 2s): a script run longer logs one line with its "
        "time in Ruby and its time waiting; 0: off (the default)"),
    AP_INIT_TAKE1("mrubyRunMemory", ap_mrb_cmd_limit,
        (void *) APR_OFFSETOF(ap_mrb_dir_conf, run_memory), AP_MRB_WHERE,
        "the most bytes a run of a script allocates and keeps; past it "
        "the script gets NoMemoryError and the request 500"),
    AP_INIT_TAKE1("mrubyCodeCache", ap_mrb_cmd_code_cache, NULL, AP_MRB_WHERE,
        "stat, forever or never: how file scripts declared after it are "
        "cached"),
    AP_INIT_TAKE1("mrubyStatOnError", ap_mrb_cmd_stat_on_error, NULL,
        RSRC_CONF, "keep (the default) or fail: whether a `stat` script "
        "whose file no longer compiles goes on running its last version"),
    AP_INIT_TAKE2("mrubySharedDict", ap_mrb_cmd_shared_dict, NULL, AP_MRB_WHERE,
        "a name and a size: a dictionary shared by all server processes"),
    AP_INIT_TAKE1("mrubyCacheDir", ap_mrb_cmd_cache_dir, NULL, RSRC_CONF,
        "the directory of the files of Cache.new(namespace: ...) (default: "
        AP_MRB_CACHE_DIR " in DefaultRuntimeDir)"),

    { NULL }
};
