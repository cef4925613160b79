/*
 * Change notification for `stat` scripts (see mrb_file_watch.h).
 *
 * Why ask the queue on every run rather than have a thread read it: the
 * kernel queues an event before the write or rename that caused it
 * returns, so a run that finds the queue empty knows that nothing changed
 * before it started: an edit is seen by the very next request.  A thread
 * would save the system call (a third of a stat()) but leave a window, as
 * long as its wake-up under load, where a new request runs the old version.
 *
 * Why every directory on the way: editors save by writing a new file and
 * renaming it over the old one, and deployments switch a symbolic link
 * ("current" -> releases/N).  Neither touches the old file; both change a
 * name in a directory the path resolves through.
 */

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <linux/magic.h>

#include "mrb_file_watch.h"


/* A directory is watched for the names looked up in it ... */
#define WATCH_DIR_MASK   (IN_ATTRIB | IN_CREATE | IN_DELETE | IN_MOVED_FROM \
                          | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF     \
                          | IN_ONLYDIR)
/* ... and the file for its content.  Appends to other files in the same
 * directory (a log) wake nobody. */
#define WATCH_FILE_MASK  (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE             \
                          | IN_DELETE_SELF | IN_MOVE_SELF)

/* Symbolic links followed within one path (each costs a stack frame of
 * two PATH_MAX buffers); a longer chain is stat()ed instead. */
#define WATCH_MAX_LINKS  8

#ifndef ZFS_SUPER_MAGIC
#define ZFS_SUPER_MAGIC  0x2fc12fc1
#endif


/*
 * An inotify watch and the name in it that matters (NULL: any).  Events
 * about the watched inode itself (moved, deleted) always matter.
 */
typedef struct {
    int    wd;
    char  *name;
} mrb_watch_entry;

typedef struct {
    pthread_mutex_t   lock;
    _Atomic int       fd;          /* -1: no watch in this process */
    _Atomic unsigned  instance;    /* which fd: bumps at each start */
    unsigned          failed:1;    /* it could not start, or stopped */
    uint32_t          changes;     /* the low half of the epoch */

    char            **paths;       /* what was added, watched again ... */
    size_t            npaths;
    mrb_watch_entry  *entries;     /* ... into these after each change */
    size_t            nentries;
    size_t            entries_cap;
} mrb_file_watch;


static _Atomic uint64_t  mrb_file_watch_epoch_now;

static mrb_file_watch  watch = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .fd = -1
};

static pthread_once_t  watch_atfork_once = PTHREAD_ONCE_INIT;

/* Why the last path could not be watched, and why this process has no
 * watch if so; guarded by watch.lock. */
static char            watch_why[256];
static char            watch_failure[256];



/*
 * The epoch carries the pid, so that no value trusted in one process can
 * be trusted in another.
 */
static void
watch_bump_locked(void)
{
    watch.changes++;
    atomic_store_explicit(&mrb_file_watch_epoch_now,
                          (uint64_t) getpid() << 32 | watch.changes,
                          memory_order_release);
}


static int
watch_fail_locked(const char *fmt, ...)
{
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(watch_why, sizeof(watch_why), fmt, ap);
    va_end(ap);

    return -1;
}


/* Every run stats from now on. */
static void
watch_stop_locked(void)
{
    if (!watch.failed) {
        snprintf(watch_failure, sizeof(watch_failure),
                 "the inotify queue failed: %.200s", watch_why);
    }
    watch.failed = 1;
    atomic_store_explicit(&mrb_file_watch_epoch_now, 0, memory_order_release);

    if (watch.fd >= 0) {
        close(watch.fd);
        atomic_store_explicit(&watch.fd, -1, memory_order_release);
    }
}


