/*
 * Unit tests of shared dictionaries in files (mrb_shdict_file.c): processes
 * that make the same store at once share one, names and sizes refused, a
 * file that holds no store, the size an existing store keeps, and the lock
 * of a process killed while holding it, in a file mapping.
 */

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "mrb_errbuf.h"
#include "mrb_shdict_file.h"
#include "unit.h"


/* A fresh directory, set as the directory of namespaces. */
static char *
file_dir(void)
{
    static char  dir[64];
    char         err[MRB_ERR_MSG_LEN];

    snprintf(dir, sizeof(dir), "/tmp/mrb-shdict-file-XXXXXX");
    if (mkdtemp(dir) == NULL
        || mrb_shdict_file_set_dir(dir, -1, -1, err, sizeof(err)) != 0)
    {
        return NULL;
    }

    return dir;
}


static void
file_dir_remove(const char *dir)
{
    char  cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    (void) system(cmd);
}


static int
files_in(const char *dir)
{
    int             n = 0;
    DIR            *d;
    struct dirent  *e;

    d = opendir(dir);
    if (d == NULL) {
        return -1;
    }

    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            n++;
        }
    }

    closedir(d);
    return n;
}



static mrb_shdict_zone *
open_ns(const char *name, size_t size)
{
    char             err[MRB_ERR_MSG_LEN];
    mrb_shdict_ref  *ref;

    if (mrb_shdict_file_open_namespace(name, strlen(name), size, &ref, err,
                                       sizeof(err))
        != MRB_SHDICT_FILE_OK)
    {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }

    return mrb_shdict_ref_zone(ref);
}


TEST(file_made_at_once_by_many_is_one_store)
{
    int                i, j;
    char              *dir;
    pid_t              pids[4];
    mrb_shdict_zone   *z;
    mrb_shdict_value   by = { MRB_SHDICT_INTEGER, 1, 0, NULL, 0 };
    mrb_shdict_value   init = { MRB_SHDICT_INTEGER, 0, 0, NULL, 0 };
    mrb_shdict_value   out, v;

    dir = file_dir();
    REQUIRE(dir != NULL);

    /* each child makes the store (one wins the link) and counts in it */
    for (i = 0; i < 4; i++) {
        pids[i] = fork();
        REQUIRE(pids[i] >= 0);

        if (pids[i] == 0) {
            z = open_ns("shared", 64 * 1024);
            if (z == NULL) {
                _exit(1);
            }

            for (j = 0; j < 1000; j++) {
                if (mrb_shdict_zone_incr(z, "n", 1, &by, &init, 0, &out)
                    != MRB_SHDICT_OK)
                {
                    _exit(2);
                }
            }

            _exit(0);
        }
    }

    for (i = 0; i < 4; i++) {
        CHECK_EQ(unit_child_status(pids[i]), 0);
    }

    z = open_ns("shared", 64 * 1024);
    REQUIRE(z != NULL);
    CHECK_EQ(mrb_shdict_zone_get(z, "n", 1, &v, NULL, 0), MRB_SHDICT_OK);
    CHECK_EQ(v.i, 4000);

    /* the store and no temporary file left beside it */
    CHECK_EQ(files_in(dir), 1);
    CHECK(open_ns("shared", 64 * 1024) == z);

    file_dir_remove(dir);
}


TEST(file_names_and_sizes_refused)
{
    char             err[MRB_ERR_MSG_LEN], *dir;
    mrb_shdict_ref  *ref;
    size_t           i;
    const char      *bad[] = { "", "..", "../x", "a/b", ".hidden", "a b",
        "0123456789012345678901234567890123456789012345678901234567890123" };
    const char      *bad_path[] = { "", "relative", "/", "/tmp/dir/" };

    dir = file_dir();
    REQUIRE(dir != NULL);

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_EQ(mrb_shdict_file_open_namespace(bad[i], strlen(bad[i]),
                     64 * 1024, &ref, err, sizeof(err)),
                 MRB_SHDICT_FILE_BAD_ARGUMENT);
        CHECK(strstr(err, "invalid Cache namespace") != NULL);
    }

    CHECK_EQ(mrb_shdict_file_open_namespace("a\0b", 3, 64 * 1024, &ref, err,
                                            sizeof(err)),
             MRB_SHDICT_FILE_BAD_ARGUMENT);

    for (i = 0; i < sizeof(bad_path) / sizeof(bad_path[0]); i++) {
        CHECK_EQ(mrb_shdict_file_open_path(bad_path[i], strlen(bad_path[i]),
                     64 * 1024, &ref, err, sizeof(err)),
                 MRB_SHDICT_FILE_BAD_ARGUMENT);
    }

    CHECK_EQ(mrb_shdict_file_open_namespace("small", 5, 1024, &ref, err,
                                            sizeof(err)),
             MRB_SHDICT_FILE_BAD_ARGUMENT);
    CHECK_EQ(strcmp(err, "a Cache store's size is 32k to 4095m, not 1024 "
                    "bytes"), 0);

    CHECK_EQ(files_in(dir), 0);
    file_dir_remove(dir);
}


