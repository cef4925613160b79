/*
 * mod_mruby: the Apache adapter of the mruby core.
 *
 * This header is shared by the files of src/apache only.  The core
 * (src/core) never sees Apache types; this adapter maps Apache's phases,
 * configuration and request objects onto it.
 */

#ifndef AP_MRB_H
#define AP_MRB_H

#include <apr_strings.h>
#include <httpd.h>
#include <http_config.h>
#include <http_log.h>
#include <util_filter.h>

#include <mruby.h>

#include "mrb_api.h"
#include "mrb_errbuf.h"
#include "mrb_http_check.h"
#include "mrb_interp.h"
#include "mrb_script.h"

#define MOD_MRUBY_VERSION  "1.0.0"

/* Handler names a user puts in SetHandler / AddHandler. */
#define AP_MRB_HANDLER_SCRIPT  "mruby-script"
#define AP_MRB_HANDLER_NATIVE  "mruby-native-script"
#define AP_MRB_HANDLER_METRICS "mruby-metrics"

/* Filter name for SetOutputFilter / SetInputFilter. */
#define AP_MRB_FILTER_NAME     "mruby"

extern module AP_MODULE_DECLARE_DATA mruby_module;
extern const mrb_server ap_mrb_server;

/* Request phases that take scripts from the per-directory configuration. */
typedef enum {
    AP_MRB_POST_READ_REQUEST = 0,
    AP_MRB_QUICK_HANDLER,
    AP_MRB_TRANSLATE_NAME,
    AP_MRB_MAP_TO_STORAGE,
    AP_MRB_ACCESS_CHECKER,
    AP_MRB_CHECK_USER_ID,
    AP_MRB_AUTH_CHECKER,
    AP_MRB_FIXUPS,
    AP_MRB_INSERT_FILTER,
    AP_MRB_HANDLER,
    AP_MRB_LOG_TRANSACTION,
    AP_MRB_NPHASES
} ap_mrb_phase;

/* Process phases: scripts of the main server only. */
typedef enum {
    AP_MRB_POST_CONFIG = 0,
    AP_MRB_CHILD_INIT,
    AP_MRB_NPROC_PHASES
} ap_mrb_proc_phase;

/* Hook order, as APR_HOOK_FIRST / MIDDLE / LAST. */
typedef enum {
    AP_MRB_FIRST = 0,
    AP_MRB_MIDDLE,
    AP_MRB_LAST,
    AP_MRB_NORDERS
} ap_mrb_order;

#define AP_MRB_UNSET  -1

/*
 * Kept out of line: a hot function that calls it only on some paths then
 * makes no stack frame on the others (gcc would inline it and save the
 * registers it needs on entry, whatever the path).
 */
#define AP_MRB_NOINLINE  __attribute__((noinline))

/*
 * Per-directory configuration (server, virtual host, <Directory>,
 * <Location>, <Files>).  A NULL script or AP_MRB_UNSET flag is inherited
 * from the enclosing context when configurations are merged.
 */
typedef struct {
    int          used;                /* a directive of ours set something */
    mrb_script  *hooks[AP_MRB_NPHASES][AP_MRB_NORDERS];
    mrb_script  *handler_code;        /* mrubyHandlerCode */
    mrb_script  *output_filter;       /* mrubyOutputFilter */
    mrb_script  *input_filter;        /* mrubyInputFilter */
    mrb_script  *authn_check_password;
    mrb_script  *authn_get_realm_hash;
    int          handler_enable;      /* mrubyHandlerEnable */
    int          cache_policy;        /* mrubyCodeCache, an mrb_cache_policy */
    apr_off_t    body_limit;          /* mrubyRequestBodyLimit; 0: none */
    apr_off_t    filter_limit;        /* mrubyOutputFilterLimit; 0: none */
    apr_int64_t  slow_ns;             /* mrubySlowLog; 0: off */
    apr_off_t    run_memory;          /* mrubyRunMemory; 0: none */
    long         run_timeout_ms;      /* mrubyRunTimeout; 0: none */
} ap_mrb_dir_conf;

