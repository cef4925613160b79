/*
 * Process identity and liveness for held counts (see mrb_shdict_owner.h).
 */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/types.h>
#include "mrb_shdict_owner.h"

static mrb_shdict_owner  shd_self;
static int               shd_self_known;        /* atomic */
static pthread_once_t    shd_atfork_once = PTHREAD_ONCE_INIT;


/*
 * Reads the state letter and start time of pid from /proc/<pid>/stat.
 * Returns 0, or -1 with errno (ENOENT: no such process).
 */
static int
shd_proc_stat(uint32_t pid, char *state, uint64_t *start)
{
    int      fd, field, err;
    char     path[64], buf[1024], *p, *end;
    ssize_t  n;

    snprintf(path, sizeof(path), "/proc/%u/stat", pid);

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1) {
        return -1;
    }

    n = read(fd, buf, sizeof(buf) - 1);
    err = (n == 0) ? ENOENT : errno;   /* empty: the process went away */
    close(fd);

    if (n <= 0) {
        errno = err;
        return -1;
    }

    buf[n] = '\0';

    /* "pid (comm) S ppid ...": comm may hold spaces and parentheses, so the
     * fields start after the last ')'; the state is field 3, the start time
     * field 22 */
    p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ') {
        errno = EINVAL;
        return -1;
    }

    p += 2;
    *state = *p;

    for (field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL) {
            errno = EINVAL;
            return -1;
        }
        p++;
    }

    *start = strtoull(p, &end, 10);

    if (end == p) {
        errno = EINVAL;
        return -1;
    }

    return 0;
}


static void
shd_self_forget(void)
{
    __atomic_store_n(&shd_self_known, 0, __ATOMIC_RELEASE);
}


static void
shd_atfork_register(void)
{
    pthread_atfork(NULL, NULL, shd_self_forget);
}


void
mrb_shdict_owner_self(mrb_shdict_owner *o)
{
    char      state;
    uint64_t  start;

    if (__atomic_load_n(&shd_self_known, __ATOMIC_ACQUIRE)) {
        *o = shd_self;
        return;
    }

    pthread_once(&shd_atfork_once, shd_atfork_register);

    o->pid = (uint32_t) getpid();

    if (shd_proc_stat(o->pid, &state, &start) != 0) {
        /*
         * /proc could not be read now (no file descriptor left, EMFILE):
         * the pid alone for this call, and not remembered, so that the
         * next call reads it again.  Remembered, a start of 0 would make
         * this owner's holds look alive to the sweep for as long as any
         * process has its pid.
         */
        o->start = 0;
        return;
    }

    o->start = start;

    /* threads racing here compute the same values */
    shd_self = *o;
    __atomic_store_n(&shd_self_known, 1, __ATOMIC_RELEASE);
}


int
mrb_shdict_owner_alive(const mrb_shdict_owner *o)
{
    char              state;
    uint64_t          start;
    mrb_shdict_owner  self;

    mrb_shdict_owner_self(&self);

    if (o->pid == self.pid) {
        /* our pid: alive if it is us, else a dead process had it before */
        return o->start == self.start;
    }

    if (shd_proc_stat(o->pid, &state, &start) == 0) {
        if (state == 'Z' || state == 'X') {
            return 0;
        }

        return o->start == 0 || start == o->start;
    }

    if (errno == ENOENT) {
        return 0;
    }

    /* no /proc: the pid alone */
    return kill((pid_t) o->pid, 0) == 0 || errno == EPERM;
}
