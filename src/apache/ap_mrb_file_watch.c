/*
 * The file watch of `stat` scripts (src/core/mrb_file_watch.h) under
 * Apache: a watcher thread per child process, and the limits said at
 * startup.
 *
 * The thread sleeps in poll() on the child's inotify queue and applies
 * each batch of events as it comes (mrb_file_watch_process), so a run
 * only compares its script's epoch: no system call per request (each run
 * asked the queue through an epoll_wait before).
 *
 * The window: an edit is seen by the runs that start after the thread
 * has read its event.  The kernel queues the event before the write,
 * rename or close that caused it returns; the thread then needs to be
 * woken and scheduled, a few microseconds on an idle machine, longer on a
 * loaded one (docs/apache.md has the figures).  A request that starts in
 * between runs the version it trusted.
 *
 * Stopping: a threaded child (worker, event) joins the thread when pchild
 * goes, after its worker threads are gone.  A prefork child ends from its
 * SIGTERM handler (prefork's clean_child_exit), possibly while the code it
 * interrupted holds the watch's lock: joining a thread that may wait for
 * that lock could hang the exit, so the thread is only told to stop (a
 * write to its eventfd is async-signal-safe) and ends with the process.
 */

#include "ap_mrb.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <ap_mpm.h>

#include "mrb_file_watch.h"

APLOG_USE_MODULE(mruby);


/* Untouched pages cost nothing; poll() and a batch of events need little. */
#define AP_MRB_WATCHER_STACK  (256 * 1024)

typedef struct {
    pthread_t  thread;
    int        queue;     /* the inotify descriptor it reads */
    int        stop;      /* eventfd: readable when the thread must end */
    int        running;
} ap_mrb_watcher_t;

static ap_mrb_watcher_t  ap_mrb_watcher = { .queue = -1, .stop = -1 };

/* Whether some configuration enables mruby-script files (stat scripts
 * named at request time, which the configuration does not list). */
int  ap_mrb_handler_files;


static void *
ap_mrb_watcher_run(void *data)
{
    ap_mrb_watcher_t  *w = data;
    struct pollfd      fds[2];
    long               next = MRB_FILE_WATCH_IDLE;
    int                timeout;

    fds[0].fd = w->queue;
    fds[0].events = POLLIN;
    fds[1].fd = w->stop;
    fds[1].events = POLLIN;

    for ( ;; ) {
        timeout = next == MRB_FILE_WATCH_IDLE ? -1
                  : next == MRB_FILE_WATCH_MORE ? 0 : (int) next;

        if (poll(fds, 2, timeout) < 0 && errno != EINTR) {
            break;
        }
        if (fds[1].revents != 0) {
            break;
        }

        next = mrb_file_watch_process();
        if (next == MRB_FILE_WATCH_GONE) {
            break;       /* runs stat() from now on */
        }
    }

    return NULL;
}


static apr_status_t
ap_mrb_watcher_stop(void *data)
{
    ap_mrb_watcher_t  *w = &ap_mrb_watcher;
    uint64_t           one = 1;
    int                join = data != NULL;

    if (!w->running) {
        return APR_SUCCESS;
    }

    if (write(w->stop, &one, sizeof(one)) != sizeof(one) || !join) {
        return APR_SUCCESS;
    }

    pthread_join(w->thread, NULL);
    w->running = 0;
    mrb_file_watch_stop_driving();
    close(w->stop);
    w->stop = -1;
    return APR_SUCCESS;
}


void
ap_mrb_file_watch_child_init(apr_pool_t *pchild, server_rec *s, int threaded)
{
    ap_mrb_watcher_t  *w = &ap_mrb_watcher;
    char               why[MRB_ERR_REASON_LEN];
    size_t             scripts = 0, watches;
    sigset_t           all, old;
    pthread_attr_t     attr;
    int                rc;

    if (!ap_mrb_handler_files
        && (mrb_script_watch_needs(&scripts, &watches) != 0 || scripts == 0))
    {
        return;          /* no `stat` script: no queue, no thread */
    }

    w->stop = eventfd(0, EFD_CLOEXEC);
    if (w->stop < 0) {
        ap_log_error(APLOG_MARK, APLOG_NOTICE, errno, s, "mod_mruby: no "
                     "watcher thread (eventfd): each `stat` run asks the "
                     "file watch");
        return;
    }

    w->queue = mrb_file_watch_start(why, sizeof(why));
    if (w->queue < 0) {
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s, "mod_mruby: `stat` "
                     "scripts are stat()ed on every run: %s", why);
        goto failed;
    }

    /* signals stay with the MPM's threads */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, AP_MRB_WATCHER_STACK);
    rc = pthread_create(&w->thread, &attr, ap_mrb_watcher_run, w);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    if (rc != 0) {
        ap_log_error(APLOG_MARK, APLOG_NOTICE, rc, s, "mod_mruby: no "
                     "watcher thread: each `stat` run asks the file watch");
        mrb_file_watch_stop_driving();
        goto failed;
    }

    w->running = 1;
    apr_pool_cleanup_register(pchild, threaded ? w : NULL,
                              ap_mrb_watcher_stop, apr_pool_cleanup_null);
    return;

failed:
    close(w->stop);
    w->stop = -1;
}


void
ap_mrb_file_watch_limits(server_rec *s)
{
    char    msg[512];
    size_t  scripts, watches;
    int     daemons = 1, rc;

    if (mrb_script_watch_needs(&scripts, &watches) != 0 || scripts == 0) {
        return;
    }

    if (ap_mpm_query(AP_MPMQ_MAX_DAEMONS, &daemons) != APR_SUCCESS
        || daemons < 1)
    {
        daemons = 1;
    }

    rc = mrb_file_watch_check_limits(scripts, watches, (size_t) daemons,
                                     msg, sizeof(msg));
    ap_log_error(APLOG_MARK, rc == 0 ? APLOG_NOTICE : APLOG_WARNING, 0, s,
                 "mod_mruby: %s", msg);
}
