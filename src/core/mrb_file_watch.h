/*
 * Change notification for `stat` scripts: lets a run skip the stat() of
 * its file while nothing that file's path resolves through has changed.
 *
 * One inotify instance per process, watching, for each path added, every
 * directory on the way (for the name looked up there, following symbolic
 * links) and the file itself.  Each path has an epoch of its own that
 * moves when a change to it counts; a caller that found a file unchanged
 * at epoch E may trust it as long as that path's epoch is still E (a load
 * and a compare).
 *
 * A change counts when the writer is done: a close after writing, a
 * rename, a link switch, a removal.  A write alone (IN_MODIFY) counts only
 * after MRB_FILE_WATCH_QUIET_MS without another one, for a writer that
 * keeps the file open; until then runs keep the version they trust, so no
 * run compiles a half-written file.
 *
 * Who reads the queue: either the caller, on every run, through
 * mrb_file_watch_poll (one epoll_wait; a run that starts after an edit
 * sees it), or an event loop that the adapter drives (mrb_file_watch_start,
 * mrb_file_watch_process: nginx's own epoll, an Apache thread), and then a
 * run only loads its path's epoch: the edit is seen by the runs that start
 * after the loop has read the event.
 *
 * An epoch is 0, and every run stats, until a watch works in this process,
 * after a fork, and when a path's file system may change behind the
 * kernel's back (NFS, CIFS, FUSE, ...): only local file systems are watched.
 */

#ifndef MRB_FILE_WATCH_H
#define MRB_FILE_WATCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* How long a file written and kept open must stay untouched to count. */
#define MRB_FILE_WATCH_QUIET_MS  500

/* A watched path; lives as long as the process. */
typedef struct mrb_file_watch_path_s  mrb_file_watch_path;

/* What every path starts with: its epoch, read without a lock. */
typedef struct {
    _Atomic uint64_t  epoch;
} mrb_file_watch_path_head;

/* The path's epoch, or 0 when there is nothing to trust. */
static inline uint64_t
mrb_file_watch_path_epoch(const mrb_file_watch_path *path)
{
    return atomic_load_explicit(&((mrb_file_watch_path_head *) path)->epoch,
                                memory_order_acquire);
}

/*
 * Watches path (absolute) from now on, starting the watch in this process
 * if needed.  Returns the path, or NULL with the reason in why when it
 * cannot be watched: the caller then stats on every run.  A stat() made
 * before this call proves nothing: read the epoch after it.
 */
mrb_file_watch_path *mrb_file_watch_add(const char *path, char *why,
    size_t whylen);

/*
 * Whether the file of path is being written (a write seen, neither a close
 * nor MRB_FILE_WATCH_QUIET_MS of quiet yet); *ms: since how long.
 */
int mrb_file_watch_writing(mrb_file_watch_path *path, long *ms);


/*
 * Whether nothing has changed path since its epoch was `epoch`: the queue
 * read (through poller, even when a loop reads it), no write in progress
 * and the same epoch.  A run that read the file after seeing `epoch` calls
 * this before it trusts what it read: a writer that began meanwhile is
 * caught, its first event being queued before its first write returns.
 */
struct mrb_file_watch_poller_s;
int mrb_file_watch_settled(mrb_file_watch_path *path,
    struct mrb_file_watch_poller_s *poller, uint64_t epoch);


/* --- Asked by each run (no event loop reads the queue) --- */

/*
 * What a caller asks the queue through: an epoll instance of its own,
 * registered on the queue, made on first use.  One per interpreter: an
 * interpreter is used by one thread at a time, and its epoll stays warm in
 * the CPU caches with it.  (Threads asking the queue's own descriptor at
 * once make its reference count bounce between cores: 370 ns a call with
 * two threads, against 125 ns through an epoll of one's own, build/
 * test_core --bench, 2026-11-22.)
 */
typedef struct mrb_file_watch_poller_s {
    int       fd;          /* -1 until made */
    unsigned  instance;    /* of the queue it is registered on */
} mrb_file_watch_poller;

#define MRB_FILE_WATCH_POLLER_INIT  { -1, 0 }

/*
 * Processes what the queue holds, if anything, and the writes whose quiet
 * interval is over.  Nothing (not even a system call) when an event loop
 * drives the watch.
 */
void mrb_file_watch_poll(mrb_file_watch_poller *poller);

void mrb_file_watch_poller_close(mrb_file_watch_poller *poller);


/* --- Driven by an event loop --- */

/*
 * Starts the queue of this process now and says an event loop reads it
 * from now on: runs stop asking it.  Returns its descriptor, to be
 * watched for reading, or -1 with why (then runs ask, as without a loop).
 */
int mrb_file_watch_start(char *why, size_t whylen);

/* What mrb_file_watch_process leaves for later. */
#define MRB_FILE_WATCH_IDLE  -1L   /* nothing: wait for the descriptor */
#define MRB_FILE_WATCH_MORE  -2L   /* events or work left: call again
                                      soon, readable or not */
#define MRB_FILE_WATCH_GONE  -3L   /* the queue failed and is closed: runs
                                      stat() from now on, stop reading */

/*
 * Reads one batch of events (a few hundred at most, so that a deploy
 * rewriting every script is spread over many calls) and applies it, then
 * takes the writes quiet for long enough, and after a queue overflow
 * watches a slice of the paths again.  Each call stays within a few
 * milliseconds whatever the number of paths.  Returns MRB_FILE_WATCH_MORE,
 * MRB_FILE_WATCH_IDLE, MRB_FILE_WATCH_GONE, or the milliseconds until the
 * next quiet interval ends (call again then).
 */
long mrb_file_watch_process(void);

/* Says that no loop reads the queue any more (the loop's process ends). */
void mrb_file_watch_stop_driving(void);


/* --- Limits --- */

/*
 * Compares what a configuration needs (watches in each process, and how
 * many processes) with fs.inotify.max_user_watches and
 * max_user_instances.  Writes one line for the log into msg; returns 0
 * when it fits, 1 when it does not (the line says what to raise), -1 when
 * the limits cannot be read.
 */
int mrb_file_watch_check_limits(size_t scripts, size_t watches,
    size_t processes, char *msg, size_t msglen);

#endif /* MRB_FILE_WATCH_H */
