/*
 * The file watch of `stat` scripts (src/core/mrb_file_watch.h) in nginx's
 * own event loop, and its limits said at startup.
 *
 * Each worker's inotify descriptor is a connection of that worker, read
 * when epoll reports it, like a socket; a timer takes a write left open
 * once its quiet interval ends.  A request then only compares its script's
 * epoch: no system call (an epoll_wait per request cost ~5% of `stat`
 * against `cache`).
 *
 * The window: an edit is seen by the requests whose events nginx handles
 * after the descriptor's.  The kernel queues the event before the write,
 * rename or close that caused it returns, so the descriptor is ready
 * before a client told of the edit can send its request, and epoll
 * returns ready descriptors in the order they became ready: a request
 * sent after the edit is read after the event, in the same pass of the
 * loop or a later one.  A request already being read when the edit
 * happens may run the old version.
 *
 * The descriptor is level-triggered and one call reads one batch, so a
 * deploy that rewrites every script is read in slices between which the
 * worker serves its other connections; what is left after a call (a
 * batch, or the paths to watch again after the queue overflowed) is taken
 * up in the next pass of the loop (ngx_posted_next_events).
 */

#include "ngx_mruby.h"
#include <ngx_event.h>

#include "mrb_file_watch.h"


static ngx_event_t        ngx_mruby_file_watch_timer;
static ngx_connection_t  *ngx_mruby_file_watch_conn;


static void
ngx_mruby_file_watch_process(ngx_event_t *ev)
{
    long  next = mrb_file_watch_process();

    if (next == MRB_FILE_WATCH_MORE) {
        /* the next slice in the next pass of the loop, after the
         * connections ready now (the queue may be empty: epoll would not
         * report it) */
        ngx_post_event(ngx_mruby_file_watch_conn->read,
                       &ngx_posted_next_events);
        return;
    }

    if (next == MRB_FILE_WATCH_IDLE || next == MRB_FILE_WATCH_GONE) {
        /* gone: the descriptor is closed, and with it its epoll entry */
        if (ngx_mruby_file_watch_timer.timer_set) {
            ngx_del_timer(&ngx_mruby_file_watch_timer);
        }
        return;
    }

    ngx_add_timer(&ngx_mruby_file_watch_timer, (ngx_msec_t) next);
}


void
ngx_mruby_file_watch_init(ngx_cycle_t *cycle)
{
    int                fd;
    char               why[MRB_ERR_REASON_LEN];
    ngx_connection_t  *c;

    fd = mrb_file_watch_start(why, sizeof(why));
    if (fd == -1) {
        ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0, "mruby: `stat` "
                      "scripts are stat()ed on every run: %s", why);
        return;
    }

    c = ngx_get_connection(fd, cycle->log);
    if (c == NULL) {
        goto polled;
    }

    c->read->handler = ngx_mruby_file_watch_process;
    c->read->log = cycle->log;
    ngx_mruby_file_watch_conn = c;

    if (ngx_add_event(c->read, NGX_READ_EVENT, NGX_LEVEL_EVENT) != NGX_OK) {
        ngx_mruby_file_watch_conn = NULL;
        ngx_free_connection(c);
        c->fd = (ngx_socket_t) -1;
        goto polled;
    }

    /* nginx's debug log names a timer by ev->data's descriptor (a
     * connection's fd): the watch's own */
    ngx_mruby_file_watch_timer.handler = ngx_mruby_file_watch_process;
    ngx_mruby_file_watch_timer.data = c;
    ngx_mruby_file_watch_timer.log = cycle->log;
    ngx_mruby_file_watch_timer.cancelable = 1;
    return;

polled:
    ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0, "mruby: the file watch "
                  "is not in the event loop (no free connection): each "
                  "`stat` run asks it");
    mrb_file_watch_stop_driving();
}


/* The descriptor stays the core's (mrb_file_watch_start): the connection
 * lets go of it, and runs from now on ask the queue themselves. */
void
ngx_mruby_file_watch_exit(void)
{
    ngx_connection_t  *c = ngx_mruby_file_watch_conn;

    if (ngx_mruby_file_watch_timer.timer_set) {
        ngx_del_timer(&ngx_mruby_file_watch_timer);
    }

    if (c == NULL) {
        return;
    }

    ngx_mruby_file_watch_conn = NULL;
    mrb_file_watch_stop_driving();

    if (c->read->active) {
        ngx_del_event(c->read, NGX_READ_EVENT, 0);
    }

    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }

    ngx_free_connection(c);
    c->fd = (ngx_socket_t) -1;
}


void
ngx_mruby_file_watch_limits(ngx_cycle_t *cycle)
{
    char              msg[512];
    size_t            scripts, watches;
    ngx_uint_t        level;
    ngx_core_conf_t  *ccf;

    if (mrb_script_watch_needs(&scripts, &watches) != 0 || scripts == 0) {
        return;
    }

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);

    switch (mrb_file_watch_check_limits(scripts, watches,
                                        ccf->master ? ccf->worker_processes
                                                    : 1,
                                        msg, sizeof(msg)))
    {
    case 0:
        level = NGX_LOG_NOTICE;
        break;
    default:
        level = NGX_LOG_WARN;
        break;
    }

    ngx_log_error(level, cycle->log, 0, "mruby: %s", msg);
}
