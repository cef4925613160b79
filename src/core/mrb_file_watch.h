/*
 * Change notification for `stat` scripts: lets a run skip the stat() of
 * its file while nothing that file's path resolves through has changed.
 *
 * One inotify instance per process, watching, for each path added, every
 * directory on the way (for the name looked up there, following symbolic
 * links) and the file itself.  Any change there bumps the epoch.  A caller
 * that found a file unchanged at epoch E may trust it as long as the epoch
 * is still E.  Asking for the epoch costs one epoll_wait() on the caller's
 * own epoll: events are queued, and that epoll marked ready, before the
 * change that caused them returns, so nothing that happened before the
 * call is missed.
 *
 * The epoch is 0, and every run stats, until a watch works in this process,
 * after a fork, and when a path's file system may change behind the
 * kernel's back (NFS, CIFS, FUSE, ...): only local file systems are watched.
 */

#ifndef MRB_FILE_WATCH_H
#define MRB_FILE_WATCH_H

#include <stddef.h>
#include <stdint.h>

/*
 * What a caller asks the queue through: an epoll instance of its own,
 * registered on the queue, made on first use.  One per interpreter: an
 * interpreter is used by one thread at a time, and its epoll stays warm in
 * the CPU caches with it.  (Threads asking the queue's own descriptor at
 * once make its reference count bounce between cores: 370 ns a call with
 * two threads, against 125 ns through an epoll of one's own.)
 */
typedef struct {
    int       fd;          /* -1 until made */
    unsigned  instance;    /* of the queue it is registered on */
} mrb_file_watch_poller;

#define MRB_FILE_WATCH_POLLER_INIT  { -1, 0 }

/* The current epoch, or 0 when there is nothing to trust. */
uint64_t mrb_file_watch_epoch(mrb_file_watch_poller *poller);

void mrb_file_watch_poller_close(mrb_file_watch_poller *poller);

/*
 * Watches path (absolute) from now on, starting the watch in this process
 * if needed.  Returns 0, or -1 with the reason in why when path cannot be
 * watched: the caller then stats on every run.  A stat() made before this
 * call proves nothing: read the epoch after it.
 */
int mrb_file_watch_add(const char *path, char *why, size_t whylen);

#endif /* MRB_FILE_WATCH_H */
