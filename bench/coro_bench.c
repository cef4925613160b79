/*
 * The Fiber paper's experiments, for the runs that wait (src/core/mrb_wait.c, on
 * mrb_coro's machine stacks) and for mruby 3.1's own Fiber, in the same
 * process and the same interpreter build:
 *
 *   switch DEPTH      a suspend + resume from Ruby (two switches), after
 *                     DEPTH nested blocks (the Fiber paper's Fig. 4): ns per switch
 *   create SIZE POOL  SIZE coroutines made, then each run to its end, over
 *                     and over (Fig. 6), with the stack pool (POOL 1) or
 *                     with every stack mapped and unmapped (POOL 0): ns per
 *                     coroutine
 *   max STACK_KB      how many suspended coroutines fit under a 1 GB
 *                     address-space limit (Fig. 8; run in a child process)
 *   echo CONNS        a coroutine per connection echoing lines over
 *                     socketpairs, CONNS connections, 200,000 round trips
 *                     (Fig. 11): round trips per second
 *   count KIND N      N operations of one kind and nothing else, for
 *                     callgrind (bench/coro.py runs it for two N and
 *                     divides the difference): switch (a resume and a
 *                     suspend in C), create (a coroutine from the pool run
 *                     to its end), wait (`Async.sleep 0` from Ruby in a
 *                     `times` loop: suspend + resume), call (the same loop
 *                     calling a C method that does not wait), fiber (a
 *                     Fiber#resume + Fiber.yield in the same loop)
 *
 * Each prints one JSON object: {"exp": ..., "ours": x, "fiber": y, ...}.
 * bench/coro.py runs them and renders docs/benchmarks.md's section.
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/compile.h>
#include <mruby/string.h>

#include "mrb_coro.h"
#include "mrb_interp.h"
#include "mrb_lib.h"
#include "mrb_script.h"
#include "mrb_wait.h"


static uint64_t
now_ns(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000 + (uint64_t) ts.tv_nsec;
}


static int
bench_write(mrb_run_rec *run, const char *data, size_t len)
{
    return 0;
}


static void
bench_log(void *target, mrb_run_rec *run, int level, const char *msg,
    size_t len)
{
    fprintf(stderr, "%.*s\n", (int) len, msg);
}


static int
bench_log_enabled(void *target, mrb_run_rec *run, int level)
{
    return 1;
}


/* The "event loop" of the bench resumes a run at once. */
static int
bench_wake_after(mrb_run_rec *run, mrb_int msec)
{
    return 0;
}


/* echo: the epoll the runs wait in, the server ends of the connections */
static int        echo_epfd = -1;
static mrb_value  echo_fds;
static int        report_fd = -1;


/* Bench.fd_of_run: a run's connection (its request pointer) */
static mrb_value
bench_fd_of_run(mrb_state *mrb, mrb_value self)
{
    return mrb_fixnum_value((mrb_int) (intptr_t) mrb_interp_request(mrb));
}


/* Bench.fds: every connection's server end */
static mrb_value
bench_fds(mrb_state *mrb, mrb_value self)
{
    return echo_fds;
}


/* Bench.report(n): the fiber count so far, to the parent of max */
static mrb_value
bench_report(mrb_state *mrb, mrb_value self)
{
    mrb_int  n;
    long     v;

    mrb_get_args(mrb, "i", &n);
    v = (long) n;
    (void) !write(report_fd, &v, sizeof(v));
    return self;
}

static mrb_value
bench_wait_readable(mrb_state *mrb, mrb_value self)
{
    mrb_int             fd;
    mrb_run_rec        *run;
    struct epoll_event  ev;

    mrb_get_args(mrb, "i", &fd);
    run = mrb_wait_check(mrb, "wait_readable");

    ev.events = EPOLLIN | EPOLLONESHOT;
    ev.data.ptr = run;
    if (epoll_ctl(echo_epfd, EPOLL_CTL_MOD, (int) fd, &ev) != 0
        && epoll_ctl(echo_epfd, EPOLL_CTL_ADD, (int) fd, &ev) != 0)
    {
        mrb_raise(mrb, E_RUNTIME_ERROR, "epoll_ctl failed");
    }

    mrb_wait(mrb);
    return self;
}


