/*
 * The startup scripts and the interpreter of each worker process, for the
 * http and the stream module alike: init in the master, in the interpreter
 * each worker then takes over (as the original's workers inherited its
 * state); init_worker in the worker's interpreter before it serves;
 * exit_worker before it is closed.  And one script run in that interpreter.
 */

#include "ngx_mruby.h"
#include <ngx_event.h>

#include "mrb_alloc.h"
#include "mrb_run_budget.h"
#include "mrb_script.h"
#include "mrb_shdict_file.h"
#include "mrb_wait.h"


typedef struct {
    ngx_mruby_process_t    *process;
    ngx_mruby_main_conf_t  *conf;
} ngx_mruby_worker_ctx_t;


/* the worker's stack trims (mrb_wait_trim), while a burst's stacks stay;
 * nginx's debug log names a timer by the descriptor of the connection
 * ev->data points to, and this one has none (nginx's cache manager does
 * the same) */
static ngx_event_t        ngx_mruby_trim_timer;
static ngx_connection_t   ngx_mruby_trim_ident = { .fd = (ngx_socket_t) -1 };
static mrb_interp        *ngx_mruby_trim_interp;


/* Runs each script of an array, logging a failure under the directive. */
static void
ngx_mruby_run_startup(mrb_interp *interp, ngx_array_t *scripts,
    const char *directive, ngx_log_t *log)
{
    mrb_run_rec          run;
    ngx_uint_t           i;
    ngx_mruby_script_t **s;

    s = scripts->elts;

    for (i = 0; i < scripts->nelts; i++) {
        mrb_run_init(&run, NULL, 0);
        run.startup = 1;
        run.memory_limit = MRB_RUN_STARTUP_MEMORY;

        if (mrb_script_run(interp, s[i]->script, &run) != 0) {
            ngx_log_error(NGX_LOG_ERR, log, 0, "mruby: %s: %s",
                          directive, run.error);
        }
    }
}


/* The master drops the init interpreter of a configuration it no longer
 * runs; a worker took its copy over before (and set the pointer NULL). */
static void
ngx_mruby_init_interp_cleanup(void *data)
{
    ngx_mruby_main_conf_t  *mcf = data;

    mrb_interp_close(mcf->init_interp);
    mcf->init_interp = NULL;
}


/*
 * The directory of Cache.new(namespace:) files, made by the master while
 * it is root and given to the workers' user.  A directory that cannot be
 * made is no reason to stop nginx: it is logged, and Cache.new says the
 * same to the script that needs it.
 */
static void
ngx_mruby_cache_dir_init(ngx_mruby_main_conf_t *mcf, ngx_cycle_t *cycle)
{
    char              err[MRB_ERR_MSG_LEN];
    u_char           *dir, *p;
    size_t            len;
    ngx_core_conf_t  *ccf;

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);

    if (mcf->cache_dir.len != 0) {
        dir = ngx_pnalloc(cycle->pool, mcf->cache_dir.len + 1);
        if (dir == NULL) {
            return;
        }

        ngx_memcpy(dir, mcf->cache_dir.data, mcf->cache_dir.len);
        dir[mcf->cache_dir.len] = '\0';

    } else {
        /* the pid file's directory (a full name by now) */
        for (len = ccf->pid.len; len > 0 && ccf->pid.data[len - 1] != '/';
             len--)
        {
            /* void */
        }

        dir = ngx_pnalloc(cycle->pool, len + sizeof(NGX_MRUBY_CACHE_DIR));
        if (dir == NULL) {
            return;
        }

        p = ngx_cpymem(dir, ccf->pid.data, len);
        ngx_memcpy(p, NGX_MRUBY_CACHE_DIR, sizeof(NGX_MRUBY_CACHE_DIR));
    }

    if (mrb_shdict_file_set_dir((char *) dir,
            ccf->user == (ngx_uid_t) NGX_CONF_UNSET_UINT
            ? -1 : (long) ccf->user,
            (long) ccf->group, err, sizeof(err)) != 0)
    {
        ngx_log_error(NGX_LOG_WARN, cycle->log, 0, "mruby: %s "
                      "(mruby_cache_dir)", err);
    }
}


