/*
 * Content handlers that give their thread back while they wait (sleep,
 * usleep, Apache.sleep, Apache::Async.sleep, a Redis reply), on the event
 * MPM, the way
 * httpd's mod_dialup does: the script is suspended on its coroutine
 * (mrb_wait.h), the handler returns SUSPENDED, and a timed callback of the
 * MPM resumes it on whichever worker thread runs the callback, then ends
 * the request as ap_process_async_request would have
 * (ap_finalize_request_protocol or ap_die, then
 * ap_process_request_after_handler).
 *
 * Interpreters are lent per run (mrb_interp.h): the handler gives its
 * interpreter back while the script waits, so that other requests run in
 * it, and the callback takes that same interpreter back
 * (mrb_interp_take_this) before it resumes the script: no two threads use
 * one interpreter at once.  The request's pool, filters and connection are
 * touched by one thread at a time: the handler's until the MPM has
 * suspended the connection (the timer is set from the suspend_connection
 * hook, the MPM's last act on it), then the callback's, under
 * r->invoke_mtx as in mod_dialup.
 *
 * Apache 2.4 has no way to hand a suspended connection back to the event
 * MPM (ap_mpm_resume_suspended is in httpd's trunk only): mod_dialup
 * leaves it open for good (a second request on its keep-alive connection
 * is never answered).  So a response that waited says "Connection: close",
 * and after it the callback closes the connection (flush, shutdown, drain
 * what the client sent) and destroys its pool, which also tells the MPM
 * the connection is gone.
 *
 * A Redis call waits for its socket (mrb_server.wake_on_fd) with its
 * command's deadline: httpd 2.4.71's event MPM offers modules timed
 * callbacks only (no socket callback in its ap_mpm.h), so the child's
 * timer thread (below) watches the socket in its epoll set, and whichever
 * comes first, the socket or the deadline, ends the watch and hands the
 * request to a worker the same way as a timer.
 *
 * A client that goes away while its script waits: the timer fires at
 * least once a second (AP_MRB_WAIT_CHECK) and looks at the socket; a
 * closed one cancels the script (Apache::Async::Cancelled: ensure clauses
 * run, the coroutine and its stack are freed).
 *
 * Where the MPM cannot do this (prefork, worker), in other phases than the
 * content handler, in subrequests, internal redirects and HTTP/2 streams,
 * a sleep blocks the thread as before (mrb_server.sleep_blocks), and so
 * does a Redis call (mrb_wait_fd's poll()).
 */

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <ap_mpm.h>
#include <apr_portable.h>
#include <apr_thread_mutex.h>
#include <http_connection.h>
#include <http_core.h>
#include <http_protocol.h>
#include <http_request.h>
#include <mpm_common.h>

#include "ap_mrb.h"
#include "mrb_wait.h"

APLOG_USE_MODULE(mruby);

/* How often a waiting request looks whether its client is still there. */
#define AP_MRB_WAIT_CHECK  apr_time_from_sec(1)

/* What the callback drains of a closed connection's input, at most. */
#define AP_MRB_WAIT_DRAIN  (64 * 1024)

struct ap_mrb_waiter_s {
    request_rec   *r;
    mrb_interp    *interp;     /* where the script waits */
    mrb_run_rec   *waiting;    /* the core's waiting run, or NULL */
    mrb_script    *script;
    const char    *what;       /* names the handler in error lines */
    void          *sbh;        /* the connection's scoreboard handle,
                                  which the MPM clears when it suspends */
    apr_time_t     wake_at;    /* when the script asked to go on
                                  (ap_mrb_wait_now's clock) */
    apr_time_t     due;        /* its next callback: wake_at, or a check
                                  of the client */
    apr_size_t     heap_at;    /* its place in the timer heap */
    int            fd;         /* a Redis socket it waits for (on_fd) */
    int            fd_events;  /* EPOLLIN or EPOLLOUT */
    int           *fd_ready;   /* mrb_wait_fd's: 1 if the socket came first */
    unsigned       on_fd:1;    /* the script waits for fd, wake_at is its
                                  deadline */
    unsigned       fd_fired:1; /* fd was ready before the deadline */
    unsigned       watching:1; /* fd is in the timer thread's epoll set */
    unsigned       armed:1;    /* in the timer heap or the MPM's queue */
    unsigned       mpm_left:1; /* the MPM's thread is done with it */
};