static void
bench_define(mrb_state *mrb, struct RClass *server_class)
{
    mrb_define_class_method(mrb, server_class, "wait_readable",
                            bench_wait_readable, MRB_ARGS_REQ(1));
    mrb_define_class_method(mrb, server_class, "fd_of_run", bench_fd_of_run,
                            MRB_ARGS_NONE());
    mrb_define_class_method(mrb, server_class, "fds", bench_fds,
                            MRB_ARGS_NONE());
    mrb_define_class_method(mrb, server_class, "report", bench_report,
                            MRB_ARGS_REQ(1));
}


static const mrb_server  bench_server = {
    .name = "Bench", .class_name = "Bench", .module_name = "coro_bench",
    .module_version = "1", .define = bench_define, .write = bench_write,
    .log = bench_log, .log_enabled = bench_log_enabled,
    .wake_after = bench_wake_after, .parts = mrb_parts
};


static mrb_interp *
bench_interp(void)
{
    char         err[256];
    mrb_interp  *interp = mrb_interp_open(&bench_server, NULL, err,
                                          sizeof(err));

    if (interp == NULL) {
        fprintf(stderr, "interpreter: %s\n", err);
        exit(1);
    }

    mrb_interp_seal(interp);
    return interp;
}


static mrb_script *
bench_script(const char *code)
{
    char         err[256];
    mrb_script  *s = mrb_script_from_code(code, strlen(code), "bench.rb", 1,
                                          err, sizeof(err));

    if (s == NULL) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }

    return s;
}


static int
bench_start(mrb_interp *interp, mrb_script *s, mrb_run_rec *run, void *request)
{
    mrb_run_init(run, request, 0);
    run->may_wait = 1;
    return mrb_script_run(interp, s, run);
}


/* A script run on the thread's stack, with its time; exits on an error. */
static double
bench_plain(mrb_interp *interp, const char *code)
{
    mrb_script  *s = bench_script(code);
    mrb_run_rec  run;
    uint64_t     t0 = now_ns();

    mrb_run_init(&run, (void *) 1, 0);
    if (mrb_script_run(interp, s, &run) != 0) {
        fprintf(stderr, "%s\n", run.error);
        exit(1);
    }

    mrb_script_free(s);
    return (double) (now_ns() - t0);
}


static void
exp_switch(int depth, long count)
{
    mrb_interp  *interp = bench_interp();
    mrb_script  *s;
    mrb_run_rec  run;
    char         code[512];
    uint64_t     t0;
    long         n = 0;
    double       fiber;
    int          rc;

    snprintf(code, sizeof(code),
             "def nest(i)\n"
             "  if i == 0 then %ld.times { Bench::Async.sleep 0 }\n"
             "  else 1.times { nest(i - 1) } end\n"
             "end\n"
             "nest(%d)\n", count, depth);
    s = bench_script(code);

    t0 = now_ns();
    rc = bench_start(interp, s, &run, (void *) 1);
    while (rc == MRB_RUN_WAITING) {
        n++;
        rc = mrb_wait_resume(interp, run.waiting, &run);
    }
    if (rc != 0) {
        fprintf(stderr, "%s\n", run.error);
        exit(1);
    }
    t0 = now_ns() - t0;

    snprintf(code, sizeof(code),
             "def nest(i)\n"
             "  if i == 0 then loop { Fiber.yield }\n"
             "  else 1.times { nest(i - 1) } end\n"
             "end\n"
             "f = Fiber.new { nest(%d) }\n"
             "%ld.times { f.resume }\n", depth, count);
    fiber = bench_plain(interp, code);

    printf("{\"exp\": \"switch\", \"depth\": %d, \"ours\": %.2f, "
           "\"fiber\": %.2f}\n", depth, (double) t0 / n / 2,
           fiber / count / 2);

    mrb_script_free(s);
    mrb_interp_close(interp);
}


