/*
 * mruby_set / mruby_set_code: a variable whose value is the last value of
 * a script, computed by the rewrite phase of its block when the script
 * may wait, else when the variable is first used in a request; and
 * Nginx::Var, the request's variables seen from Ruby.
 */

#include "ngx_http_mruby_module.h"

#include <mruby/class.h>
#include <mruby/string.h>


static ngx_int_t ngx_http_mruby_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


char *
ngx_http_mruby_set(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_mruby_loc_conf_t *mlcf = conf;

    char                        *rv;
    ngx_str_t                   *value, name;
    ngx_int_t                    index;
    ngx_http_variable_t         *v;
    ngx_http_mruby_set_t        *set;
    ngx_http_mruby_main_conf_t  *mmcf;

    value = cf->args->elts;
    name = value[1];

    if (name.len < 2 || name.data[0] != '$') {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid variable name \"%V\"", &name);
        return NGX_CONF_ERROR;
    }

    name.len--;
    name.data++;

    v = ngx_http_add_variable(cf, &name, NGX_HTTP_VAR_CHANGEABLE);
    if (v == NULL) {
        return NGX_CONF_ERROR;
    }

    index = ngx_http_get_variable_index(cf, &name);
    if (index == NGX_ERROR) {
        return NGX_CONF_ERROR;
    }

    /* "set" gives a variable a handler that warns: ours computes it */

    v->get_handler = ngx_http_mruby_variable;
    v->data = (uintptr_t) index;

    if (mlcf->sets == NULL) {
        mlcf->sets = ngx_array_create(cf->pool, 1,
                                      sizeof(ngx_http_mruby_set_t));
        if (mlcf->sets == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    set = ngx_array_push(mlcf->sets);
    if (set == NULL) {
        return NGX_CONF_ERROR;
    }

    set->index = (ngx_uint_t) index;

    rv = ngx_mruby_conf_script(cf, &value[2], cf->args->nelts - 2,
                               ngx_http_mruby_cmd_code(cmd->post),
                               &set->script);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    mmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_mruby_module);
    mmcf->common.enabled = 1;

    /* where a script that may wait is run (ngx_http_mruby_sets_run) */
    mmcf->handlers |= 1 << NGX_HTTP_MRUBY_SERVER_REWRITE
                      | 1 << NGX_HTTP_MRUBY_REWRITE;

    return NGX_CONF_OK;
}


static ngx_http_mruby_set_t *
ngx_http_mruby_set_find(ngx_array_t *sets, ngx_uint_t index)
{
    ngx_uint_t             i;
    ngx_http_mruby_set_t  *set;

    if (sets == NULL) {
        return NULL;
    }

    set = sets->elts;

    for (i = 0; i < sets->nelts; i++) {
        if (set[i].index == index) {
            return &set[i];
        }
    }

    return NULL;
}