/* Whether this child's MPM suspends connections (the event MPM). */
static int  ap_mrb_wait_mpm;

static void ap_mrb_wait_wake(void *baton);


/*
 * The timer thread.  httpd 2.4's listener (2.4.71 at least) sets its
 * poll() timeout from the timers only in a pass that finds one due: woken
 * by a timer registered for later, or by anything else, it polls again
 * with no timeout, and a timer for later fires only when something else
 * wakes it (a new connection, a keep-alive timeout: httpd's own mod_dialup
 * stalls so).  A timer due at once is always handed to a worker at the
 * listener's next pass.  So the child keeps its waiting requests in a heap
 * by time, and one thread of its own registers each when it is due, as a
 * timer of no delay: the MPM's workers run the callbacks.  It sleeps in
 * epoll_wait, on the Redis sockets of its waiting requests and an eventfd
 * that says the heap changed.
 */
static pthread_mutex_t    ap_mrb_timer_lock = PTHREAD_MUTEX_INITIALIZER;
static int                ap_mrb_timer_epoll = -1, ap_mrb_timer_event = -1;
static ap_mrb_waiter    **ap_mrb_timer_heap;
static apr_size_t         ap_mrb_timer_len, ap_mrb_timer_cap;
static int                ap_mrb_timer_started, ap_mrb_timer_stopping;


/* Microseconds of the monotonic clock (the timer thread's condvar's). */
static apr_time_t
ap_mrb_wait_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (apr_time_t) ts.tv_sec * APR_USEC_PER_SEC + ts.tv_nsec / 1000;
}


static void
ap_mrb_timer_place(apr_size_t i, ap_mrb_waiter *w)
{
    ap_mrb_timer_heap[i] = w;
    w->heap_at = i;
}


static void
ap_mrb_timer_swap(apr_size_t i, apr_size_t j)
{
    ap_mrb_waiter  *w = ap_mrb_timer_heap[i];

    ap_mrb_timer_place(i, ap_mrb_timer_heap[j]);
    ap_mrb_timer_place(j, w);
}