static void
exp_create(int size, int pool, long total)
{
    mrb_interp  *interp;
    mrb_script  *s;
    mrb_run_rec *runs;
    char         code[256];
    uint64_t     t0;
    long         rounds = total / size, r;
    int          i;
    double       fiber;

    mrb_wait_set_pool_keep(pool ? MRB_CORO_KEEP_DEFAULT : 0);
    interp = bench_interp();
    runs = calloc((size_t) size, sizeof(mrb_run_rec));
    s = bench_script("Bench::Async.sleep 0");

    t0 = now_ns();
    for (r = 0; r < rounds; r++) {
        for (i = 0; i < size; i++) {                 /* loop A: create */
            bench_start(interp, s, &runs[i], (void *) 1);
        }
        for (i = 0; i < size; i++) {                 /* loop B: finish */
            mrb_wait_resume(interp, runs[i].waiting, &runs[i]);
        }
    }
    t0 = now_ns() - t0;

    snprintf(code, sizeof(code),
             "a = Array.new(%d)\n"
             "%ld.times do\n"
             "  %d.times { |i| a[i] = Fiber.new { Fiber.yield } }\n"
             "  %d.times { |i| a[i].resume; a[i].resume }\n"
             "end\n", size, rounds, size, size);
    fiber = bench_plain(interp, code);

    printf("{\"exp\": \"create\", \"size\": %d, \"pool\": %d, "
           "\"ours\": %.1f, \"fiber\": %.1f}\n", size, pool,
           (double) t0 / (rounds * size), fiber / (rounds * size));

    mrb_script_free(s);
    free(runs);
    mrb_interp_close(interp);
}


/* In a child under a 1 GB address-space limit: suspended runs, then
 * fibers, made until one fails; the counts come back through a pipe. */
static long
max_child(int fd, int fiber)
{
    struct rlimit  rl = { 1L << 30, 1L << 30 };
    mrb_interp    *interp = bench_interp();
    mrb_script    *s;
    mrb_run_rec    run;
    long           n = 0;

    if (setrlimit(RLIMIT_AS, &rl) != 0) {
        return -1;
    }

    if (fiber) {
        /* as the Fiber paper's Fig. 8: kept alive, each resumed once */
        s = bench_script(
            "$f = []\n"
            "b = proc { Fiber.yield }  # one block: its irep counts references\n"
            "loop { f = Fiber.new(&b); f.resume; $f << f\n"
            "       Bench.report($f.size) if $f.size % 1000 == 0 }");
    } else {
        s = bench_script("Bench::Async.sleep 0");
    }

    if (fiber) {
        mrb_run_init(&run, (void *) 1, 0);
        mrb_script_run(interp, s, &run);    /* ends when memory does */
        fprintf(stderr, "fibers: %s\n", run.error);
        return -2;
    }

    for ( ;; ) {
        if (bench_start(interp, s, &run, (void *) 1) != MRB_RUN_WAITING) {
            break;
        }
        if (++n % 100 == 0) {
            (void) !write(fd, &n, sizeof(n));
        }
    }

    (void) !write(fd, &n, sizeof(n));
    return n;
}


static long
max_count(int fiber)
{
    int    fds[2], status;
    pid_t  pid;
    long   n, last = 0;

    if (pipe(fds) != 0) {
        return -1;
    }

    pid = fork();
    if (pid == 0) {
        close(fds[0]);
        report_fd = fds[1];
        max_child(fds[1], fiber);
        _exit(0);
    }

    close(fds[1]);
    while (read(fds[0], &n, sizeof(n)) == (ssize_t) sizeof(n)) {
        last = n;
    }
    close(fds[0]);
    waitpid(pid, &status, 0);
    return last;
}


static void
exp_max(int stack_kb)
{
    long  ours, fiber;

    mrb_wait_set_stack_size((size_t) stack_kb * 1024);
    ours = max_count(0);
    fiber = max_count(1);

    printf("{\"exp\": \"max\", \"stack_kb\": %d, \"ours\": %ld, "
           "\"fiber\": %ld}\n", stack_kb, ours, fiber);
}