/* Creates the waiting file scripts of a block's variables. */
static ngx_int_t
ngx_http_mruby_resolve_sets(ngx_conf_t *cf, ngx_http_mruby_loc_conf_t *lcf)
{
    ngx_uint_t             i;
    ngx_http_mruby_set_t  *set;

    if (lcf->sets == NULL) {
        return NGX_OK;
    }

    set = lcf->sets->elts;

    for (i = 0; i < lcf->sets->nelts; i++) {
        if (ngx_mruby_script_resolve(cf, set[i].script, lcf->cache)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * A block's variables are its own and those of the blocks around it that
 * it does not set again.
 */
char *
ngx_http_mruby_merge_sets(ngx_conf_t *cf, ngx_http_mruby_loc_conf_t *prev,
    ngx_http_mruby_loc_conf_t *conf)
{
    ngx_uint_t             i;
    ngx_http_mruby_set_t  *set, *own;

    if (ngx_http_mruby_resolve_sets(cf, prev) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (conf->sets == NULL) {
        conf->sets = prev->sets;
        return NGX_CONF_OK;
    }

    if (ngx_http_mruby_resolve_sets(cf, conf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (prev->sets == NULL || prev->sets == conf->sets) {
        return NGX_CONF_OK;
    }

    set = prev->sets->elts;

    for (i = 0; i < prev->sets->nelts; i++) {
        if (ngx_http_mruby_set_find(conf->sets, set[i].index) != NULL) {
            continue;
        }

        own = ngx_array_push(conf->sets);
        if (own == NULL) {
            return NGX_CONF_ERROR;
        }

        *own = set[i];
    }

    return NGX_CONF_OK;
}


/*
 * A set script's run has ended: its value (a String: to_s) into v, or v not
 * found when the run failed (logged).  run->value is protected in the
 * caller's GC arena.
 */
static void
ngx_http_mruby_set_store(ngx_http_request_t *r, mrb_state *mrb, int failed,
    mrb_run_rec *run, ngx_http_variable_value_t *v)
{
    ngx_str_t  s;
    mrb_value  value;

    v->valid = 0;
    v->not_found = 1;

    if (failed) {
        return;
    }

    /* an exception here must not reach the script that read the variable:
     * it would jump over nginx's restore of its variable depth */
    if (mrb_run_value_string(mrb, run, &value) != 0) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "mruby_set: the value's to_s failed: %s", run->error);
        return;
    }

    if (ngx_http_mruby_pstr(r->pool, value, &s) != NGX_OK) {
        return;
    }

    v->data = s.data;
    v->len = s.len;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
}


/* Runs set's script for r with data (the phase NGX_HTTP_MRUBY_SET): as
 * ngx_http_mruby_run.  The script may wait when data is the ctx's. */
static ngx_int_t
ngx_http_mruby_set_run(ngx_http_request_t *r, ngx_http_mruby_set_t *set,
    ngx_http_mruby_run_data_t *data, mrb_run_rec *run)
{
    ngx_memzero(data, sizeof(ngx_http_mruby_run_data_t));
    data->phase = NGX_HTTP_MRUBY_SET;
    data->ctx = ngx_http_mruby_get_ctx(r);

    return ngx_http_mruby_run(r, set->script, data, run, NGX_DECLINED);
}


/*
 * The variable read before its block's rewrite phase ran its script (or
 * whose script names nothing that waits): computed now, on the stack of
 * whatever reads it, where the script cannot wait.
 */
static ngx_int_t
ngx_http_mruby_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v,
    uintptr_t data)
{
    int                         ai;
    mrb_run_rec                 run;
    mrb_state                  *mrb;
    ngx_int_t                   rc;
    mrb_interp                 *interp;
    ngx_http_mruby_set_t       *set;
    ngx_http_mruby_loc_conf_t  *mlcf;
    ngx_http_mruby_run_data_t   rd;

    mlcf = ngx_http_get_module_loc_conf(r, ngx_http_mruby_module);

    set = ngx_http_mruby_set_find(mlcf->sets, (ngx_uint_t) data);
    if (set == NULL) {
        v->not_found = 1;  /* no mruby_set for it here */
        return NGX_OK;
    }

    interp = ngx_mruby_interp(&ngx_http_mruby_process, r->connection->log);
    if (interp == NULL) {
        return NGX_ERROR;
    }

    mrb = mrb_interp_state(interp);
    ai = mrb_gc_arena_save(mrb);

    rc = ngx_http_mruby_set_run(r, set, &rd, &run);
    ngx_http_mruby_set_store(r, mrb, rc != NGX_OK, &run, v);

    mrb_gc_arena_restore(mrb, ai);

    return v->valid ? NGX_OK : NGX_ERROR;
}


/*
 * The block's mruby_set scripts that name something that waits (Async.sleep,
 * a sub_request, Redis: mrb_script_names_wait) are run by the block's
 * rewrite phase handler (server rewrite for a server's, rewrite for a
 * location's), after its mruby_(server_)rewrite_handler script and before
 * nginx's rewrite directives of the block run, as the original's set
 * handlers ran in that phase: there the request waits while the script
 * does.  The others are computed when the variable is first read.
 * NGX_DECLINED once each has its value, NGX_DONE while one waits, or an
 * error status.
 */
ngx_int_t
ngx_http_mruby_sets_run(ngx_http_request_t *r, ngx_http_mruby_ctx_t *ctx,
    ngx_http_mruby_phase_e phase)
{
    int                         ai;
    ngx_int_t                   rc;
    ngx_uint_t                  i;
    mrb_run_rec                 run;
    mrb_state                  *mrb;
    mrb_interp                 *interp;
    ngx_http_mruby_set_t       *set;
    ngx_http_variable_value_t  *v;
    ngx_http_mruby_loc_conf_t  *mlcf;

    mlcf = ngx_http_get_module_loc_conf(r, ngx_http_mruby_module);

    if (mlcf->sets == NULL) {
        return NGX_DECLINED;
    }

    interp = ngx_mruby_interp(&ngx_http_mruby_process, r->connection->log);
    if (interp == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    set = mlcf->sets->elts;

    for (i = 0; i < mlcf->sets->nelts; i++) {
        v = &r->variables[set[i].index];

        if (v->valid || v->not_found
            || !mrb_script_names_wait(interp, set[i].script->script))
        {
            continue;
        }

        mrb = mrb_interp_state(interp);
        ai = mrb_gc_arena_save(mrb);

        rc = ngx_http_mruby_set_run(r, &set[i], &ctx->data, &run);

        if (rc == NGX_AGAIN) {
            mrb_gc_arena_restore(mrb, ai);
            ctx->wait_set = &set[i];
            return ngx_http_mruby_wait_begin(r, ctx, phase, &run);
        }

        ngx_http_mruby_set_store(r, mrb, rc != NGX_OK, &run, v);
        mrb_gc_arena_restore(mrb, ai);
    }

    return NGX_DECLINED;
}


void
ngx_http_mruby_set_ended(ngx_http_request_t *r, ngx_http_mruby_ctx_t *ctx,
    mrb_state *mrb, int rc, mrb_run_rec *out)
{
    if (rc != 0) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0, "%s: %s",
                      ngx_http_mruby_process.name, out->error);
    }

    ngx_http_mruby_set_store(r, mrb, rc != 0, out,
                             &r->variables[ctx->wait_set->index]);
}


/* Nginx::Var */


static ngx_str_t
ngx_http_mruby_var_name(mrb_state *mrb, ngx_http_request_t *r,
    const char *name, size_t len)
{
    ngx_str_t  s;

    s.data = ngx_pnalloc(r->pool, len);
    if (s.data == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "out of memory");
    }

    s.len = len;
    ngx_strlow(s.data, (u_char *) name, len);

    return s;
}


/* $name (lower case) of r as a String, or nil. */
mrb_value
ngx_http_mruby_var_value(mrb_state *mrb, ngx_http_request_t *r,
    ngx_str_t *name)
{
    ngx_http_variable_value_t  *vv;

    vv = ngx_http_get_variable(r, name, ngx_hash_key(name->data, name->len));

    if (vv == NULL || vv->not_found) {
        return mrb_nil_value();
    }

    return mrb_str_new(mrb, (const char *) vv->data, (mrb_int) vv->len);
}


static mrb_value
ngx_http_mruby_var_get(mrb_state *mrb, ngx_http_request_t *r,
    const char *name, size_t len)
{
    ngx_str_t  key;

    key = ngx_http_mruby_var_name(mrb, r, name, len);

    return ngx_http_mruby_var_value(mrb, r, &key);
}


/* Sets $name, which the configuration declared (set, mruby_set, map...). */
static void
ngx_http_mruby_var_put(mrb_state *mrb, ngx_http_request_t *r,
    const char *name, size_t len, mrb_value value)
{
    ngx_str_t                   key, s;
    ngx_http_variable_t        *v;
    ngx_http_variable_value_t  *vv;
    ngx_http_core_main_conf_t  *cmcf;

    key = ngx_http_mruby_var_name(mrb, r, name, len);
    value = mrb_obj_as_string(mrb, value);

    cmcf = ngx_http_get_module_main_conf(r, ngx_http_core_module);

    v = ngx_hash_find(&cmcf->variables_hash, ngx_hash_key(key.data, key.len),
                      key.data, key.len);

    if (v == NULL) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR,
                   "variable $%s is not declared in the configuration "
                   "(e.g. with \"set $%s '';\")",
                   mrb_str_to_cstr(mrb, ngx_http_mruby_str(mrb, &key)),
                   mrb_str_to_cstr(mrb, ngx_http_mruby_str(mrb, &key)));
    }

    if (!(v->flags & NGX_HTTP_VAR_CHANGEABLE)) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR, "variable $%s cannot be changed",
                   mrb_str_to_cstr(mrb, ngx_http_mruby_str(mrb, &key)));
    }

    if (ngx_http_mruby_pstr(r->pool, value, &s) != NGX_OK) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "out of memory");
    }

    if (v->set_handler != NULL) {
        vv = ngx_pcalloc(r->pool, sizeof(ngx_http_variable_value_t));
        if (vv == NULL) {
            mrb_raise(mrb, E_RUNTIME_ERROR, "out of memory");
        }

        vv->valid = 1;
        vv->data = s.data;
        vv->len = s.len;

        v->set_handler(r, vv, v->data);
        return;
    }

    if (!(v->flags & NGX_HTTP_VAR_INDEXED)) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR,
                   "variable $%s cannot be set from mruby",
                   mrb_str_to_cstr(mrb, ngx_http_mruby_str(mrb, &key)));
    }

    vv = &r->variables[v->index];

    vv->valid = 1;
    vv->not_found = 0;
    vv->no_cacheable = 0;
    vv->data = s.data;
    vv->len = s.len;
}


