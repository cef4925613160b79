/*
 * Apache::Scoreboard: the server's load as mod_status sees it (busy and
 * idle workers, accesses, traffic, uptime) plus the system load average,
 * so that a script can behave differently under load.
 */

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include <ap_mpm.h>
#include <scoreboard.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/hash.h>
#include <mruby/string.h>

#include "ap_mrb.h"

/* Each worker status by the name of its constant in scoreboard.h, as the
 * original gave them ("SERVER_READY"). */
static const char *const ap_mrb_sb_names[SERVER_NUM_STATUS] = {
    "SERVER_DEAD",
    "SERVER_STARTING",
    "SERVER_READY",
    "SERVER_BUSY_READ",
    "SERVER_BUSY_WRITE",
    "SERVER_BUSY_KEEPALIVE",
    "SERVER_BUSY_LOG",
    "SERVER_BUSY_DNS",
    "SERVER_CLOSING",
    "SERVER_GRACEFUL",
    "SERVER_IDLE_KILL"
};

typedef struct {
    int            busy;
    int            idle;
    unsigned long  accesses;
    apr_off_t      bytes;
    int            by_status[SERVER_NUM_STATUS];
} ap_mrb_sb_tally;


static void
ap_mrb_sb_check(mrb_state *mrb)
{
    if (!ap_exists_scoreboard_image()) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Apache::Scoreboard: no scoreboard "
                  "in this process");
    }
}


/* Counts workers the way mod_status does: a worker of a process going down
 * gracefully, or of an old generation, is not idle capacity. */
static void
ap_mrb_sb_count(mrb_state *mrb, ap_mrb_sb_tally *t)
{
    global_score   *g;
    process_score  *ps;
    worker_score   *ws;
    int             i, j, generation = 0;
    unsigned char   st;

    ap_mrb_sb_check(mrb);
    memset(t, 0, sizeof(*t));
    g = ap_scoreboard_image->global;
    ap_mpm_query(AP_MPMQ_GENERATION, &generation);

    for (i = 0; i < g->server_limit; i++) {
        ps = ap_get_scoreboard_process(i);

        for (j = 0; j < g->thread_limit; j++) {
            ws = ap_get_scoreboard_worker_from_indexes(i, j);
            st = ws->status < SERVER_NUM_STATUS ? ws->status : SERVER_DEAD;

            t->by_status[st]++;
            t->accesses += ws->access_count;
            t->bytes += ws->bytes_served;

            if (ps->pid == 0 || ps->quiescing) {
                continue;
            }

            if (st == SERVER_READY) {
                if (ps->generation == generation) {
                    t->idle++;
                }
            } else if (st != SERVER_DEAD && st != SERVER_STARTING
                       && st != SERVER_IDLE_KILL)
            {
                t->busy++;
            }
        }
    }
}


static mrb_value
ap_mrb_sb_busy_worker(mrb_state *mrb, mrb_value self)
{
    ap_mrb_sb_tally  t;

    ap_mrb_sb_count(mrb, &t);
    return mrb_int_value(mrb, t.busy);
}


static mrb_value
ap_mrb_sb_idle_worker(mrb_state *mrb, mrb_value self)
{
    ap_mrb_sb_tally  t;

    ap_mrb_sb_count(mrb, &t);
    return mrb_int_value(mrb, t.idle);
}


static mrb_value
ap_mrb_sb_total_access(mrb_state *mrb, mrb_value self)
{
    ap_mrb_sb_tally  t;

    ap_mrb_sb_count(mrb, &t);
    return mrb_int_value(mrb, (mrb_int) t.accesses);
}


static mrb_value
ap_mrb_sb_total_kbyte(mrb_state *mrb, mrb_value self)
{
    ap_mrb_sb_tally  t;

    ap_mrb_sb_count(mrb, &t);
    return mrb_int_value(mrb, (mrb_int) (t.bytes / 1024));
}


/*
 * {client address => status name} for each worker serving a connection
 * (reading, writing, keep-alive, logging, DNS, closing, finishing), as the
 * original gave it: a client with several connections is one key, with
 * the status of the last worker that serves it.  The addresses are there
 * with ExtendedStatus on (the default when mod_status is loaded).
 */
static mrb_value
ap_mrb_sb_status(mrb_state *mrb, mrb_value self)
{
    global_score  *g;
    worker_score  *ws;
    mrb_value      h;
    int            i, j, ai;

    ap_mrb_sb_check(mrb);
    g = ap_scoreboard_image->global;
    h = mrb_hash_new(mrb);
    ai = mrb_gc_arena_save(mrb);

    for (i = 0; i < g->server_limit; i++) {
        for (j = 0; j < g->thread_limit; j++) {
            ws = ap_get_scoreboard_worker_from_indexes(i, j);

            if (ws->status < SERVER_BUSY_READ
                || ws->status > SERVER_GRACEFUL)
            {
                continue;
            }

            mrb_hash_set(mrb, h,
                         mrb_str_new(mrb, ws->client64,
                                     strnlen(ws->client64,
                                             sizeof(ws->client64))),
                         mrb_str_new_cstr(mrb,
                                          ap_mrb_sb_names[ws->status]));
            mrb_gc_arena_restore(mrb, ai);
        }
    }

    return h;
}


/* Worker slots by status: {"SERVER_READY" => 60, "SERVER_BUSY_WRITE" => 2,
 * ...}, every status a key. */
