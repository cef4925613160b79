/*
 * The file watch behind `stat` scripts: which changes move the epoch, and
 * which must not.
 */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mrb_file_watch.h"
#include "unit.h"


static char  watch_root[64];


static const char *
watch_file(const char *rel)
{
    static char  path[4][160];
    static int   next;
    char        *p = path[next++ % 4];

    snprintf(p, sizeof(path[0]), "%s/%s", watch_root, rel);
    return p;
}


static void
watch_write(const char *rel, const char *text, const char *mode)
{
    FILE  *f = fopen(watch_file(rel), mode);

    if (f != NULL) {
        fputs(text, f);
        fclose(f);
    }
}


static char                   watch_why[256];
static mrb_file_watch_poller  watch_poller = MRB_FILE_WATCH_POLLER_INIT;


static int
watch_add(const char *path)
{
    watch_why[0] = '\0';
    return mrb_file_watch_add(path, watch_why, sizeof(watch_why));
}


static int
watch_setup(void)
{
    snprintf(watch_root, sizeof(watch_root), "/tmp/unit_%d_watch",
             (int) getpid());
    if (mkdir(watch_root, 0755) != 0
        || mkdir(watch_file("r1"), 0755) != 0
        || mkdir(watch_file("r2"), 0755) != 0)
    {
        return -1;
    }

    watch_write("r1/e.rb", "one", "w");
    watch_write("r2/e.rb", "two", "w");
    return symlink("r1", watch_file("current"));
}


static void
watch_teardown(void)
{
    char  cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", watch_root);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot remove %s\n", watch_root);
    }
}


TEST(file_watch_sees_edits_renames_and_link_switches)
{
    uint64_t  e;

    REQUIRE(watch_setup() == 0);
    CHECK_EQ(mrb_file_watch_epoch(&watch_poller), 0);
    REQUIRE(watch_add(watch_file("current/e.rb")) == 0);

    e = mrb_file_watch_epoch(&watch_poller);
    CHECK(e != 0);
    CHECK_EQ(e >> 32, getpid());
    CHECK_EQ(mrb_file_watch_epoch(&watch_poller), e);

    /* the file edited in place */
    watch_write("current/e.rb", "one, edited", "w");
    CHECK(mrb_file_watch_epoch(&watch_poller) != e);
    e = mrb_file_watch_epoch(&watch_poller);

    /* a new file renamed over it */
    watch_write("r1/e.rb.new", "one, renamed in", "w");
    REQUIRE(rename(watch_file("r1/e.rb.new"), watch_file("r1/e.rb")) == 0);
    CHECK(mrb_file_watch_epoch(&watch_poller) != e);
    e = mrb_file_watch_epoch(&watch_poller);

    /* the new inode is watched too */
    watch_write("r1/e.rb", "one, edited again", "w");
    CHECK(mrb_file_watch_epoch(&watch_poller) != e);
    e = mrb_file_watch_epoch(&watch_poller);

    /* the link switched to another release */
    REQUIRE(symlink("r2", watch_file("current.new")) == 0);
    REQUIRE(rename(watch_file("current.new"), watch_file("current")) == 0);
    CHECK(mrb_file_watch_epoch(&watch_poller) != e);
    e = mrb_file_watch_epoch(&watch_poller);

    watch_write("r2/e.rb", "two, edited", "w");
    CHECK(mrb_file_watch_epoch(&watch_poller) != e);
    e = mrb_file_watch_epoch(&watch_poller);

    watch_teardown();
    CHECK(mrb_file_watch_epoch(&watch_poller) != e);
}


TEST(file_watch_ignores_what_the_path_does_not_depend_on)
{
    uint64_t  e;

    REQUIRE(watch_setup() == 0);
    REQUIRE(watch_add(watch_file("current/e.rb")) == 0);
    e = mrb_file_watch_epoch(&watch_poller);

    /* a log written next to the script, another file, the old release */
    watch_write("r1/access.log", "GET /\n", "a");
    watch_write("r1/access.log", "GET /\n", "a");
    watch_write("r2/e.rb", "two, edited", "w");
    watch_write("other.rb", "other", "w");
    CHECK_EQ(mrb_file_watch_epoch(&watch_poller), e);

    watch_teardown();
}


TEST(file_watch_refuses_what_it_cannot_watch)
{
    CHECK_EQ(watch_add("relative/e.rb"), -1);
    CHECK(strcmp(watch_why, "not an absolute path: relative/e.rb") == 0);
    CHECK_EQ(watch_add("/proc/self/status"), -1);
    CHECK(strcmp(watch_why, "/proc is not on a local file system") == 0);
}


TEST(file_watch_is_not_inherited_by_a_child)
{
    pid_t  pid;
    int    status;

    REQUIRE(watch_setup() == 0);
    REQUIRE(watch_add(watch_file("current/e.rb")) == 0);
    CHECK(mrb_file_watch_epoch(&watch_poller) != 0);

    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        /* nothing to trust until the child watches for itself */
        if (mrb_file_watch_epoch(&watch_poller) != 0) {
            _exit(1);
        }
        if (watch_add(watch_file("current/e.rb")) != 0
            || mrb_file_watch_epoch(&watch_poller) >> 32 != (uint64_t) getpid())
        {
            _exit(2);
        }
        _exit(0);
    }

    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(mrb_file_watch_epoch(&watch_poller) >> 32 == (uint64_t) getpid());

    watch_teardown();
}


/*
 * Callers ask through epolls of their own, here one per thread: each must
 * see an edit made just before it asks, however long its epoll has been
 * idle.
 */
#define WATCH_ROUNDS  10

static pthread_barrier_t  watch_barrier;
static uint64_t           watch_seen[WATCH_ROUNDS];

static void *
watch_asker(void *arg)
{
    mrb_file_watch_poller  poller = MRB_FILE_WATCH_POLLER_INIT;
    long                   me = (long) arg;
    int                    round;

    mrb_file_watch_epoch(&poller);
    for (round = 0; round < WATCH_ROUNDS; round++) {
        pthread_barrier_wait(&watch_barrier);
        if (round % 2 == me) {
            watch_seen[round] = mrb_file_watch_epoch(&poller);
        }
        pthread_barrier_wait(&watch_barrier);
    }

    mrb_file_watch_poller_close(&poller);
    return NULL;
}


TEST(file_watch_each_thread_sees_an_edit_at_once)
{
    pthread_t  t[2];
    uint64_t   before[WATCH_ROUNDS];
    char       text[32];
    int        round;

    REQUIRE(watch_setup() == 0);
    REQUIRE(watch_add(watch_file("current/e.rb")) == 0);
    REQUIRE(pthread_barrier_init(&watch_barrier, NULL, 3) == 0);
    REQUIRE(pthread_create(&t[0], NULL, watch_asker, (void *) 0L) == 0);
    REQUIRE(pthread_create(&t[1], NULL, watch_asker, (void *) 1L) == 0);

    for (round = 0; round < WATCH_ROUNDS; round++) {
        before[round] = mrb_file_watch_epoch(&watch_poller);
        snprintf(text, sizeof(text), "version %d", round);
        watch_write("current/e.rb", text, "w");
        pthread_barrier_wait(&watch_barrier);
        pthread_barrier_wait(&watch_barrier);
    }

    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    pthread_barrier_destroy(&watch_barrier);

    for (round = 0; round < WATCH_ROUNDS; round++) {
        CHECK(watch_seen[round] != before[round]);
    }

    watch_teardown();
}