/* inotify does not see changes made by other machines or by FUSE daemons. */
static int
watch_fs_is_local(const char *path)
{
    struct statfs  fs;

    if (statfs(path, &fs) != 0) {
        return 0;
    }

    switch ((unsigned long) fs.f_type) {
    case EXT4_SUPER_MAGIC:
    case XFS_SUPER_MAGIC:
    case BTRFS_SUPER_MAGIC:
    case TMPFS_MAGIC:
    case RAMFS_MAGIC:
    case F2FS_SUPER_MAGIC:
    case OVERLAYFS_SUPER_MAGIC:
    case ZFS_SUPER_MAGIC:
        return 1;
    default:
        return 0;
    }
}


static int
watch_entry_add_locked(int wd, const char *name)
{
    mrb_watch_entry  *grown;
    char             *copy = NULL;
    size_t            cap;

    if (watch.nentries == watch.entries_cap) {
        cap = watch.entries_cap ? watch.entries_cap * 2 : 16;
        grown = realloc(watch.entries, cap * sizeof(mrb_watch_entry));
        if (grown == NULL) {
            return -1;
        }
        watch.entries = grown;
        watch.entries_cap = cap;
    }

    if (name != NULL && (copy = strdup(name)) == NULL) {
        return -1;
    }

    watch.entries[watch.nentries].wd = wd;
    watch.entries[watch.nentries].name = copy;
    watch.nentries++;
    return 0;
}


/*
 * Watches each directory the lookup of path goes through, for the name it
 * looks up there, and what the symbolic links met on the way point to.
 * A missing component ends the walk: its directory, watched for its name,
 * tells when it appears.  Returns 0, or -1 if a change could go unseen.
 */
static int
watch_lookup_locked(const char *path, int links)
{
    char         dir[PATH_MAX], target[PATH_MAX];
    const char  *name, *end;
    size_t       dirlen;
    ssize_t      n;
    struct stat  st;
    int          wd;

    if (path[0] != '/' || strlen(path) >= PATH_MAX) {
        return watch_fail_locked("not an absolute path: %s", path);
    }

    for (name = path + 1; *name != '\0'; name = end + (*end == '/')) {
        end = strchr(name, '/');
        if (end == NULL) {
            end = name + strlen(name);
        }
        if (end == name) {
            continue;
        }

        dirlen = name - path;
        memcpy(dir, path, dirlen);
        dir[dirlen > 1 ? dirlen - 1 : 1] = '\0';

        if (!watch_fs_is_local(dir)) {
            return watch_fail_locked("%s is not on a local file system",
                                     dir);
        }

        wd = inotify_add_watch(watch.fd, dir, WATCH_DIR_MASK);
        if (wd < 0) {
            return (errno == ENOENT || errno == ENOTDIR)
                   ? 0 : watch_fail_locked("inotify_add_watch %s: %s", dir,
                                           strerror(errno));
        }

        memcpy(dir, name, end - name);
        dir[end - name] = '\0';
        if (watch_entry_add_locked(wd, dir) != 0) {
            return watch_fail_locked("out of memory");
        }

        memcpy(dir, path, end - path);
        dir[end - path] = '\0';
        if (lstat(dir, &st) != 0) {
            return (errno == ENOENT || errno == ENOTDIR)
                   ? 0 : watch_fail_locked("lstat %s: %s", dir,
                                           strerror(errno));
        }
        if (!S_ISLNK(st.st_mode)) {
            continue;
        }

        if (links >= WATCH_MAX_LINKS) {
            return watch_fail_locked("more than %d symbolic links",
                                     WATCH_MAX_LINKS);
        }
        n = readlink(dir, target, sizeof(target) - 1);
        if (n < 0) {
            return watch_fail_locked("readlink %s: %s", dir,
                                     strerror(errno));
        }
        target[n] = '\0';

        if (target[0] != '/') {
            /* relative to the link's directory */
            if (dirlen + n >= sizeof(target)) {
                return watch_fail_locked("%s: target too long", dir);
            }
            memmove(target + dirlen, target, n + 1);
            memcpy(target, path, dirlen);
        }

        if (watch_lookup_locked(target, links + 1) != 0) {
            return -1;
        }
    }

    return 0;
}