/*
 * Echo: CONNS socketpairs; the "server" end of each is served by a
 * coroutine that reads a line and writes it back.  The client writes a
 * line on every connection, then reads every echo, until TRIPS round
 * trips.  Ours: a run per connection waiting in Bench.wait_readable,
 * resumed from epoll.  Fiber: one Ruby script with a fiber per connection
 * and an IO.select loop, as the Fiber paper's Fig. 11.
 */
static void
exp_echo(int conns, long trips)
{
    mrb_interp          *interp = bench_interp();
    mrb_script          *s;
    mrb_run_rec         *runs;
    int                (*sv)[2];
    struct epoll_event   evs[64];
    char                 code[2048], buf[64];
    uint64_t             t0, t_ours, t_fiber;
    long                 done, k;
    int                  i, n, rc;
    pid_t                pid;

    /* a set of connections for each side: an IO object closes its fd */
    sv = calloc((size_t) conns * 2, sizeof(*sv));
    runs = calloc((size_t) conns, sizeof(mrb_run_rec));
    for (i = 0; i < conns * 2; i++) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i]) != 0) {
            perror("socketpair");
            exit(1);
        }
    }

    /* the client, in a child: a line out on each connection, then back;
     * trips on the first set (ours), then on the second (Fiber) */
    pid = fork();
    if (pid == 0) {
        int  set, c;

        for (set = 0; set < 2; set++) {
            for (done = 0; done < trips; ) {
                for (c = 0; c < conns; c++) {
                    (void) !write(sv[set * conns + c][0], "ping\n", 5);
                }
                for (c = 0; c < conns; c++) {
                    for (k = 0; k < 5; k += n) {
                        n = (int) read(sv[set * conns + c][0], buf,
                                       sizeof(buf));
                        if (n <= 0) {
                            _exit(0);
                        }
                    }
                }
                done += conns;
            }
        }
        _exit(0);
    }

    /* ours */
    echo_epfd = epoll_create1(0);
    echo_fds = mrb_ary_new(mrb_interp_state(interp));
    mrb_gc_register(mrb_interp_state(interp), echo_fds);
    for (i = 0; i < conns; i++) {
        mrb_ary_push(mrb_interp_state(interp), echo_fds,
                     mrb_fixnum_value(sv[conns + i][1]));
    }

    /* each run knows its fd from its request pointer */
    snprintf(code, sizeof(code),
             "Bench::Async  # names Async: the run goes on a coroutine\n"
             "io = IO.for_fd(Bench.fd_of_run, 'r+')\n"
             "%ld.times do\n"
             "  Bench.wait_readable(io.fileno)\n"
             "  io.syswrite(io.sysread(64))\n"
             "end\n", trips / conns);
    s = bench_script(code);

    t0 = now_ns();
    for (i = 0; i < conns; i++) {
        rc = bench_start(interp, s, &runs[i], (void *) (intptr_t) sv[i][1]);
        if (rc != MRB_RUN_WAITING) {
            fprintf(stderr, "echo run: %s\n", runs[i].error);
            exit(1);
        }
    }
    for (done = 0; done < conns; ) {
        n = epoll_wait(echo_epfd, evs, 64, 5000);
        if (n <= 0) {
            break;
        }
        for (i = 0; i < n; i++) {
            mrb_run_rec  *w = evs[i].data.ptr;
            if (mrb_wait_resume(interp, w, &runs[0]) != MRB_RUN_WAITING) {
                done++;
            }
        }
    }
    t_ours = now_ns() - t0;

    /* mruby's Fiber, the same loop in Ruby */
    snprintf(code, sizeof(code),
             "ios = Bench.fds.map { |fd| IO.for_fd(fd, 'r+') }\n"
             "fibers = {}\n"
             "ios.each do |io|\n"
             "  fibers[io.fileno] = Fiber.new do\n"
             "    %ld.times { Fiber.yield; io.syswrite(io.sysread(64)) }\n"
             "  end\n"
             "  fibers[io.fileno].resume\n"
             "end\n"
             "until fibers.empty?\n"
             "  r, = IO.select(fibers.keys.map { |fd| ios.find { |i| i.fileno == fd } })\n"
             "  r.each do |io|\n"
             "    f = fibers[io.fileno]\n"
             "    f.resume\n"
             "    fibers.delete(io.fileno) unless f.alive?\n"
             "  end\n"
             "end\n", trips / conns);
    t_fiber = (uint64_t) bench_plain(interp, code);
    waitpid(pid, NULL, 0);

    printf("{\"exp\": \"echo\", \"conns\": %d, \"ours\": %.0f, "
           "\"fiber\": %.0f}\n", conns,
           (double) trips / ((double) t_ours / 1e9),
           (double) trips / ((double) t_fiber / 1e9));

    mrb_script_free(s);
    mrb_interp_close(interp);
}