TEST(file_that_holds_no_store_is_refused)
{
    int              fd;
    char             err[MRB_ERR_MSG_LEN], path[128], *dir;
    mrb_shdict_ref  *ref;

    dir = file_dir();
    REQUIRE(dir != NULL);

    /* the right size, but zeros; then too small to be one */
    snprintf(path, sizeof(path), "%s/zeros.cache", dir);
    fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    CHECK_EQ(ftruncate(fd, 64 * 1024), 0);
    close(fd);

    CHECK_EQ(mrb_shdict_file_open_namespace("zeros", 5, 64 * 1024, &ref, err,
                                            sizeof(err)),
             MRB_SHDICT_FILE_FAILED);
    CHECK(strstr(err, "is not a Cache store of this version") != NULL);

    snprintf(path, sizeof(path), "%s/tiny", dir);
    fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    CHECK_EQ(write(fd, "tiny", 4), 4);
    close(fd);

    CHECK_EQ(mrb_shdict_file_open_path(path, strlen(path), 64 * 1024, &ref,
                                       err, sizeof(err)),
             MRB_SHDICT_FILE_FAILED);
    CHECK(strstr(err, "is not a Cache store of this version") != NULL);

    file_dir_remove(dir);
}


TEST(file_store_keeps_the_size_it_was_made_with)
{
    char             err[MRB_ERR_MSG_LEN], path[128], *dir;
    pid_t            pid;
    struct stat      st;
    mrb_shdict_ref  *ref;

    dir = file_dir();
    REQUIRE(dir != NULL);
    snprintf(path, sizeof(path), "%s/by_path.lmc", dir);

    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        _exit(mrb_shdict_file_open_path(path, strlen(path), 128 * 1024, &ref,
                                        err, sizeof(err))
              != MRB_SHDICT_FILE_OK);
    }
    CHECK_EQ(unit_child_status(pid), 0);

    CHECK_EQ(mrb_shdict_file_open_path(path, strlen(path), 64 * 1024, &ref,
                                       err, sizeof(err)),
             MRB_SHDICT_FILE_OK);
    CHECK_EQ(mrb_shdict_ref_size(ref), 128 * 1024);
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0600);

    file_dir_remove(dir);
}


TEST(file_lock_of_a_killed_holder_is_recovered)
{
    int                fds[2];
    char               c, *dir;
    pid_t              pid;
    mrb_shdict_zone   *z;
    mrb_shdict_value   v = { MRB_SHDICT_INTEGER, 7, 0, NULL, 0 };
    mrb_shdict_value   got;

    dir = file_dir();
    REQUIRE(dir != NULL);
    REQUIRE(pipe(fds) == 0);

    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        /* its own mapping of the file, locked, then killed */
        z = open_ns("killed", 64 * 1024);
        if (z == NULL || mrb_shdict_zone_set(z, "k", 1, &v, 0, 0)
                         != MRB_SHDICT_OK
            || mrb_shdict_zone_lock(z) != 0)
        {
            _exit(1);
        }
        (void) write(fds[1], "l", 1);
        pause();
        _exit(0);
    }

    close(fds[1]);
    CHECK_EQ(read(fds[0], &c, 1), 1);
    close(fds[0]);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);

    z = open_ns("killed", 64 * 1024);
    REQUIRE(z != NULL);
    CHECK_EQ(mrb_shdict_zone_get(z, "k", 1, &got, NULL, 0), MRB_SHDICT_OK);
    CHECK_EQ(got.i, 7);

    file_dir_remove(dir);
}