/* Watches path: its lookup and, if it exists, the file itself. */
static int
watch_path_locked(const char *path)
{
    int  wd;

    if (watch_lookup_locked(path, 0) != 0) {
        return -1;
    }

    wd = inotify_add_watch(watch.fd, path, WATCH_FILE_MASK);
    if (wd < 0) {
        return (errno == ENOENT || errno == ENOTDIR)
               ? 0 : watch_fail_locked("inotify_add_watch %s: %s", path,
                                       strerror(errno));
    }

    if (!watch_fs_is_local(path)) {
        return watch_fail_locked("%s is not on a local file system", path);
    }

    if (watch_entry_add_locked(wd, NULL) != 0) {
        return watch_fail_locked("out of memory");
    }

    return 0;
}


static void
watch_entries_clear_locked(void)
{
    size_t  i;

    for (i = 0; i < watch.nentries; i++) {
        free(watch.entries[i].name);
    }
    watch.nentries = 0;
}


/*
 * After a change, watches every path again: a renamed-over file is a new
 * inode, a switched link leads to new directories.  Watches left behind on
 * old inodes only queue events that do not matter, until those are deleted.
 */
static void
watch_rebuild_locked(void)
{
    size_t  i;

    watch_entries_clear_locked();

    for (i = 0; i < watch.npaths; i++) {
        if (watch_path_locked(watch.paths[i]) != 0) {
            watch_stop_locked();
            return;
        }
    }
}


static int
watch_event_matters_locked(const struct inotify_event *ev)
{
    size_t  i;

    if (ev->mask & (IN_Q_OVERFLOW | IN_IGNORED)) {
        return 1;
    }

    for (i = 0; i < watch.nentries; i++) {
        if (watch.entries[i].wd == ev->wd
            && (watch.entries[i].name == NULL || ev->len == 0
                || strcmp(watch.entries[i].name, ev->name) == 0))
        {
            return 1;
        }
    }

    return 0;
}


static int
watch_events_matter_locked(const char *buf, ssize_t len)
{
    const struct inotify_event  *ev;
    const char                  *p;

    for (p = buf; p < buf + len; p += sizeof(*ev) + ev->len) {
        ev = (const struct inotify_event *) p;
        if (watch_event_matters_locked(ev)) {
            return 1;
        }
    }

    return 0;
}


/*
 * Reads what the queue holds; after a change that matters, bumps the epoch
 * before watching again, so that runs stop trusting at once, and after, so
 * that a run that stat()ed while the new inodes were not yet watched does
 * not keep trusting what it saw.
 */
static void
watch_drain_locked(void)
{
    char     buf[4096]
             __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t  n;
    int      changed = 0;

    for ( ;; ) {
        n = read(watch.fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno == EAGAIN) {
            break;
        }
        if (n <= 0) {
            watch_stop_locked();
            return;
        }
        if (!changed && watch_events_matter_locked(buf, n)) {
            changed = 1;
        }
    }

    if (changed) {
        watch_bump_locked();
        watch_rebuild_locked();
        if (!watch.failed) {
            watch_bump_locked();
        }
    }
}


void
mrb_file_watch_poller_close(mrb_file_watch_poller *poller)
{
    if (poller->fd >= 0) {
        close(poller->fd);
        poller->fd = -1;
    }
}


/* poller's epoll on the queue fd, made or remade for the queue of now;
 * -1 if it cannot be made (then the queue is asked). */
