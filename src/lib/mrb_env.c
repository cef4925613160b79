/*
 * ENV: the process's environment as a Hash-like object (iij/mruby-env's
 * and CRuby's API).  Under Apache's threaded MPMs setenv races with other
 * threads reading the environment: scripts should read ENV, not write it,
 * and a value set is seen by every interpreter of the process.
 */

#include <stdlib.h>
#include <string.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/hash.h>
#include <mruby/string.h>

#include "mrb_api.h"
#include "mrb_sys.h"

extern char  **environ;


static const char *
env_name(mrb_state *mrb, mrb_value name)
{
    if (mrb_symbol_p(name)) {
        name = mrb_sym_str(mrb, mrb_symbol(name));
    }
    name = mrb_str_to_str(mrb, name);
    if (memchr(RSTRING_PTR(name), '\0', RSTRING_LEN(name)) != NULL
        || memchr(RSTRING_PTR(name), '=', RSTRING_LEN(name)) != NULL)
    {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "bad environment variable name");
    }
    return mrb_str_to_cstr(mrb, name);
}


static mrb_value
env_aref(mrb_state *mrb, mrb_value self)
{
    mrb_value    name;
    const char  *v;

    mrb_get_args(mrb, "o", &name);
    v = getenv(env_name(mrb, name));
    return v == NULL ? mrb_nil_value() : mrb_str_new_cstr(mrb, v);
}


static mrb_value
env_aset(mrb_state *mrb, mrb_value self)
{
    mrb_value    name, value;
    const char  *n;

    mrb_get_args(mrb, "oo", &name, &value);
    n = env_name(mrb, name);

    if (mrb_nil_p(value)) {
        unsetenv(n);
        return value;
    }

    value = mrb_str_to_str(mrb, value);
    if (setenv(n, mrb_str_to_cstr(mrb, value), 1) != 0) {
        mrb_lib_sys_fail(mrb, "setenv");
    }
    return value;
}


static mrb_value
env_delete(mrb_state *mrb, mrb_value self)
{
    mrb_value    name;
    const char  *n, *v;
    mrb_value    old;

    mrb_get_args(mrb, "o", &name);
    n = env_name(mrb, name);
    v = getenv(n);
    old = v == NULL ? mrb_nil_value() : mrb_str_new_cstr(mrb, v);
    unsetenv(n);
    return old;
}


/* ENV.to_hash: a Hash of every variable. */
static mrb_value
env_to_hash(mrb_state *mrb, mrb_value self)
{
    mrb_value    h = mrb_hash_new(mrb);
    char       **e;
    const char  *eq;

    for (e = environ; e != NULL && *e != NULL; e++) {
        eq = strchr(*e, '=');
        if (eq == NULL) {
            continue;
        }
        mrb_hash_set(mrb, h, mrb_str_new(mrb, *e, eq - *e),
                     mrb_str_new_cstr(mrb, eq + 1));
    }
    return h;
}


static const mrb_api_method  env_methods[] = {
    { "[]",        env_aref,     MRB_ARGS_REQ(1) },
    { "[]=",       env_aset,     MRB_ARGS_REQ(2) },
    { "store",     env_aset,     MRB_ARGS_REQ(2) },
    { "delete",    env_delete,   MRB_ARGS_REQ(1) },
    { "to_hash",   env_to_hash,  MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


void
mrb_env_define(mrb_state *mrb)
{
    struct RClass  *c;
    mrb_value       env;

    c = mrb_api_define_class(mrb, NULL, "EnvClass", NULL, env_methods);
    env = mrb_obj_new(mrb, c, 0, NULL);
    mrb_define_global_const(mrb, "ENV", env);
}
