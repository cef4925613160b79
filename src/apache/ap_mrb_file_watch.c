/*
 * The file watch of `stat` scripts (src/core/mrb_file_watch.h) under
 * Apache: its limits, said at startup.
 *
 * Each run asks the watch itself, through its interpreter's epoll (one
 * epoll_wait, ~125 ns): a request that starts after an edit sees it.  A
 * thread reading the queue for the child would save that system call but
 * leave a window as long as the thread's wake-up: built and tried, on this
 * 2-core machine under load a prefork child answered a request sent right
 * after an edit with the old version in 5 of 8 runs of
 * test/test_stat_watch.py, because its watcher thread had not run yet.
 * nginx has no such window: the queue is a descriptor of its own event
 * loop, read in the order events became ready (src/nginx/
 * ngx_mruby_file_watch.c).
 */

#include "ap_mrb.h"

#include <ap_mpm.h>

#include "mrb_file_watch.h"

APLOG_USE_MODULE(mruby);


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