/* var.name reads $name, var.name = value sets it. */
static mrb_value
ngx_http_mruby_var_method_missing(mrb_state *mrb, mrb_value self)
{
    mrb_sym              sym;
    mrb_int              argc, len;
    mrb_value           *argv;
    const char          *name;
    ngx_http_request_t  *r;

    mrb_get_args(mrb, "n*", &sym, &argv, &argc);

    r = ngx_http_mruby_request(mrb);
    name = mrb_sym_name_len(mrb, sym, &len);

    if (len > 1 && name[len - 1] == '=') {
        if (argc != 1) {
            mrb_raise(mrb, E_ARGUMENT_ERROR, "wrong number of arguments");
        }

        ngx_http_mruby_var_put(mrb, r, name, (size_t) len - 1, argv[0]);
        return argv[0];
    }

    if (argc != 0) {
        mrb_raisef(mrb, E_NOMETHOD_ERROR, "undefined method '%n' for %v",
                   sym, self);
    }

    return ngx_http_mruby_var_get(mrb, r, name, (size_t) len);
}


static mrb_value
ngx_http_mruby_var_set(mrb_state *mrb, mrb_value self)
{
    mrb_value            name, value;
    ngx_http_request_t  *r;

    mrb_get_args(mrb, "So", &name, &value);

    r = ngx_http_mruby_request(mrb);
    ngx_http_mruby_var_put(mrb, r, RSTRING_PTR(name),
                           (size_t) RSTRING_LEN(name), value);

    return value;
}


static mrb_value
ngx_http_mruby_var_exist(mrb_state *mrb, mrb_value self)
{
    mrb_value            name;
    ngx_http_request_t  *r;

    mrb_get_args(mrb, "S", &name);

    r = ngx_http_mruby_request(mrb);

    return mrb_bool_value(!mrb_nil_p(
               ngx_http_mruby_var_get(mrb, r, RSTRING_PTR(name),
                                      (size_t) RSTRING_LEN(name))));
}


static mrb_value
ngx_http_mruby_var_respond_to_missing(mrb_state *mrb, mrb_value self)
{
    return mrb_true_value();
}


static const mrb_api_method  ngx_http_mruby_var_methods[] = {
    { "method_missing", ngx_http_mruby_var_method_missing, MRB_ARGS_ANY() },
    { "respond_to_missing?", ngx_http_mruby_var_respond_to_missing,
      MRB_ARGS_ANY() },
    { "set", ngx_http_mruby_var_set, MRB_ARGS_REQ(2) },
    { "exist?", ngx_http_mruby_var_exist, MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};


void
ngx_http_mruby_var_define(mrb_state *mrb, struct RClass *nginx)
{
    mrb_api_define_class(mrb, nginx, "Var", NULL, ngx_http_mruby_var_methods);
}