/* Per-server configuration. */
typedef struct {
    mrb_script  *proc_hooks[AP_MRB_NPROC_PHASES][AP_MRB_NORDERS];
    int          cache_policy;        /* mrubyCodeCache at server level */
    int          stat_on_error_fail;  /* mrubyStatOnError fail (1), keep (0);
                                         a virtual host without one takes
                                         the main server's at post_config */
    const char  *cache_dir;           /* mrubyCacheDir (main server), or
                                         NULL: AP_MRB_CACHE_DIR */
} ap_mrb_srv_conf;

/* Where Cache.new(namespace:) keeps its files unless mrubyCacheDir says,
 * under DefaultRuntimeDir: a run directory is a tmpfs, so the files are
 * memory, not disk. */
#define AP_MRB_CACHE_DIR  "mruby-cache"

/*
 * What a filter or authn provider run carries in mrb_run_rec.data, so that the
 * Ruby classes of that kind of run find their state.  Every such structure
 * starts with its kind.
 */
typedef enum {
    AP_MRB_RUN_OUTPUT_FILTER = 1,
    AP_MRB_RUN_INPUT_FILTER,
    AP_MRB_RUN_AUTHN
} ap_mrb_run_kind;

/* A content handler's script waiting on the event MPM (ap_mrb_wait.c). */
typedef struct ap_mrb_waiter_s  ap_mrb_waiter;

/* What a request keeps for its scripts (request_config, request pool). */
typedef struct {
    ap_mrb_waiter *waiter;       /* its handler's script waits, or did */
    char        *body;           /* the request body, once read */
    apr_size_t   body_len;
    int          body_status;    /* why reading the body failed (413) */
    unsigned     body_read:1;
    unsigned     cgi_env:1;      /* CGI variables added to subprocess_env */
} ap_mrb_req_ctx;

/* config */
extern const command_rec ap_mrb_cmds[];
void *ap_mrb_create_dir_conf(apr_pool_t *p, char *dir);
void *ap_mrb_merge_dir_conf(apr_pool_t *p, void *basev, void *addv);
void *ap_mrb_create_srv_conf(apr_pool_t *p, server_rec *s);
void *ap_mrb_merge_srv_conf(apr_pool_t *p, void *basev, void *addv);
/* The most request body bytes a script is given (0: no limit of ours). */
apr_off_t ap_mrb_body_limit(request_rec *r);

/* mrubyOutputFilterLimit of r's configuration, or its default: 0 is none. */
apr_off_t ap_mrb_filter_limit(request_rec *r);

/* mrubyRunMemory of r's configuration, or its default: 0 is none. */
size_t ap_mrb_run_memory(request_rec *r);
/* mrubyRunTimeout of r's configuration in ms, or its default: 0 is none. */
uint32_t ap_mrb_run_timeout(request_rec *r);
mrb_cache_policy ap_mrb_cache_policy(const ap_mrb_dir_conf *dconf,
    server_rec *s);
/* Gives each virtual host without mrubyStatOnError the main server's. */
void ap_mrb_srv_conf_inherit(server_rec *main_server);

/* file watch: logs what the configuration's `stat` scripts need of inotify. */
void ap_mrb_file_watch_limits(server_rec *s);
/* Starts the child's watcher thread when `stat` scripts may run; it stops
 * with pchild (joined when the MPM is threaded). */
void ap_mrb_file_watch_child_init(apr_pool_t *pchild, server_rec *s,
    int threaded);
/* Set by mrubyHandlerEnable On: files named at request time may run. */
extern int ap_mrb_handler_files;

/* metrics: the mruby-metrics handler (mrb_metrics.h) */
int ap_mrb_metrics_handler(request_rec *r);

/* hooks: registration, and runs in an interpreter lent by the process */
void ap_mrb_register_request_hooks(void);
/* Registers the hook of a phase and order that a directive uses. */
void ap_mrb_hook_use(ap_mrb_phase phase, ap_mrb_order order);
/* An idle or new interpreter (mrb_interp_take), or NULL after logging why;
 * the caller gives it back with mrb_interp_give_back. */
