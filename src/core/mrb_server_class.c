/*
 * The server class (Apache or Nginx) with the vocabulary both servers share
 * (rputs, return, errlogger, module_name, ...; echo is in mrblib/server.rb),
 * the HTTP_* constants, and Kernel#server_name / #get_server_class, so that
 * one script runs unchanged on either server.
 */

#include <string.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/hash.h>
#include <mruby/string.h>
#include <mruby/variable.h>

#include "mrb_api.h"
#include "mrb_interp_core.h"
#include "mrb_metrics.h"
#include "mrb_script.h"
#include "mrb_wait_core.h"
#include "mrb_shdict.h"


static const mrb_server *
server_of(mrb_state *mrb)
{
    return mrb_interp_server(mrb_interp_from_state(mrb));
}


static mrb_run_rec *
run_of(mrb_state *mrb, const char *what)
{
    mrb_run_rec  *run = mrb_interp_run(mrb);

    if (run == NULL || run->request == NULL) {
        mrb_raisef(mrb, E_RUNTIME_ERROR, "%s: called outside a request",
                   what);
    }

    return run;
}


static void
server_write(mrb_state *mrb, mrb_run_rec *run, const char *p, size_t len)
{
    if (server_of(mrb)->write(run, p, len) != 0) {
        mrb_raise(mrb, E_RUNTIME_ERROR,
                  "rputs: the response can no longer take a body");
    }

    run->written += len;
}


static mrb_value
server_rputs(mrb_state *mrb, mrb_value self)
{
    mrb_run_rec  *run = run_of(mrb, "rputs");
    mrb_value str;

    /* The hottest call of all: mrb_get_args' format parsing costs more.
     * Anything else is written as its to_s, as the originals did. */
    str = mrb_get_arg1(mrb);
    if (!mrb_string_p(str)) {
        str = mrb_obj_as_string(mrb, str);
    }
    server_write(mrb, run, RSTRING_PTR(str), (size_t) RSTRING_LEN(str));
    return self;
}


static mrb_value
server_return(mrb_state *mrb, mrb_value self)
{
    mrb_run_rec  *run = mrb_interp_run(mrb);
    mrb_int   code;

    mrb_get_args(mrb, "i", &code);

    if (run != NULL) {
        run->result = code;
        run->returned = 1;
    }

    return mrb_fixnum_value(code);
}


/* A script's level (Server::LOG_*) as an MRB_LOG_* level. */
static int
server_log_level(const mrb_server *server, mrb_int level)
{
    level -= server->log_level_base;

    if (level < MRB_LOG_EMERG) {
        return MRB_LOG_EMERG;
    }

    if (level > MRB_LOG_DEBUG) {
        return MRB_LOG_DEBUG;
    }

    return (int) level;
}


static mrb_value
server_errlogger(mrb_state *mrb, mrb_value self)
{
    const mrb_server  *server = server_of(mrb);
    mrb_interp        *interp = mrb_interp_from_state(mrb);
    mrb_int            level;
    mrb_value          msg;

    mrb_get_args(mrb, "io", &level, &msg);
    msg = mrb_obj_as_string(mrb, msg);

    server->log(mrb_interp_log_target(interp), mrb_interp_run(mrb),
                server_log_level(server, level), RSTRING_PTR(msg),
                (size_t) RSTRING_LEN(msg));
    return self;
}


/*
 * Server.log_level?(level): whether errlogger(level, ...) would write its
 * line now (Apache's APLOG_R_IS_LEVEL, nginx's log_level test), so that a
 * script can skip building a message for a level that is off.  Meant for
 * every request: one argument, read without mrb_get_args.
 */
static mrb_value
server_log_level_p(mrb_state *mrb, mrb_value self)
{
    const mrb_server  *server = server_of(mrb);
    mrb_interp        *interp = mrb_interp_from_state(mrb);
    mrb_int            level;

    level = mrb_as_int(mrb, mrb_get_arg1(mrb));

    return mrb_bool_value(
        server->log_enabled(mrb_interp_log_target(interp),
                            mrb_interp_run(mrb),
                            server_log_level(server, level)));
}


static mrb_value
server_module_name(mrb_state *mrb, mrb_value self)
{
    return mrb_str_new_cstr(mrb, server_of(mrb)->module_name);
}


