/*
 * Uname: uname(2)'s fields (matsumotory/mruby-uname's API).
 */

#include <sys/utsname.h>

#include <mruby.h>
#include <mruby/hash.h>
#include <mruby/string.h>

#include "mrb_api.h"
#include "mrb_sys.h"


static mrb_value
uname_field(mrb_state *mrb, int which)
{
    struct utsname  u;
    const char     *f;

    if (uname(&u) != 0) {
        mrb_lib_sys_fail(mrb, "uname");
    }

    switch (which) {
    case 0: f = u.sysname; break;
    case 1: f = u.nodename; break;
    case 2: f = u.release; break;
    case 3: f = u.version; break;
    default: f = u.machine; break;
    }
    return mrb_str_new_cstr(mrb, f);
}

static mrb_value uname_sysname(mrb_state *m, mrb_value s) { return uname_field(m, 0); }
static mrb_value uname_nodename(mrb_state *m, mrb_value s) { return uname_field(m, 1); }
static mrb_value uname_release(mrb_state *m, mrb_value s) { return uname_field(m, 2); }
static mrb_value uname_version(mrb_state *m, mrb_value s) { return uname_field(m, 3); }
static mrb_value uname_machine(mrb_state *m, mrb_value s) { return uname_field(m, 4); }


static const mrb_api_method  uname_functions[] = {
    { "sysname",   uname_sysname,   MRB_ARGS_NONE() },
    { "nodename",  uname_nodename,  MRB_ARGS_NONE() },
    { "release",   uname_release,   MRB_ARGS_NONE() },
    { "version",   uname_version,   MRB_ARGS_NONE() },
    { "machine",   uname_machine,   MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


void
mrb_uname_define(mrb_state *mrb)
{
    mrb_api_define_module(mrb, NULL, "Uname", uname_functions);
}