static void
count_ping(mrb_coro *coro, void *arg)
{
    for ( ;; ) {
        mrb_coro_suspend(coro);
    }
}


static void
count_nothing(mrb_coro *coro, void *arg)
{
}


static void
exp_count(const char *kind, long n)
{
    mrb_coro_pool  *pool;
    mrb_coro       *coro;
    mrb_interp     *interp;
    mrb_script     *s;
    mrb_run_rec     run;
    char            code[256];
    long            i;
    int             rc;

    if (strcmp(kind, "switch") == 0) {
        pool = mrb_coro_pool_new(0, 16);
        coro = mrb_coro_new(pool, count_ping, NULL);
        for (i = 0; i <= n; i++) {
            mrb_coro_resume(coro);
        }
        return;
    }

    if (strcmp(kind, "create") == 0) {
        pool = mrb_coro_pool_new(0, 16);
        for (i = 0; i < n; i++) {
            mrb_coro_resume(mrb_coro_new(pool, count_nothing, NULL));
        }
        return;
    }

    if (strcmp(kind, "wait") == 0) {
        snprintf(code, sizeof(code), "%ld.times { Bench::Async.sleep 0 }",
                 n);
    } else if (strcmp(kind, "call") == 0) {
        snprintf(code, sizeof(code), "%ld.times { Bench::Async.nil? }", n);
    } else if (strcmp(kind, "fiber") == 0) {
        snprintf(code, sizeof(code),
                 "f = Fiber.new { loop { Fiber.yield } }\n"
                 "%ld.times { f.resume }", n);
    } else {
        fprintf(stderr, "count: switch, create, wait, call or fiber\n");
        exit(2);
    }

    interp = bench_interp();
    s = bench_script(code);
    rc = bench_start(interp, s, &run, (void *) 1);
    while (rc == MRB_RUN_WAITING) {
        rc = mrb_wait_resume(interp, run.waiting, &run);
    }
    if (rc != 0) {
        fprintf(stderr, "%s\n", run.error);
        exit(1);
    }

    mrb_script_free(s);
    mrb_interp_close(interp);
}


int
main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "switch") == 0) {
        exp_switch(atoi(argv[2]), argc > 3 ? atol(argv[3]) : 1000000);
    } else if (argc >= 4 && strcmp(argv[1], "create") == 0) {
        exp_create(atoi(argv[2]), atoi(argv[3]),
                   argc > 4 ? atol(argv[4]) : 300000);
    } else if (argc >= 3 && strcmp(argv[1], "max") == 0) {
        exp_max(atoi(argv[2]));
    } else if (argc >= 3 && strcmp(argv[1], "echo") == 0) {
        exp_echo(atoi(argv[2]), argc > 3 ? atol(argv[3]) : 200000);
    } else if (argc >= 4 && strcmp(argv[1], "count") == 0) {
        exp_count(argv[2], atol(argv[3]));
    } else {
        fprintf(stderr, "usage: coro_bench switch DEPTH [COUNT] | create "
                "SIZE POOL [TOTAL] | max STACK_KB | echo CONNS [TRIPS] | count "
                "KIND N\n");
        return 2;
    }

    return 0;
}