static mrb_value
server_module_version(mrb_state *mrb, mrb_value self)
{
    return mrb_str_new_cstr(mrb, server_of(mrb)->module_version);
}


static mrb_value
server_threaded_p(mrb_state *mrb, mrb_value self)
{
    const mrb_server  *server = server_of(mrb);

    return mrb_bool_value(server->threaded != NULL && server->threaded());
}


static mrb_value
server_remove_global_variable(mrb_state *mrb, mrb_value self)
{
    mrb_sym  name;

    mrb_get_args(mrb, "n", &name);
    mrb_gv_remove(mrb, name);
    mrb_interp_global_removed(mrb_interp_from_state(mrb));
    return mrb_nil_value();
}


static mrb_value
kernel_server_name(mrb_state *mrb, mrb_value self)
{
    return mrb_str_new_cstr(mrb, server_of(mrb)->name);
}


static mrb_value
kernel_get_server_class(mrb_state *mrb, mrb_value self)
{
    return mrb_obj_value(mrb_class_get(mrb, server_of(mrb)->class_name));
}


/*
 * Server.stale_scripts: the `stat` scripts whose file on disk does not run
 * in this process, each {"path", "reason", "since" (Unix time), "serving"
 * ("previous": an older version runs; "none": its requests get 500)}.
 * One entry at a time is copied out of the script list, so nothing is
 * locked while Ruby allocates (which may raise).
 */
static mrb_value
server_stale_scripts(mrb_state *mrb, mrb_value self)
{
    mrb_script_stale  stale;
    mrb_value         list = mrb_ary_new(mrb), h;
    unsigned          cursor = 0;
    int               ai = mrb_gc_arena_save(mrb);

    while (mrb_script_stale_next(&cursor, &stale)) {
        h = mrb_hash_new_capa(mrb, 4);
        mrb_hash_set(mrb, h, mrb_str_new_lit(mrb, "path"),
                     mrb_str_new_cstr(mrb, stale.path));
        mrb_hash_set(mrb, h, mrb_str_new_lit(mrb, "reason"),
                     mrb_str_new_cstr(mrb, stale.reason));
        mrb_hash_set(mrb, h, mrb_str_new_lit(mrb, "since"),
                     mrb_int_value(mrb, (mrb_int) stale.since));
        mrb_hash_set(mrb, h, mrb_str_new_lit(mrb, "serving"),
                     stale.serving ? mrb_str_new_lit(mrb, "previous")
                                   : mrb_str_new_lit(mrb, "none"));
        mrb_ary_push(mrb, list, h);
        mrb_gc_arena_restore(mrb, ai);
    }

    return list;
}


static const mrb_api_method  server_class_methods[] = {
    { "rputs", server_rputs, MRB_ARGS_REQ(1) },
    { "return", server_return, MRB_ARGS_REQ(1) },
    { "errlogger", server_errlogger, MRB_ARGS_REQ(2) },
    { "log", server_errlogger, MRB_ARGS_REQ(2) },
    { "log_level?", server_log_level_p, MRB_ARGS_REQ(1) },
    { "module_name", server_module_name, MRB_ARGS_NONE() },
    { "module_version", server_module_version, MRB_ARGS_NONE() },
    { "threaded?", server_threaded_p, MRB_ARGS_NONE() },
    { "remove_global_variable", server_remove_global_variable,
      MRB_ARGS_REQ(1) },
    { "global_remove", server_remove_global_variable, MRB_ARGS_REQ(1) },
    { "stale_scripts", server_stale_scripts, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


/* what a script calls to find its server, the same on both */
static const mrb_api_method  server_kernel_methods[] = {
    { "server_name", kernel_server_name, MRB_ARGS_NONE() },
    { "get_server_class", kernel_get_server_class, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


struct RClass *
mrb_server_class_define(mrb_state *mrb, const mrb_server *server)
{
    struct RClass  *c;

    c = mrb_api_define_class(mrb, NULL, server->class_name, NULL, NULL);
    mrb_api_define_class_methods(mrb, c, server_class_methods);
    mrb_api_define_methods(mrb, mrb->kernel_module, server_kernel_methods);

    mrb_http_status_define(mrb, c);
    mrb_shdict_define(mrb, c);
    mrb_metrics_define(mrb, c);
    mrb_wait_define(mrb, c);

    if (server->define != NULL) {
        server->define(mrb, c);
    }

    return c;
}