ngx_int_t
ngx_mruby_init_master(ngx_mruby_process_t *p, ngx_mruby_main_conf_t *mcf,
    ngx_cycle_t *cycle)
{
    char                 err[MRB_ERR_MSG_LEN];
    mrb_interp          *interp;
    ngx_pool_cleanup_t  *cln;

    /* the configuration's scripts are compiled: the compiler (~110 kB)
     * need not be in every worker; a later compile (a reload's, an edit's
     * in a worker) opens it again */
    mrb_script_compiler_close();

    if (mcf == NULL || ngx_test_config) {
        return NGX_OK;
    }

    ngx_mruby_file_watch_limits(cycle);
    ngx_mruby_cache_dir_init(mcf, cycle);

    if (mcf->init.nelts == 0) {
        return NGX_OK;
    }

    interp = mrb_interp_open(p->server, cycle->log, err, sizeof(err));
    if (interp == NULL) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0, "%s: %s", p->init, err);
        return NGX_ERROR;
    }

    ngx_mruby_run_startup(interp, &mcf->init, p->init, cycle->log);

    cln = ngx_pool_cleanup_add(cycle->pool, 0);
    if (cln == NULL) {
        mrb_interp_close(interp);
        return NGX_ERROR;
    }

    cln->handler = ngx_mruby_init_interp_cleanup;
    cln->data = mcf;
    mcf->init_interp = interp;

    return NGX_OK;
}


static void
ngx_mruby_init_worker_scripts(mrb_interp *interp, void *arg)
{
    ngx_mruby_worker_ctx_t  *ctx = arg;

    ngx_mruby_run_startup(interp, &ctx->conf->init_worker,
                          ctx->process->init_worker, ngx_cycle->log);
}


ngx_int_t
ngx_mruby_init_worker(ngx_mruby_process_t *p, ngx_mruby_main_conf_t *mcf,
    ngx_cycle_t *cycle)
{
    char                    err[MRB_ERR_MSG_LEN];
    ngx_mruby_worker_ctx_t  ctx;

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;  /* cache manager and loader run no scripts */
    }

    if (mcf == NULL || !mcf->enabled) {
        return NGX_OK;
    }

    ctx.process = p;
    ctx.conf = mcf;

    if (mcf->init_interp != NULL) {
        /* this process's copy now: the cycle's cleanup must not close it */
        p->interp = mcf->init_interp;
        mcf->init_interp = NULL;

        mrb_interp_seed_random(p->interp);
        ngx_mruby_init_worker_scripts(p->interp, &ctx);
        mrb_interp_seal(p->interp);

    } else {
        p->interp = mrb_interp_new(p->server, cycle->log,
                                   ngx_mruby_init_worker_scripts, &ctx,
                                   err, sizeof(err));
    }

    if (p->interp == NULL) {
        /* the worker serves on: each script run fails and says why */
        ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
                      "%s: no interpreter in this worker: %s", p->name, err);
        return NGX_OK;
    }

    ngx_mruby_file_watch_init(cycle);

    /* after the startup scripts: they have no time budget */
    if (mrb_run_clock_start(err, sizeof(err)) != 0) {
        ngx_log_error(NGX_LOG_ALERT, cycle->log, 0, "%s: %s", p->name, err);
    }

    return NGX_OK;
}


void
ngx_mruby_exit_worker(ngx_mruby_process_t *p, ngx_mruby_main_conf_t *mcf,
    ngx_cycle_t *cycle)
{
    if (p->interp == NULL) {
        return;
    }

    if (mcf != NULL) {
        ngx_mruby_run_startup(p->interp, &mcf->exit_worker, p->exit_worker,
                              cycle->log);
    }

    if (ngx_mruby_trim_timer.timer_set) {
        ngx_del_timer(&ngx_mruby_trim_timer);
    }

    ngx_mruby_file_watch_exit();
    mrb_run_clock_stop();

    /* the process exits next: close it so that its finalizers run */
    mrb_interp_close(p->interp);
    p->interp = NULL;
}


mrb_interp *
ngx_mruby_interp(ngx_mruby_process_t *p, ngx_log_t *log)
{
    if (p->interp == NULL) {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "%s: this process has no interpreter (see the alert "
                      "at its start)", p->name);
    }

    return p->interp;
}


static void
ngx_mruby_trim(ngx_event_t *ev)
{
    if (mrb_wait_trim(ngx_mruby_trim_interp)) {
        ngx_add_timer(ev, MRB_WAIT_TRIM_MS);
    }
}


void
ngx_mruby_trim_later(mrb_interp *interp)
{
    ngx_event_t  *ev = &ngx_mruby_trim_timer;

    if (ev->timer_set) {
        return;
    }

    ngx_mruby_trim_interp = interp;
    ev->handler = ngx_mruby_trim;
    ev->data = &ngx_mruby_trim_ident;
    ev->log = ngx_cycle->log;
    ev->cancelable = 1;
    ngx_add_timer(ev, MRB_WAIT_TRIM_MS);
}


