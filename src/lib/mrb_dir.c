/*
 * Dir (iij/mruby-dir's and CRuby's class methods): the C calls; Dir.open,
 * each and foreach are in dir.rb over Dir.entries.
 *
 * Dir.entries and Dir.glob make a String a name while an open directory
 * or glob(3)'s list is held, and any of them may raise NoMemoryError: the
 * handle lives in a data object made before it is opened, so that the
 * garbage collector closes what a raise left open.
 */

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/data.h>
#include <mruby/string.h>

#include "mrb_api.h"
#include "mrb_sys.h"


static const char *
dir_path(mrb_state *mrb)
{
    mrb_value  path;

    mrb_get_args(mrb, "S", &path);
    return mrb_str_to_cstr(mrb, path);
}


static void
dir_handle_free(mrb_state *mrb, void *d)
{
    if (d != NULL) {
        closedir(d);
    }
}


static const struct mrb_data_type  dir_handle_type = {
    "Dir handle", dir_handle_free
};


/* Dir.entries(path): every name in it, "." and ".." too. */
static mrb_value
dir_entries(mrb_state *mrb, mrb_value self)
{
    const char     *path = dir_path(mrb);
    mrb_value       ary = mrb_ary_new(mrb);
    struct RData   *handle;
    DIR            *d;
    struct dirent  *e;
    int             ai;

    handle = mrb_data_object_alloc(mrb, mrb->object_class, NULL,
                                   &dir_handle_type);
    d = opendir(path);
    if (d == NULL) {
        mrb_lib_sys_fail(mrb, path);
    }
    handle->data = d;

    ai = mrb_gc_arena_save(mrb);
    while ((e = readdir(d)) != NULL) {
        mrb_ary_push(mrb, ary, mrb_str_new_cstr(mrb, e->d_name));
        mrb_gc_arena_restore(mrb, ai);
    }

    handle->data = NULL;
    closedir(d);
    return ary;
}


static mrb_value
dir_exist_p(mrb_state *mrb, mrb_value self)
{
    const char   *path = dir_path(mrb);
    struct stat   st;

    return mrb_bool_value(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
}


static mrb_value
dir_pwd(mrb_state *mrb, mrb_value self)
{
    char  buf[PATH_MAX];

    if (getcwd(buf, sizeof(buf)) == NULL) {
        mrb_lib_sys_fail(mrb, "getcwd");
    }
    return mrb_str_new_cstr(mrb, buf);
}


static mrb_value
dir_chdir(mrb_state *mrb, mrb_value self)
{
    const char  *path = dir_path(mrb);

    if (chdir(path) != 0) {
        mrb_lib_sys_fail(mrb, path);
    }
    return mrb_fixnum_value(0);
}


static mrb_value
dir_mkdir(mrb_state *mrb, mrb_value self)
{
    mrb_value  path;
    mrb_int    mode = 0777;

    mrb_get_args(mrb, "S|i", &path, &mode);
    if (mkdir(mrb_str_to_cstr(mrb, path), (mode_t) mode) != 0) {
        mrb_lib_sys_fail(mrb, RSTRING_PTR(path));
    }
    return mrb_fixnum_value(0);
}


static mrb_value
dir_rmdir(mrb_state *mrb, mrb_value self)
{
    const char  *path = dir_path(mrb);

    if (rmdir(path) != 0) {
        mrb_lib_sys_fail(mrb, path);
    }
    return mrb_fixnum_value(0);
}


static void
dir_glob_free(mrb_state *mrb, void *g)
{
    if (g != NULL) {
        globfree(g);
        mrb_free(mrb, g);
    }
}


static const struct mrb_data_type  dir_glob_type = {
    "Dir glob", dir_glob_free
};


/* Dir.glob(pattern): the matching paths, sorted (glob(3), no "**"). */
static mrb_value
dir_glob(mrb_state *mrb, mrb_value self)
{
    const char    *pattern = dir_path(mrb);
    mrb_value      ary = mrb_ary_new(mrb);
    struct RData  *handle;
    glob_t        *g;
    size_t         i;
    int            rc, ai;

    handle = mrb_data_object_alloc(mrb, mrb->object_class, NULL,
                                   &dir_glob_type);
    g = mrb_calloc(mrb, 1, sizeof(glob_t));
    handle->data = g;

    rc = glob(pattern, 0, NULL, g);
    if (rc == 0) {
        ai = mrb_gc_arena_save(mrb);
        for (i = 0; i < g->gl_pathc; i++) {
            mrb_ary_push(mrb, ary, mrb_str_new_cstr(mrb, g->gl_pathv[i]));
            mrb_gc_arena_restore(mrb, ai);
        }
    }

    handle->data = NULL;
    dir_glob_free(mrb, g);

    if (rc == GLOB_NOSPACE) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Dir.glob: out of memory");
    }
    return ary;
}


static const mrb_api_method  dir_class_methods[] = {
    { "entries",  dir_entries,  MRB_ARGS_REQ(1) },
    { "exist?",   dir_exist_p,  MRB_ARGS_REQ(1) },
    { "exists?",  dir_exist_p,  MRB_ARGS_REQ(1) },
    { "pwd",      dir_pwd,      MRB_ARGS_NONE() },
    { "getwd",    dir_pwd,      MRB_ARGS_NONE() },
    { "__chdir",  dir_chdir,    MRB_ARGS_REQ(1) },
    { "mkdir",    dir_mkdir,    MRB_ARGS_ARG(1, 1) },
    { "rmdir",    dir_rmdir,    MRB_ARGS_REQ(1) },
    { "delete",   dir_rmdir,    MRB_ARGS_REQ(1) },
    { "unlink",   dir_rmdir,    MRB_ARGS_REQ(1) },
    { "glob",     dir_glob,     MRB_ARGS_REQ(1) },
    { "[]",       dir_glob,     MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};


void
mrb_dir_define(mrb_state *mrb)
{
    struct RClass  *c = mrb_api_define_class(mrb, NULL, "Dir", NULL, NULL);

    mrb_api_define_class_methods(mrb, c, dir_class_methods);
}
