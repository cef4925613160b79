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


/* What Dir.entries or Dir.glob holds while it makes Strings. */
typedef struct {
    DIR       *dir;
    glob_t     glob;
    unsigned   globbed:1;
} dir_held;


static void
dir_held_free(mrb_state *mrb, void *p)
{
    dir_held  *h = p;

    if (h == NULL) {
        return;
    }
    if (h->dir != NULL) {
        closedir(h->dir);
    }
    if (h->globbed) {
        globfree(&h->glob);
    }
    mrb_free(mrb, h);
}


static const struct mrb_data_type  dir_held_type = {
    "Dir held", dir_held_free
};


/* An empty holder, the GC's until dir_held_release. */
static dir_held *
dir_held_new(mrb_state *mrb, struct RData **holder)
{
    *holder = mrb_data_object_alloc(mrb, mrb->object_class, NULL,
                                    &dir_held_type);
    (*holder)->data = mrb_calloc(mrb, 1, sizeof(dir_held));
    return (*holder)->data;
}


/* Closes and frees what the holder holds now, not at the next GC. */
static void
dir_held_release(mrb_state *mrb, struct RData *holder)
{
    dir_held_free(mrb, holder->data);
    holder->data = NULL;
}


/* Dir.entries(path): every name in it, "." and ".." too. */
static mrb_value
dir_entries(mrb_state *mrb, mrb_value self)
{
    const char     *path = dir_path(mrb);
    mrb_value       ary = mrb_ary_new(mrb);
    dir_held       *h;
    struct RData   *holder;
    struct dirent  *e;
    int             ai;

    h = dir_held_new(mrb, &holder);
    h->dir = opendir(path);
    if (h->dir == NULL) {
        mrb_lib_sys_fail(mrb, path);
    }

    ai = mrb_gc_arena_save(mrb);
    while ((e = readdir(h->dir)) != NULL) {
        mrb_ary_push(mrb, ary, mrb_str_new_cstr(mrb, e->d_name));
        mrb_gc_arena_restore(mrb, ai);
    }

    dir_held_release(mrb, holder);
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


/* Dir.glob(pattern): the matching paths, sorted (glob(3), no "**"). */
static mrb_value
dir_glob(mrb_state *mrb, mrb_value self)
{
    const char    *pattern = dir_path(mrb);
    mrb_value      ary = mrb_ary_new(mrb);
    dir_held      *h;
    struct RData  *holder;
    size_t         i;
    int            rc, ai;

    h = dir_held_new(mrb, &holder);
    rc = glob(pattern, 0, NULL, &h->glob);
    h->globbed = 1;

    if (rc == 0) {
        ai = mrb_gc_arena_save(mrb);
        for (i = 0; i < h->glob.gl_pathc; i++) {
            mrb_ary_push(mrb, ary,
                         mrb_str_new_cstr(mrb, h->glob.gl_pathv[i]));
            mrb_gc_arena_restore(mrb, ai);
        }
    }

    dir_held_release(mrb, holder);

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