static int
watch_poller(mrb_file_watch_poller *poller, int fd)
{
    struct epoll_event  ev;
    unsigned            instance;

    instance = atomic_load_explicit(&watch.instance, memory_order_acquire);
    if (poller->fd >= 0 && poller->instance == instance) {
        return poller->fd;
    }

    mrb_file_watch_poller_close(poller);

    poller->fd = epoll_create1(EPOLL_CLOEXEC);
    if (poller->fd < 0) {
        return -1;
    }

    ev.events = EPOLLIN;
    ev.data.u64 = 0;

    if (epoll_ctl(poller->fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        mrb_file_watch_poller_close(poller);
        return -1;
    }

    poller->instance = instance;
    return poller->fd;
}


/* Whether the queue holds events (or cannot tell). */
static int
watch_pending(mrb_file_watch_poller *poller, int fd)
{
    struct epoll_event  ev;
    int                 epfd = watch_poller(poller, fd);
    int                 n;

    if (epfd >= 0) {
        return epoll_wait(epfd, &ev, 1, 0) != 0;
    }

    return ioctl(fd, FIONREAD, &n) != 0 || n > 0;
}


uint64_t
mrb_file_watch_epoch(mrb_file_watch_poller *poller)
{
    int  fd = atomic_load_explicit(&watch.fd, memory_order_acquire);

    if (fd < 0) {
        return 0;
    }

    if (watch_pending(poller, fd)) {
        pthread_mutex_lock(&watch.lock);
        if (!watch.failed) {
            watch_drain_locked();
        }
        pthread_mutex_unlock(&watch.lock);
    }

    return atomic_load_explicit(&mrb_file_watch_epoch_now,
                                memory_order_acquire);
}


/*
 * A forked child must not read its parent's queue (they share it), nor
 * trust the epoch it inherited.  It may start its own.
 */
static void
watch_atfork_prepare(void)
{
    pthread_mutex_lock(&watch.lock);
}


static void
watch_atfork_parent(void)
{
    pthread_mutex_unlock(&watch.lock);
}


static void
watch_atfork_child(void)
{
    size_t  i;

    atomic_store_explicit(&mrb_file_watch_epoch_now, 0, memory_order_relaxed);

    if (watch.fd >= 0) {
        close(watch.fd);
        watch.fd = -1;
    }
    watch.failed = 0;
    watch_entries_clear_locked();
    for (i = 0; i < watch.npaths; i++) {
        free(watch.paths[i]);
    }
    watch.npaths = 0;

    pthread_mutex_unlock(&watch.lock);
}


static void
watch_atfork_register(void)
{
    pthread_atfork(watch_atfork_prepare, watch_atfork_parent,
                   watch_atfork_child);
}


static int
watch_start_locked(void)
{
    int  fd;

    pthread_once(&watch_atfork_once, watch_atfork_register);

    fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) {
        snprintf(watch_failure, sizeof(watch_failure), "inotify_init1: %s%s",
                 strerror(errno),
                 errno == EMFILE ? " (fs.inotify.max_user_instances)" : "");
        return -1;
    }

    atomic_fetch_add_explicit(&watch.instance, 1, memory_order_relaxed);
    atomic_store_explicit(&watch.fd, fd, memory_order_release);
    watch.changes = 0;
    watch_bump_locked();
    return 0;
}


static int
watch_add_locked(const char *path)
{
    char   **grown, *copy;
    size_t   i;

    for (i = 0; i < watch.npaths; i++) {
        if (strcmp(watch.paths[i], path) == 0) {
            return 0;
        }
    }

    if (watch.failed || (watch.fd < 0 && watch_start_locked() != 0)) {
        watch.failed = 1;
        return watch_fail_locked("%s", watch_failure);
    }

    if (watch_path_locked(path) != 0) {
        return -1;
    }

    copy = strdup(path);
    grown = realloc(watch.paths, (watch.npaths + 1) * sizeof(char *));
    if (copy == NULL || grown == NULL) {
        free(copy);
        if (grown != NULL) {
            watch.paths = grown;
        }
        return watch_fail_locked("out of memory");
    }

    watch.paths = grown;
    watch.paths[watch.npaths++] = copy;
    return 0;
}


int
mrb_file_watch_add(const char *path, char *why, size_t whylen)
{
    int  rc;

    pthread_mutex_lock(&watch.lock);
    rc = watch_add_locked(path);
    if (rc != 0) {
        snprintf(why, whylen, "%s", watch_why);
    }
    pthread_mutex_unlock(&watch.lock);

    return rc;
}