static void
ap_mrb_timer_sift_up(apr_size_t i)
{
    while (i > 0 && ap_mrb_timer_heap[(i - 1) / 2]->due
                    > ap_mrb_timer_heap[i]->due)
    {
        ap_mrb_timer_swap(i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}


static void
ap_mrb_timer_sift_down(apr_size_t i)
{
    apr_size_t  c;

    for ( ;; ) {
        c = 2 * i + 1;
        if (c >= ap_mrb_timer_len) {
            break;
        }
        if (c + 1 < ap_mrb_timer_len
            && ap_mrb_timer_heap[c + 1]->due < ap_mrb_timer_heap[c]->due)
        {
            c++;
        }
        if (ap_mrb_timer_heap[i]->due <= ap_mrb_timer_heap[c]->due) {
            break;
        }
        ap_mrb_timer_swap(i, c);
        i = c;
    }
}


/* Adds w (ap_mrb_timer_lock held); 0, or -1 out of memory. */
static int
ap_mrb_timer_push_locked(ap_mrb_waiter *w)
{
    ap_mrb_waiter  **heap;
    apr_size_t       cap;

    if (ap_mrb_timer_len == ap_mrb_timer_cap) {
        cap = ap_mrb_timer_cap ? ap_mrb_timer_cap * 2 : 64;
        heap = realloc(ap_mrb_timer_heap, cap * sizeof(ap_mrb_waiter *));
        if (heap == NULL) {
            return -1;
        }
        ap_mrb_timer_heap = heap;
        ap_mrb_timer_cap = cap;
    }

    ap_mrb_timer_place(ap_mrb_timer_len++, w);
    ap_mrb_timer_sift_up(w->heap_at);

    return 0;
}


/* Takes w out of the heap (ap_mrb_timer_lock held). */
static void
ap_mrb_timer_remove_locked(ap_mrb_waiter *w)
{
    apr_size_t  i = w->heap_at;

    if (i != --ap_mrb_timer_len) {
        ap_mrb_timer_place(i, ap_mrb_timer_heap[ap_mrb_timer_len]);
        ap_mrb_timer_sift_down(i);
        ap_mrb_timer_sift_up(i);
    }
}


/* Wakes the timer thread (ap_mrb_timer_lock held); a counter that is
 * full (EAGAIN) wakes it as well. */
static void
ap_mrb_timer_poke_locked(void)
{
    uint64_t  one = 1;
    ssize_t   n;

    n = write(ap_mrb_timer_event, &one, sizeof(one));
    (void) n;
}


/*
 * Hands w to a worker (ap_mrb_timer_lock held, w out of the heap): its
 * socket leaves the epoll set first, so that the watch has ended when the
 * script resumes on that worker.
 */
static void
ap_mrb_timer_fire_locked(ap_mrb_waiter *w)
{
    apr_status_t  rv;

    if (w->watching) {
        epoll_ctl(ap_mrb_timer_epoll, EPOLL_CTL_DEL, w->fd, NULL);
        w->watching = 0;
    }

    rv = ap_mpm_register_timed_callback(0, ap_mrb_wait_wake, w);
    if (rv != APR_SUCCESS) {
        ap_log_rerror(APLOG_MARK, APLOG_CRIT, rv, w->r, "%s: cannot "
                      "register the timed callback that resumes the "
                      "script: the request stays suspended", w->what);
    }
}


#define AP_MRB_TIMER_EVENTS  64

static void *
ap_mrb_timer_main(void *arg)
{
    ap_mrb_waiter       *w;
    apr_time_t           now;
    uint64_t             count;
    ssize_t              done;
    int                  i, n, msec;
    struct epoll_event   ev[AP_MRB_TIMER_EVENTS];

    pthread_mutex_lock(&ap_mrb_timer_lock);

    while (!ap_mrb_timer_stopping) {
        now = ap_mrb_wait_now();

        /* under the lock: the child's exit stops this before the MPM's
         * timer queue goes */
        while (ap_mrb_timer_len > 0 && ap_mrb_timer_heap[0]->due <= now) {
            w = ap_mrb_timer_heap[0];
            ap_mrb_timer_remove_locked(w);
            ap_mrb_timer_fire_locked(w);
        }

        /* rounded up: woken early, it would only go back to sleep */
        msec = ap_mrb_timer_len == 0
               ? -1
               : (int) ((ap_mrb_timer_heap[0]->due - now + 999) / 1000);

        pthread_mutex_unlock(&ap_mrb_timer_lock);
        n = epoll_wait(ap_mrb_timer_epoll, ev, AP_MRB_TIMER_EVENTS, msec);
        pthread_mutex_lock(&ap_mrb_timer_lock);

        /* a socket in the set is watched until this thread ends the
         * watch: each w here still waits for it */
        for (i = 0; i < n; i++) {
            w = ev[i].data.ptr;
            if (w == NULL) {
                /* a poke: the heap changed, the loop looks at it again */
                done = read(ap_mrb_timer_event, &count, sizeof(count));
                (void) done;
                continue;
            }
            if (w->watching) {
                w->fd_fired = 1;
                ap_mrb_timer_remove_locked(w);
                ap_mrb_timer_fire_locked(w);
            }
        }
    }

    pthread_mutex_unlock(&ap_mrb_timer_lock);
    return NULL;
}


static apr_status_t
ap_mrb_timer_stop(void *data)
{
    pthread_mutex_lock(&ap_mrb_timer_lock);
    ap_mrb_timer_stopping = 1;
    if (ap_mrb_timer_started) {
        ap_mrb_timer_poke_locked();
    }
    pthread_mutex_unlock(&ap_mrb_timer_lock);
    return APR_SUCCESS;
}


/* The timer thread, once per child, at its first waiting request. */
static int
ap_mrb_timer_start_locked(void)
{
    pthread_attr_t      tattr;
    pthread_t           thread;
    struct epoll_event  ev;

    if (ap_mrb_timer_started) {
        return 0;
    }

    if (ap_mrb_timer_epoll == -1) {
        ap_mrb_timer_epoll = epoll_create1(EPOLL_CLOEXEC);
        if (ap_mrb_timer_epoll == -1) {
            return -1;
        }
    }

    if (ap_mrb_timer_event == -1) {
        ap_mrb_timer_event = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (ap_mrb_timer_event == -1) {
            return -1;
        }
        ev.events = EPOLLIN;
        ev.data.ptr = NULL;
        if (epoll_ctl(ap_mrb_timer_epoll, EPOLL_CTL_ADD, ap_mrb_timer_event,
                      &ev) != 0)
        {
            close(ap_mrb_timer_event);
            ap_mrb_timer_event = -1;
            return -1;
        }
    }

    pthread_attr_init(&tattr);
    pthread_attr_setdetachstate(&tattr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &tattr, ap_mrb_timer_main, NULL) != 0) {
        pthread_attr_destroy(&tattr);
        return -1;
    }
    pthread_attr_destroy(&tattr);

    ap_mrb_timer_started = 1;
    return 0;
}


void
ap_mrb_wait_child_init(apr_pool_t *pchild)
{
    int          async;
    const char  *mpm = ap_run_mpm_get_name();

    ap_mrb_wait_mpm = ap_mpm_query(AP_MPMQ_IS_ASYNC, &async) == APR_SUCCESS
                      && async && mpm != NULL && strcmp(mpm, "event") == 0;

    if (ap_mrb_wait_mpm) {
        /* before the MPM's own cleanups take its timer queue away */
        apr_pool_pre_cleanup_register(pchild, NULL, ap_mrb_timer_stop);
    }
}


int
ap_mrb_wait_possible(request_rec *r)
{
    conn_rec  *c = r->connection;

    /* only ap_process_async_request handles a SUSPENDED handler: not a
     * subrequest, an internal redirect, an HTTP/2 stream (c->master) or a
     * connection processed synchronously (clogging input filters) */
    return ap_mrb_wait_mpm && r->main == NULL && r->prev == NULL
           && c->master == NULL && c->cs != NULL
           && !c->clogging_input_filters && r->invoke_mtx != NULL;
}


static ap_mrb_waiter *
ap_mrb_waiter_get(request_rec *r)
{
    ap_mrb_req_ctx  *ctx = ap_mrb_req_ctx_get(r);

    if (ctx->waiter == NULL) {
        ctx->waiter = apr_pcalloc(r->pool, sizeof(ap_mrb_waiter));
        ctx->waiter->r = r;
    }

    return ctx->waiter;
}


/* mrb_server.wake_after: the script is about to suspend for msec. */
int
ap_mrb_wake_after(mrb_run_rec *run, mrb_int msec)
{
    ap_mrb_waiter  *w = ap_mrb_waiter_get(run->request);

    w->wake_at = ap_mrb_wait_now() + apr_time_from_msec(msec);
    w->on_fd = 0;
    return 0;
}


/* mrb_server.wake_on_fd: the script is about to suspend until fd is ready
 * for events, or for msec at most; the watch begins when it is armed. */
int
ap_mrb_wake_on_fd(mrb_run_rec *run, int fd, int events, mrb_int msec,
    int *ready)
{
    ap_mrb_waiter  *w = ap_mrb_waiter_get(run->request);

    w->wake_at = ap_mrb_wait_now() + apr_time_from_msec(msec);
    w->fd = fd;
    w->fd_events = (events & MRB_FD_WRITE) ? EPOLLOUT : EPOLLIN;
    w->fd_ready = ready;
    w->fd_fired = 0;
    w->on_fd = 1;
    return 0;
}


int
ap_mrb_wait_begin(request_rec *r, mrb_interp *interp, mrb_run_rec *run,
    mrb_script *script, const char *what)
{
    ap_mrb_waiter  *w = ap_mrb_waiter_get(r);

    w->interp = interp;
    w->waiting = run->waiting;
    w->script = script;
    w->what = what;
    w->sbh = r->connection->sbh;
    w->armed = 0;
    w->mpm_left = 0;

    /* the MPM will not read this connection again (see above) */
    r->connection->keepalive = AP_CONN_CLOSE;
    return SUSPENDED;
}


/* Puts w's socket in the timer thread's epoll set (ap_mrb_timer_lock
 * held); 0, or -1 (errno). */
static int
ap_mrb_timer_watch_locked(ap_mrb_waiter *w)
{
    struct epoll_event  ev;

    ev.events = (uint32_t) w->fd_events;
    ev.data.ptr = w;
    if (epoll_ctl(ap_mrb_timer_epoll, EPOLL_CTL_ADD, w->fd, &ev) != 0) {
        return -1;
    }

    w->watching = 1;
    return 0;
}


/*
 * Schedules the next callback: when the script asked to go on (its
 * socket is ready, or its deadline), or a check of the client a second
 * from now if that comes first.  -1 when no timer could be set (logged):
 * the caller ends the wait.
 */
static int
ap_mrb_wait_arm(ap_mrb_waiter *w)
{
    apr_time_t    check = ap_mrb_wait_now() + AP_MRB_WAIT_CHECK;
    apr_status_t  err = 0;
    int           rc;

    w->due = w->wake_at < check ? w->wake_at : check;
    w->armed = 1;

    pthread_mutex_lock(&ap_mrb_timer_lock);
    rc = ap_mrb_timer_start_locked();
    if (rc == 0) {
        rc = ap_mrb_timer_push_locked(w);
    }
    if (rc == 0 && w->on_fd && ap_mrb_timer_watch_locked(w) != 0) {
        err = errno;
        ap_mrb_timer_remove_locked(w);
        rc = -1;
    }
    if (rc == 0 && ap_mrb_timer_heap[0] == w) {
        ap_mrb_timer_poke_locked();
    }
    pthread_mutex_unlock(&ap_mrb_timer_lock);

    if (rc != 0) {
        w->armed = 0;
        ap_log_rerror(APLOG_MARK, APLOG_CRIT, err, w->r, "%s: cannot "
                      "start the timer of a waiting script or watch its "
                      "socket (out of memory, threads or descriptors): %s",
                      w->what, w->mpm_left ? "it waits on this thread"
                                           : "the request stays suspended");
    }

    return rc;
}


/*
 * The suspend_connection hook: the MPM has put the connection aside (the
 * last thing it does with it), so the callback may now run on any thread.
 */
static void
ap_mrb_wait_suspended(conn_rec *c, request_rec *r)
{
    ap_mrb_req_ctx  *ctx;

    if (r == NULL || c->cs == NULL || c->cs->state != CONN_STATE_SUSPENDED) {
        return;
    }

    ctx = ap_get_module_config(r->request_config, &mruby_module);
    if (ctx == NULL || ctx->waiter == NULL || ctx->waiter->waiting == NULL
        || ctx->waiter->armed)
    {
        return;
    }

    ap_mrb_wait_arm(ctx->waiter);
}


/* Whether the client has closed its end (or the connection failed). */
static int
ap_mrb_wait_client_gone(conn_rec *c)
{
    apr_socket_t   *csd = ap_get_conn_socket(c);
    apr_os_sock_t   fd;
    struct pollfd   pfd;
    char            byte;

    if (c->aborted) {
        return 1;
    }

    if (csd == NULL || apr_os_sock_get(&fd, csd) != APR_SUCCESS) {
        return 0;
    }

    pfd.fd = fd;
    pfd.events = POLLIN | POLLRDHUP;
    pfd.revents = 0;

    if (poll(&pfd, 1, 0) <= 0) {
        return 0;
    }

    if (pfd.revents & (POLLHUP | POLLERR | POLLRDHUP)) {
        return 1;
    }

    /* readable: bytes of a next request, or the end of the stream */
    return recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}


/*
 * After the response: the connection ends here, since the MPM will not
 * take it back.  Its pool holds the MPM's state of it; destroying the pool
 * closes the socket and counts the connection out of the MPM.
 */
static void
ap_mrb_wait_close(conn_rec *c)
{
    apr_socket_t  *csd = ap_get_conn_socket(c);
    char           buf[4096];
    apr_size_t     n, drained = 0;

    if (csd != NULL && !ap_start_lingering_close(c)) {
        /* what the client already sent, so that closing does not reset
         * the connection under the response; no waiting for more */
        apr_socket_timeout_set(csd, 0);
        do {
            n = sizeof(buf);
            if (apr_socket_recv(csd, buf, &n) != APR_SUCCESS) {
                break;
            }
            drained += n;
        } while (n > 0 && drained < AP_MRB_WAIT_DRAIN);
    }

    /* as the MPM counts it (its suspended connections) */
    c->cs->state = CONN_STATE_SUSPENDED;
    apr_pool_destroy(c->pool);
}


/* The script has ended: the request ends as ap_process_async_request
 * ends it after a handler, then the connection. */
static void
ap_mrb_wait_finish(request_rec *r, int status)
{
    conn_rec  *c = r->connection;

    if (status == DONE) {
        status = OK;
    }

    if (status == OK) {
        ap_finalize_request_protocol(r);
    } else {
        r->status = HTTP_OK;
        ap_die(status, r);
    }

    ap_process_request_after_handler(r);   /* r is gone after this */
    ap_mrb_wait_close(c);
}


/*
 * The MPM's thread calls the suspend_connection hook that armed the timer
 * and then still stores into the connection's state (c->sbh = NULL, its
 * suspended flag) before it lets the connection go.  The first callback
 * waits for that store to c->sbh (a few instructions after the hook,
 * unless that thread was preempted right there), so that it does not end
 * the connection under it; bounded, in case an MPM leaves c->sbh alone.
 */
static void
ap_mrb_wait_mpm_left(conn_rec *c)
{
    int  i;

    for (i = 0; i < 1000; i++) {
        if (__atomic_load_n(&c->sbh, __ATOMIC_ACQUIRE) == NULL) {
            return;
        }
        apr_sleep(10);
    }
}


/* Where no timer can be set: the wait goes on on this thread. */
static void
ap_mrb_wait_block(ap_mrb_waiter *w, apr_time_t left)
{
    struct pollfd  pfd;

    if (!w->on_fd) {
        apr_sleep(left);
        return;
    }

    pfd.fd = w->fd;
    pfd.events = (w->fd_events == EPOLLOUT) ? POLLOUT : POLLIN;
    pfd.revents = 0;
    /* rounded up, as the deadline is what makes the command fail */
    w->fd_fired = poll(&pfd, 1, (int) ((left + 999) / 1000)) != 0;
}


/*
 * The timed callback, on a worker thread: resume, cancel or wait on.
 * Where no timer can be set (logged), the wait goes on blocking this
 * thread.
 */
static void
ap_mrb_wait_wake(void *baton)
{
    ap_mrb_waiter  *w = baton;
    request_rec    *r = w->r;
    int             gone, rc, status;
    apr_time_t      left;
    mrb_run_rec     out;

    apr_thread_mutex_lock(r->invoke_mtx);
    w->armed = 0;

    if (!w->mpm_left) {
        ap_mrb_wait_mpm_left(r->connection);
        w->mpm_left = 1;
    }

    /* as the MPM's resume would (log lines say "client", not "remote") */
    r->connection->sbh = w->sbh;

    for ( ;; ) {
        gone = ap_mrb_wait_client_gone(r->connection);
        left = w->wake_at - ap_mrb_wait_now();

        if (!gone && left > 0 && !(w->on_fd && w->fd_fired)) {
            if (ap_mrb_wait_arm(w) == 0) {
                apr_thread_mutex_unlock(r->invoke_mtx);
                return;
            }
            ap_mrb_wait_block(w, left);
        }

        mrb_interp_take_this(w->interp);

        if (w->on_fd && w->fd_fired) {
            *w->fd_ready = 1;
        }

        if (gone) {
            ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "%s: %s: the client "
                          "went away while the script waited: cancelled",
                          w->what, mrb_script_name(w->script));
            r->connection->aborted = 1;
            mrb_wait_cancel(w->interp, w->waiting);
            mrb_interp_give_back(w->interp);
            w->waiting = NULL;
            status = DONE;
            break;
        }

        mrb_run_init(&out, r, OK);
        rc = mrb_wait_resume(w->interp, w->waiting, &out);
        mrb_interp_give_back(w->interp);

        if (rc != MRB_RUN_WAITING) {
            w->waiting = NULL;
            status = ap_mrb_run_result(r, w->script, &out, rc, OK, w->what);
            break;
        }
    }

    if (status == DECLINED) {
        /* the next handler cannot run any more */
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "%s: %s returned "
                      "DECLINED after it waited: no other handler can "
                      "answer now", w->what, mrb_script_name(w->script));
        status = HTTP_INTERNAL_SERVER_ERROR;
    }

    /* as mod_dialup: the mutex lives in r->pool, gone after the request */
    apr_thread_mutex_unlock(r->invoke_mtx);
    ap_mrb_wait_finish(r, status);
}


void
ap_mrb_register_wait_hooks(void)
{
    ap_hook_suspend_connection(ap_mrb_wait_suspended, NULL, NULL,
                               APR_HOOK_MIDDLE);
}
