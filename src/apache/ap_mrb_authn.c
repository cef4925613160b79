/*
 * The authn provider "mruby" (AuthBasicProvider mruby, AuthDigestProvider
 * mruby) and Apache::AuthnProvider, through which its scripts see the user,
 * password and realm and answer with Apache.return AUTH_*.
 *
 *   mrubyAuthnCheckPassword  basic: is this password right for this user?
 *                            default answer AUTH_DENIED
 *   mrubyAuthnGetRealmHash   digest: set rethash = md5("user:realm:pw")
 *                            and answer AUTH_USER_FOUND; default
 *                            AUTH_USER_NOT_FOUND
 */

#include <stddef.h>

#include <http_core.h>
#include <http_request.h>
#include <ap_provider.h>
#include <mod_auth.h>

#include <mruby.h>
#include <mruby/string.h>

#include "ap_mrb.h"

APLOG_USE_MODULE(mruby);

typedef struct {
    ap_mrb_run_kind   kind;       /* first: what run->data points to */
    request_rec      *r;
    const char       *user;
    const char       *password;   /* basic only */
    const char       *realm;
    char             *rethash;    /* digest: what the script set */
} ap_mrb_authn_ctx;


static authn_status
ap_mrb_authn_run(request_rec *r, mrb_script *script, ap_mrb_authn_ctx *ctx,
    authn_status default_result, const char *what)
{
    mrb_interp       *interp;
    mrb_run_rec       run;
    int               rc;
    ap_mrb_srv_conf  *sconf;

    if (script == NULL) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "authn provider mruby "
                      "used without %s here", what);
        return AUTH_GENERAL_ERROR;
    }

    interp = ap_mrb_interp_take(r);
    if (interp == NULL) {
        return AUTH_GENERAL_ERROR;
    }

    mrb_run_init(&run, r, default_result);
    run.data = ctx;
    run.phase = "authn";
    sconf = ap_get_module_config(r->server->module_config, &mruby_module);
    run.stat_on_error_fail = sconf->stat_on_error_fail == 1;
    run.memory_limit = ap_mrb_run_memory(r);
    run.timeout_ms = ap_mrb_run_timeout(r);

    rc = mrb_script_run(interp, script, &run);
    mrb_interp_give_back(interp);

    if (rc != 0) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "%s: %s", what, run.error);
        return AUTH_GENERAL_ERROR;
    }

    if (run.result < AUTH_DENIED || run.result > AUTH_GENERAL_ERROR) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "%s: %s returned %ld, "
                      "not an Apache::AuthnProvider::AUTH_* value", what,
                      mrb_script_name(script), (long) run.result);
        return AUTH_GENERAL_ERROR;
    }

    return (authn_status) run.result;
}


static authn_status
ap_mrb_check_password(request_rec *r, const char *user, const char *password)
{
    ap_mrb_dir_conf   *dconf = ap_get_module_config(r->per_dir_config,
                                                    &mruby_module);
    ap_mrb_authn_ctx   ctx = { AP_MRB_RUN_AUTHN, r, user, password,
                               ap_auth_name(r), NULL };

    return ap_mrb_authn_run(r, dconf->authn_check_password, &ctx,
                            AUTH_DENIED, "mrubyAuthnCheckPassword");
}


static authn_status
ap_mrb_get_realm_hash(request_rec *r, const char *user, const char *realm,
    char **rethash)
{
    ap_mrb_dir_conf   *dconf = ap_get_module_config(r->per_dir_config,
                                                    &mruby_module);
    ap_mrb_authn_ctx   ctx = { AP_MRB_RUN_AUTHN, r, user, NULL, realm, NULL };
    authn_status       rc;

    rc = ap_mrb_authn_run(r, dconf->authn_get_realm_hash, &ctx,
                          AUTH_USER_NOT_FOUND, "mrubyAuthnGetRealmHash");

    if (rc == AUTH_USER_FOUND && ctx.rethash == NULL) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "mrubyAuthnGetRealmHash: "
                      "AUTH_USER_FOUND without setting rethash");
        return AUTH_GENERAL_ERROR;
    }

    *rethash = ctx.rethash;
    return rc;
}


static const authn_provider ap_mrb_authn_provider = {
    ap_mrb_check_password,
    ap_mrb_get_realm_hash
};


void
ap_mrb_register_authn_provider(apr_pool_t *p)
{
    ap_register_auth_provider(p, AUTHN_PROVIDER_GROUP, "mruby",
                              AUTHN_PROVIDER_VERSION, &ap_mrb_authn_provider,
                              AP_AUTH_INTERNAL_PER_CONF);
}


/* Apache::AuthnProvider */

static ap_mrb_authn_ctx *
ap_mrb_authn_of(mrb_state *mrb)
{
    return ap_mrb_run_data(mrb, AP_MRB_RUN_AUTHN, "Apache::AuthnProvider");
}


/* user, password, realm, rethash: the field at the getter's offset */
AP_MRB_STR_FIELD_GETTER(ap_mrb_authn_str_field, ap_mrb_authn_of)


static mrb_value
ap_mrb_authn_set_rethash(mrb_state *mrb, mrb_value self)
{
    ap_mrb_authn_ctx  *ctx = ap_mrb_authn_of(mrb);
    mrb_value          s;

    mrb_get_args(mrb, "S", &s);
    ctx->rethash = ap_mrb_pstr(mrb, ctx->r->pool, s);
    return s;
}


#define AP_MRB_AUTHN_FIELD(name, set)                                         \
    { #name, ap_mrb_authn_str_field, set, offsetof(ap_mrb_authn_ctx, name) }

static const mrb_api_field  ap_mrb_authn_fields[] = {
    AP_MRB_AUTHN_FIELD(user, NULL),
    AP_MRB_AUTHN_FIELD(password, NULL),
    AP_MRB_AUTHN_FIELD(realm, NULL),
    AP_MRB_AUTHN_FIELD(rethash, ap_mrb_authn_set_rethash),
    MRB_API_FIELD_END
};


static const mrb_api_const  ap_mrb_authn_results[] = {
    { "AUTH_DENIED", AUTH_DENIED },
    { "AUTH_GRANTED", AUTH_GRANTED },
    { "AUTH_USER_FOUND", AUTH_USER_FOUND },
    { "AUTH_USER_NOT_FOUND", AUTH_USER_NOT_FOUND },
    { "AUTH_GENERAL_ERROR", AUTH_GENERAL_ERROR },
    MRB_API_CONST_END
};


void
ap_mrb_define_authn(mrb_state *mrb, struct RClass *apache)
{
    struct RClass  *c;

    c = mrb_api_define_class(mrb, apache, "AuthnProvider", NULL, NULL);
    mrb_api_define_fields(mrb, c, ap_mrb_authn_fields);
    mrb_api_define_consts(mrb, c, ap_mrb_authn_results);
}