static mrb_value
ap_mrb_sb_counter(mrb_state *mrb, mrb_value self)
{
    ap_mrb_sb_tally  t;
    mrb_value        h;
    int              i;

    ap_mrb_sb_count(mrb, &t);
    h = mrb_hash_new_capa(mrb, SERVER_NUM_STATUS);

    for (i = 0; i < SERVER_NUM_STATUS; i++) {
        mrb_hash_set(mrb, h, mrb_str_new_cstr(mrb, ap_mrb_sb_names[i]),
                     mrb_int_value(mrb, t.by_status[i]));
    }

    return h;
}


/* Seconds since the server last (re)started. */
static mrb_value
ap_mrb_sb_uptime(mrb_state *mrb, mrb_value self)
{
    ap_mrb_sb_check(mrb);
    return mrb_int_value(mrb, (mrb_int) apr_time_sec(
               apr_time_now() - ap_scoreboard_image->global->restart_time));
}


static mrb_value
ap_mrb_sb_restart_time(mrb_state *mrb, mrb_value self)
{
    ap_mrb_sb_check(mrb);
    return mrb_int_value(mrb, (mrb_int) apr_time_sec(
               ap_scoreboard_image->global->restart_time));
}


static mrb_value
ap_mrb_sb_server_limit(mrb_state *mrb, mrb_value self)
{
    ap_mrb_sb_check(mrb);
    return mrb_int_value(mrb, ap_scoreboard_image->global->server_limit);
}


static mrb_value
ap_mrb_sb_thread_limit(mrb_state *mrb, mrb_value self)
{
    ap_mrb_sb_check(mrb);
    return mrb_int_value(mrb, ap_scoreboard_image->global->thread_limit);
}


/* The system's 1, 5 and 15 minute load averages. */
static mrb_value
ap_mrb_sb_loadavg(mrb_state *mrb, mrb_value self)
{
    double     avg[3];
    mrb_value  a;
    int        i;

    if (getloadavg(avg, 3) != 3) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "getloadavg() failed");
    }

    a = mrb_ary_new_capa(mrb, 3);
    for (i = 0; i < 3; i++) {
        mrb_ary_push(mrb, a, mrb_float_value(mrb, avg[i]));
    }

    return a;
}


/* access_counter(pid): the requests the workers of process pid served,
 * or -1 when no process of the scoreboard has that pid. */
static mrb_value
ap_mrb_sb_access_counter(mrb_state *mrb, mrb_value self)
{
    global_score    *g;
    process_score   *ps;
    worker_score    *ws;
    mrb_int          pid;
    unsigned long    count = 0;
    int              i, j, found = 0;

    mrb_get_args(mrb, "i", &pid);
    ap_mrb_sb_check(mrb);
    g = ap_scoreboard_image->global;

    for (i = 0; i < g->server_limit; i++) {
        ps = ap_get_scoreboard_process(i);
        if (ps->pid == 0 || ps->pid != (pid_t) pid) {
            continue;
        }

        found = 1;
        for (j = 0; j < g->thread_limit; j++) {
            ws = ap_get_scoreboard_worker_from_indexes(i, j);
            count += ws->access_count;
        }
    }

    return mrb_int_value(mrb, found ? (mrb_int) count : -1);
}


/* This process's CPU time (user and system) since the server last
 * (re)started, as a percentage of the time since then. */
static mrb_value
ap_mrb_sb_cpu_load(mrb_state *mrb, mrb_value self)
{
    struct rusage  ru;
    double         cpu, wall;

    ap_mrb_sb_check(mrb);

    if (getrusage(RUSAGE_SELF, &ru) != 0) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "getrusage() failed");
    }

    cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec
          + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    wall = (double) (apr_time_now()
                     - ap_scoreboard_image->global->restart_time)
           / APR_USEC_PER_SEC;

    return mrb_float_value(mrb, wall > 0 ? cpu * 100 / wall : 0.0);
}


static mrb_value
ap_mrb_sb_pid(mrb_state *mrb, mrb_value self)
{
    return mrb_int_value(mrb, (mrb_int) getpid());
}


static const mrb_api_method  ap_mrb_scoreboard_methods[] = {
    { "busy_worker", ap_mrb_sb_busy_worker, MRB_ARGS_NONE() },
    { "idle_worker", ap_mrb_sb_idle_worker, MRB_ARGS_NONE() },
    { "total_access", ap_mrb_sb_total_access, MRB_ARGS_NONE() },
    { "total_kbyte", ap_mrb_sb_total_kbyte, MRB_ARGS_NONE() },
    { "status", ap_mrb_sb_status, MRB_ARGS_NONE() },
    { "counter", ap_mrb_sb_counter, MRB_ARGS_NONE() },
    { "uptime", ap_mrb_sb_uptime, MRB_ARGS_NONE() },
    { "restart_time", ap_mrb_sb_restart_time, MRB_ARGS_NONE() },
    { "server_limit", ap_mrb_sb_server_limit, MRB_ARGS_NONE() },
    { "thread_limit", ap_mrb_sb_thread_limit, MRB_ARGS_NONE() },
    { "loadavg", ap_mrb_sb_loadavg, MRB_ARGS_NONE() },
    { "pid", ap_mrb_sb_pid, MRB_ARGS_NONE() },
    { "access_counter", ap_mrb_sb_access_counter, MRB_ARGS_REQ(1) },
    { "cpu_load", ap_mrb_sb_cpu_load, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


/* Apache::Load: the original's optional extension, for its one method. */
static const mrb_api_method  ap_mrb_load_methods[] = {
    { "getloadavg", ap_mrb_sb_loadavg, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


void
ap_mrb_define_scoreboard(mrb_state *mrb, struct RClass *apache)
{
    mrb_api_define_class(mrb, apache, "Scoreboard", NULL,
                         ap_mrb_scoreboard_methods);
    mrb_api_define_class(mrb, apache, "Load", NULL, ap_mrb_load_methods);
}