/*
 * A wake at its deadline, never before.
 *
 * nginx's timers count whole milliseconds of ngx_current_msec, the clock
 * read once per pass of the event loop (ngx_time_update), and fire at the
 * first pass whose millisecond is at or past theirs.  A deadline in the
 * middle of a millisecond is either early there (a timer for its own
 * millisecond fires at any pass in it) or late (one for the next fires
 * only then, 0.5 ms after the deadline on average); and when the worker
 * has nothing else to do, the epoll timeout counts from the pass's cached
 * time, which adds up to another millisecond: a sleep armed for msec + 1
 * from the fresh clock ended ~1.1 ms late on an idle worker (median, 10 ms
 * sleeps: bench/sleep_lateness.py, 2026-11-24).
 *
 * So the deadline is kept in nanoseconds of nginx's own clock and the
 * timer is set for its millisecond.  An idle worker's epoll_wait then
 * returns at the deadline or just after it (the timeout counts from a
 * cached time at or before now).  A timer that fires early (the loop woke
 * for something else in that millisecond) is checked against the exact
 * deadline and waits on: on a timer for the next millisecond, and in the
 * list of early wakes, which every script that starts on the worker and
 * every wake that fires looks at (ngx_mruby_wake_poll, one comparison
 * while the list is empty): the first of those after the deadline posts
 * it to run at the end of the current pass.  Not posted to the next pass
 * (ngx_posted_next_events) to be checked at every pass: that makes
 * epoll_wait return at once, and a worker with nothing else to do would
 * spin until the deadline.
 *
 * The deadline is a microsecond more than asked: scripts read the time in
 * microseconds (Time.now), and a sleep that ended within the same
 * microsecond could look a microsecond short to them.
 */

#define NGX_MRUBY_WAKE_MARGIN_NS  1000

static ngx_queue_t  ngx_mruby_wake_early;


/* ngx_current_msec's clock (ngx_monotonic_time in nginx's ngx_times.c),
 * in nanoseconds: its milliseconds are this / 1,000,000. */
static int64_t
ngx_mruby_clock_ns(void)
{
#if (NGX_HAVE_CLOCK_MONOTONIC)
    struct timespec  ts;

#if defined(CLOCK_MONOTONIC_FAST)
    clock_gettime(CLOCK_MONOTONIC_FAST, &ts);
#else
    clock_gettime(CLOCK_MONOTONIC, &ts);
#endif

    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
#else
    struct timeval  tv;

    ngx_gettimeofday(&tv);
    return (int64_t) tv.tv_sec * 1000000000 + (int64_t) tv.tv_usec * 1000;
#endif
}


static void
ngx_mruby_wake_unlist(ngx_mruby_wake_t *wake)
{
    if (wake->early) {
        ngx_queue_remove(&wake->queue);
        wake->early = 0;
    }
}


void
ngx_mruby_wake_poll(void)
{
    int64_t            now;
    ngx_queue_t       *q, *next;
    ngx_mruby_wake_t  *wake;

    if (ngx_mruby_wake_early.next == NULL
        || ngx_queue_empty(&ngx_mruby_wake_early))
    {
        return;
    }

    now = ngx_mruby_clock_ns();

    for (q = ngx_queue_head(&ngx_mruby_wake_early);
         q != ngx_queue_sentinel(&ngx_mruby_wake_early);
         q = next)
    {
        next = ngx_queue_next(q);
        wake = ngx_queue_data(q, ngx_mruby_wake_t, queue);

        if (now >= wake->due) {
            ngx_mruby_wake_unlist(wake);
            ngx_del_timer(&wake->ev);
            ngx_post_event(&wake->ev, &ngx_posted_events);
        }
    }
}


static void
ngx_mruby_wake_check(ngx_event_t *ev)
{
    ngx_mruby_wake_t  *wake = (ngx_mruby_wake_t *) ev;

    ngx_mruby_wake_unlist(wake);

    if (ngx_mruby_clock_ns() < wake->due) {
        /* ngx_current_msec is this pass's: the millisecond after the
         * deadline's */
        ngx_add_timer(ev, (ngx_msec_t) (wake->due / 1000000 + 1)
                          - ngx_current_msec);

        if (ngx_mruby_wake_early.next == NULL) {
            ngx_queue_init(&ngx_mruby_wake_early);
        }
        ngx_queue_insert_tail(&ngx_mruby_wake_early, &wake->queue);
        wake->early = 1;
        return;
    }

    wake->handler(ev);
    ngx_mruby_wake_poll();
}


