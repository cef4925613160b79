/*
 * Dir.entries and Dir.glob running out of memory (src/lib/mrb_dir.c): at
 * whichever allocation NoMemoryError is raised, the directory they opened
 * is closed and glob(3)'s list freed once the garbage collector has run.
 */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/error.h>
#include <mruby/string.h>

#include "lib_eval.h"
#include "unit.h"
#include "unit_oom.h"

/* names longer than an embedded String, so that each one allocates */
#define DIR_TEST_FILES  200

static char  dir_test_path[64];


static int
dir_test_make(void)
{
    char  name[128];
    int   i, fd;

    snprintf(dir_test_path, sizeof(dir_test_path), "/tmp/unit_dir_%d",
             (int) getpid());
    if (mkdir(dir_test_path, 0700) != 0) {
        return -1;
    }
    for (i = 0; i < DIR_TEST_FILES; i++) {
        snprintf(name, sizeof(name), "%s/a-name-longer-than-embedded-%04d",
                 dir_test_path, i);
        fd = open(name, O_CREAT | O_WRONLY, 0600);
        if (fd < 0) {
            return -1;
        }
        close(fd);
    }
    return 0;
}


static void
dir_test_remove(void)
{
    char  cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir_test_path);
    if (system(cmd) != 0) {
        printf("  could not remove %s\n", dir_test_path);
    }
}


typedef struct {
    const char  *method;
    mrb_value    arg;
} dir_call;


static mrb_value
dir_call_body(mrb_state *mrb, void *p)
{
    dir_call  *call = p;

    return mrb_funcall(mrb, mrb_obj_value(mrb_class_get(mrb, "Dir")),
                       call->method, 1, call->arg);
}


/*
 * Calls Dir.<method>(arg) with allocation n failing, n = 0, 1, ... until a
 * call returns; each call before it must raise NoMemoryError.  Returns the
 * number of calls that raised, or -1.
 */
static long
dir_call_failing(mrb_state *mrb, const char *method, const char *arg,
    mrb_int expected_len)
{
    dir_call   call;
    mrb_value  v;
    mrb_bool   failed;
    long       n;
    int        ai = mrb_gc_arena_save(mrb);

    call.method = method;
    call.arg = mrb_str_new_cstr(mrb, arg);

    for (n = 0; n < 100000; n++) {
        unit_oom_after(mrb, n);
        v = mrb_protect_error(mrb, dir_call_body, &call, &failed);
        unit_oom_end(mrb);

        if (!failed) {
            mrb_gc_arena_restore(mrb, ai);
            return mrb_array_p(v) && RARRAY_LEN(v) == expected_len ? n : -1;
        }
        if (!mrb_obj_is_kind_of(mrb, v,
                                 mrb_class_get(mrb, "NoMemoryError")))
        {
            printf("  %s failed at allocation %ld but not for memory\n",
                   method, n);
            return -1;
        }
    }
    return -1;
}


TEST(lib_dir_entries_out_of_memory_closes_the_directory)
{
    mrb_interp  *interp = lib_interp();
    mrb_state   *mrb;
    long         raised;
    int          fds;

    REQUIRE(interp != NULL);
    REQUIRE(dir_test_make() == 0);
    mrb = mrb_interp_state(interp);

    fds = unit_open_fds();
    raised = dir_call_failing(mrb, "entries", dir_test_path,
                              DIR_TEST_FILES + 2);
    mrb_full_gc(mrb);

    /* it failed at many places, the readdir loop among them */
    CHECK(raised > DIR_TEST_FILES);
    CHECK_EQ(unit_open_fds(), fds);

    dir_test_remove();
    mrb_interp_close(interp);
}


TEST(lib_dir_glob_out_of_memory_frees_the_list)
{
    mrb_interp  *interp = lib_interp();
    mrb_state   *mrb;
    char         pattern[80];
    size_t       before, after;
    long         raised;

    REQUIRE(interp != NULL);
    REQUIRE(dir_test_make() == 0);
    mrb = mrb_interp_state(interp);
    snprintf(pattern, sizeof(pattern), "%s/*", dir_test_path);

    /* once to grow the interpreter's heap, once to count */
    REQUIRE(dir_call_failing(mrb, "glob", pattern, DIR_TEST_FILES) > 0);
    mrb_full_gc(mrb);
    before = unit_heap_bytes();

    raised = dir_call_failing(mrb, "glob", pattern, DIR_TEST_FILES);
    mrb_full_gc(mrb);
    after = unit_heap_bytes();

    /* a list left behind is 200 paths, over 8 kB, on each of the raises */
    CHECK(raised > DIR_TEST_FILES);
    if (after > before + 64 * 1024) {
        unit_fail(__FILE__, __LINE__, "the heap grew by %zu bytes",
                  after - before);
    }

    dir_test_remove();
    mrb_interp_close(interp);
}
