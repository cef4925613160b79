/*
 * The unit test runner: build/test_core [--bench] [name ...]
 *
 * Runs every registered test (or those named), each in a process of its own
 * (a crash or a hang is that test's failure, and no test sees another's
 * leftovers) under a time limit, and ends with "N passed, M failed"; the
 * exit status is non-zero when a test failed or a name matched no test.
 */

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include "unit.h"

#define UNIT_TIME_LIMIT  120   /* seconds per test: a hang is a failure */

static unit_test   *unit_first, *unit_last;
static unit_test   *unit_current;
static int          unit_failures;


void
unit_register(unit_test *t)
{
    if (unit_last != NULL) {
        unit_last->next = t;
    } else {
        unit_first = t;
    }

    unit_last = t;
}


void
unit_fail(const char *file, int line, const char *fmt, ...)
{
    va_list  ap;

    unit_failures++;

    printf("  %s:%d: ", file, line);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}


void
unit_report(const char *what, double value, const char *unit)
{
    printf("  %-52s %10.3f %s\n", what, value, unit);
    fflush(stdout);
}


int
unit_child_status(int pid)
{
    int  st;

    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) {
        return -1;
    }

    return WEXITSTATUS(st);
}


uint64_t
unit_now_ns(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}


int
unit_append(char *buf, size_t size, const char *data, size_t len)
{
    size_t  used = strlen(buf);

    if (used + len >= size) {
        return -1;
    }

    memcpy(buf + used, data, len);
    buf[used + len] = '\0';
    return 0;
}


/* SIGALRM: the current test hangs; only write(2) is safe here. */
static void
unit_timeout(int signo)
{
    static const char  msg[] = "  time limit exceeded in ";
    const char        *name = unit_current->name;

    (void) signo;
    if (write(STDOUT_FILENO, msg, sizeof(msg) - 1) < 0
        || write(STDOUT_FILENO, name, strlen(name)) < 0
        || write(STDOUT_FILENO, "\n", 1) < 0)
    {
        /* nothing more can be done here */
    }
    _exit(2);
}


static int
unit_selected(unit_test *t, int bench, int argc, char **argv)
{
    int  i, named;

    named = 0;

    for (i = 1; i < argc; i++) {
        if (argv[i][0] == '-') {
            continue;
        }
        named = 1;
        if (strcmp(argv[i], t->name) == 0) {
            return 1;
        }
    }

    return !named && t->bench == bench;
}


static int
unit_known(const char *name)
{
    unit_test  *t;

    for (t = unit_first; t != NULL; t = t->next) {
        if (strcmp(t->name, name) == 0) {
            return 1;
        }
    }

    return 0;
}


/* Runs t in a child process; returns 1 if it passed. */
static int
unit_run(unit_test *t)
{
    int       st;
    pid_t     pid;
    uint64_t  start;

    start = unit_now_ns();
    pid = fork();

    if (pid == 0) {
        unit_current = t;
        signal(SIGALRM, unit_timeout);
        alarm(UNIT_TIME_LIMIT);
        t->fn();
        _exit(unit_failures != 0);
    }

    if (pid < 0 || waitpid(pid, &st, 0) != pid) {
        printf("  FAILED: cannot run it: %s\n", strerror(errno));
        return 0;
    }

    if (WIFSIGNALED(st)) {
        printf("  FAILED: killed by signal %d (%s)\n", WTERMSIG(st),
               strsignal(WTERMSIG(st)));
        return 0;
    }

    if (WEXITSTATUS(st) != 0) {
        printf("  FAILED\n");
        return 0;
    }

    printf("  ok (%.1f ms)\n", (unit_now_ns() - start) / 1e6);
    return 1;
}


int
main(int argc, char **argv)
{
    int         i, bench, passed, failed;
    unit_test  *t;

    bench = 0;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--bench") == 0) {
            bench = 1;
        }
    }

    setvbuf(stdout, NULL, _IOLBF, 0);

    passed = 0;
    failed = 0;

    for (t = unit_first; t != NULL; t = t->next) {
        if (!unit_selected(t, bench, argc, argv)) {
            continue;
        }

        printf("%s %s\n", t->bench ? "bench" : "test ", t->name);

        if (unit_run(t)) {
            passed++;
        } else {
            failed++;
        }
    }

    /* a name that matched no test is a failure, not "0 passed" */
    for (i = 1; i < argc; i++) {
        if (argv[i][0] != '-' && !unit_known(argv[i])) {
            printf("no test named %s\n", argv[i]);
            failed++;
        }
    }

    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