void
ngx_mruby_wake_timer(ngx_mruby_wake_t *wake, mrb_int msec)
{
    ngx_event_t  *ev = &wake->ev;

    ev->handler = ngx_mruby_wake_check;

    if (msec <= 0) {
        wake->due = 0;
        ngx_add_timer(ev, 0);
        return;
    }

    wake->due = ngx_mruby_clock_ns() + (int64_t) msec * 1000000
                + NGX_MRUBY_WAKE_MARGIN_NS;

    /* ngx_current_msec, read at the start of this pass, is at most the
     * millisecond of now: the timer is msec or more */
    ngx_add_timer(ev, (ngx_msec_t) (wake->due / 1000000) - ngx_current_msec);
}


void
ngx_mruby_wake_stop(ngx_mruby_wake_t *wake)
{
    ngx_mruby_wake_unlist(wake);

    if (wake->ev.timer_set) {
        ngx_del_timer(&wake->ev);
    }

    if (wake->ev.posted) {
        ngx_delete_posted_event(&wake->ev);
    }
}


static void
ngx_mruby_fd_ready(ngx_event_t *ev)
{
    ngx_connection_t     *c = ev->data;
    ngx_mruby_fd_wait_t  *w = c->data;
    ngx_mruby_wake_t     *wake = w->wake;

    *w->ready = 1;
    ngx_mruby_fd_unwatch(w);
    ngx_mruby_wake_stop(wake);
    wake->handler(&wake->ev);
}


ngx_int_t
ngx_mruby_fd_watch(ngx_mruby_fd_wait_t *w, ngx_mruby_wake_t *wake, int fd,
    int events, int *ready, ngx_log_t *log)
{
    ngx_int_t          rc;
    ngx_event_t       *ev;
    ngx_connection_t  *c;

    c = ngx_get_connection(fd, log);
    if (c == NULL) {
        return NGX_ERROR;
    }

    c->data = w;
    c->read->handler = ngx_mruby_fd_ready;
    c->write->handler = ngx_mruby_fd_ready;
    c->read->log = log;
    c->write->log = log;

    w->conn = c;
    w->wake = wake;
    w->ready = ready;

    /* edge-triggered with epoll: added, a socket already ready reports
     * itself at once */
    if (events & MRB_FD_WRITE) {
        ev = c->write;
        rc = ngx_handle_write_event(ev, 0);
    } else {
        ev = c->read;
        rc = ngx_handle_read_event(ev, 0);
    }

    if (rc != NGX_OK) {
        ngx_mruby_fd_unwatch(w);
        return NGX_ERROR;
    }

    return NGX_OK;
}


void
ngx_mruby_fd_unwatch(ngx_mruby_fd_wait_t *w)
{
    ngx_connection_t  *c = w->conn;

    if (c == NULL) {
        return;
    }

    w->conn = NULL;

    if (c->read->active) {
        ngx_del_event(c->read, NGX_READ_EVENT, 0);
    }

    if (c->write->active) {
        ngx_del_event(c->write, NGX_WRITE_EVENT, 0);
    }

    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }

    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }

    ngx_free_connection(c);

    /* an event of this descriptor still in the loop's current batch is
     * skipped as stale (ngx_epoll_process_events checks c->fd) */
    c->fd = (ngx_socket_t) -1;
}


void
ngx_mruby_wait_end(ngx_mruby_process_t *p, ngx_mruby_wake_t *wake,
    ngx_mruby_fd_wait_t *fd_wait, mrb_run_rec **waiting)
{
    mrb_run_rec *run;
    mrb_interp  *interp;

    ngx_mruby_wake_stop(wake);

    /* before the script unwinds: its Redis link closes the descriptor */
    ngx_mruby_fd_unwatch(fd_wait);

    if (*waiting == NULL) {
        return;
    }

    run = *waiting;
    *waiting = NULL;

    interp = ngx_mruby_interp(p, ngx_cycle->log);
    if (interp != NULL) {
        mrb_wait_cancel(interp, run);
    }

    /* the script's ensure clauses cannot arm it again (mrb_wait_check
     * raises in a cancelled run); checked all the same: the request goes */
    ngx_mruby_wake_stop(wake);
}


ngx_int_t
ngx_mruby_run(ngx_mruby_process_t *p, ngx_mruby_script_t *s, mrb_run_rec *run,
    ngx_log_t *log)
{
    mrb_interp  *interp;

    interp = ngx_mruby_interp(p, log);
    if (interp == NULL) {
        return NGX_ERROR;
    }

    ngx_mruby_wake_poll();

    switch (mrb_script_run(interp, s->script, run)) {

    case 0:
        return NGX_OK;

    case MRB_RUN_WAITING:
        return NGX_AGAIN;

    default:
        ngx_log_error(NGX_LOG_ERR, log, 0, "%s: %s", p->name, run->error);
        return NGX_ERROR;
    }
}