mrb_interp *ap_mrb_interp_take(request_rec *r);
/* Runs one script for r in a borrowed interpreter: an Apache code.  phase
 * (a static string) labels its metrics, what names it in error lines. */
int ap_mrb_run_script(request_rec *r, mrb_script *script, void *data,
    mrb_int default_result, const char *phase, const char *what);
void ap_mrb_run_startup_scripts(mrb_interp *interp, server_rec *s,
    ap_mrb_proc_phase phase);
/* What the hook returns to Apache for a run that ended with rc (0 or -1):
 * the script's answer, or the error's status after logging it. */
int ap_mrb_run_result(request_rec *r, mrb_script *script, mrb_run_rec *run,
    int rc, mrb_int default_result, const char *what);

/* wait: content handlers that give their thread back while they wait */
void ap_mrb_register_wait_hooks(void);
/* Asks the MPM whether it can suspend a request (the event MPM). */
void ap_mrb_wait_child_init(apr_pool_t *pchild);
/* Whether a content handler of r may suspend (run.may_wait). */
int ap_mrb_wait_possible(request_rec *r);
/* mrb_server.wake_after */
int ap_mrb_wake_after(mrb_run_rec *run, mrb_int msec);
/* mrb_server.wake_on_fd */
int ap_mrb_wake_on_fd(mrb_run_rec *run, int fd, int events, mrb_int msec,
    int *ready);
/* After MRB_RUN_WAITING from a handler run in interp (given back already):
 * keeps what the callback needs; returns SUSPENDED for the handler. */
int ap_mrb_wait_begin(request_rec *r, mrb_interp *interp, mrb_run_rec *run,
    mrb_script *script, const char *what);

/* filters and authn provider */
void ap_mrb_register_filters(void);
void ap_mrb_register_authn_provider(apr_pool_t *p);

/* Ruby classes, defined into each interpreter under the Apache class */
void ap_mrb_define_apache(mrb_state *mrb, struct RClass *apache);
void ap_mrb_define_request(mrb_state *mrb, struct RClass *apache);
void ap_mrb_define_tables(mrb_state *mrb, struct RClass *apache);
void ap_mrb_define_server(mrb_state *mrb, struct RClass *apache);
void ap_mrb_define_connection(mrb_state *mrb, struct RClass *apache);
void ap_mrb_define_finfo(mrb_state *mrb, struct RClass *apache);
void ap_mrb_define_scoreboard(mrb_state *mrb, struct RClass *apache);
void ap_mrb_define_filter(mrb_state *mrb, struct RClass *apache);
void ap_mrb_define_authn(mrb_state *mrb, struct RClass *apache);

/* helpers for the Ruby classes */
request_rec *ap_mrb_request(mrb_state *mrb);
ap_mrb_req_ctx *ap_mrb_req_ctx_get(request_rec *r);
void *ap_mrb_run_data(mrb_state *mrb, ap_mrb_run_kind kind,
    const char *class_name);
mrb_value ap_mrb_str(mrb_state *mrb, const char *s);
/* The C string field at offset of base (a field getter's, mrb_api.h) as
 * ap_mrb_str gives it: nil for NULL. */
mrb_value ap_mrb_str_at(mrb_state *mrb, const void *base, size_t offset);

/* getter: the getter of an mrb_api_field table's C string fields of the
 * struct that base(mrb) returns (which raises where there is none). */
#define AP_MRB_STR_FIELD_GETTER(getter, base)                                 \
    static mrb_value                                                          \
    getter(mrb_state *mrb, mrb_value self)                                    \
    {                                                                         \
        size_t  offset = mrb_api_field_offset(mrb);                           \
                                                                              \
        return ap_mrb_str_at(mrb, base(mrb), offset);                         \
    }
char *ap_mrb_pstr(mrb_state *mrb, apr_pool_t *p, mrb_value str);
int ap_mrb_filter_write(void *data, const char *buf, size_t len);

#endif /* AP_MRB_H */
