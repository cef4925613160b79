/*
 * Unit tests of the Redis class that need no Redis server: what a command
 * whose argument raises leaves behind, and what a script's AUTH leaves in
 * freed memory (unit_secret.h).  A socket that listens (and never
 * answers) stands in for the server, so that Redis.new connects.
 */

#include <malloc.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <mruby.h>
#include "mrb_interp.h"
#include "mrb_redis.h"
#include "mrb_script.h"
#include "unit.h"
#include "unit_secret.h"


static char  redis_out[256];


static int
redis_write(mrb_run_rec *run, const char *data, size_t len)
{
    size_t  used = strlen(redis_out);

    if (used + len >= sizeof(redis_out)) {
        return -1;
    }

    memcpy(redis_out + used, data, len);
    redis_out[used + len] = '\0';
    return 0;
}


static void
redis_logger(void *target, mrb_run_rec *run, int level, const char *msg,
    size_t len)
{
}


static const mrb_part *const  redis_parts[] = { &mrb_redis_part, NULL };

static const mrb_server  redis_server = {
    .name = "Test", .class_name = "Apache", .module_name = "mod_mruby",
    .module_version = "test", .write = redis_write, .log = redis_logger,
    .parts = redis_parts
};


/* A listening socket on a free loopback port; returns the fd, the port in
 * *port. */
static int
redis_listener(int *port)
{
    struct sockaddr_in  sin;
    socklen_t           len = sizeof(sin);
    int                 fd = socket(AF_INET, SOCK_STREAM, 0);

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    if (fd < 0 || bind(fd, (struct sockaddr *) &sin, sizeof(sin)) != 0
        || listen(fd, 16) != 0
        || getsockname(fd, (struct sockaddr *) &sin, &len) != 0)
    {
        return -1;
    }

    *port = ntohs(sin.sin_port);
    return fd;
}


/* Runs code in interp, as a startup script (what it defines stays) when
 * startup is set: mrb_script_run's status, or -2 when it did not
 * compile. */
static int
redis_run(mrb_interp *interp, const char *code, mrb_run_rec *run,
    int startup)
{
    char         err[256];
    mrb_script  *s;
    int          rc;

    s = mrb_script_from_code(code, strlen(code), "redis", 1, err,
                             sizeof(err));
    if (s == NULL) {
        snprintf(run->error, sizeof(run->error), "%s", err);
        return -2;
    }

    mrb_run_init(run, (void *) 1, 0);
    run->startup = startup;
    rc = mrb_script_run(interp, s, run);
    mrb_script_free(s);
    return rc;
}


/*
 * 20,000 commands of 22 arguments whose last to_s raises: the argument
 * arrays (22 pointers and 22 lengths each) were allocated before the
 * conversions and leaked by the raise, 7 MB in all.
 */
TEST(redis_raising_argument_leaks_nothing)
{
    char          err[256], code[1024];
    mrb_interp   *interp;
    mrb_run_rec   run;
    struct mallinfo2  before, after;
    int           fd, port;

    fd = redis_listener(&port);
    REQUIRE(fd >= 0);

    interp = mrb_interp_open(&redis_server, NULL, err, sizeof(err));
    REQUIRE(interp != NULL);
    mrb_interp_seal(interp);

    snprintf(code, sizeof(code),
             "class Bad; def to_s; raise 'no'; end; end\n"
             "R = Redis.new('127.0.0.1', %d)\n"
             "def many(n)\n"
             "  args = ['SET'] + ['a'] * 20 + [Bad.new]\n"
             "  n.times { begin; R.call(*args); rescue RuntimeError; end }\n"
             "end\n"
             "many(2000)\n"
             "Apache.rputs 'warm'", port);

    /* a startup run: R and many stay */
    CHECK_EQ(redis_run(interp, code, &run, 1), 0);
    CHECK(strcmp(redis_out, "warm") == 0);

    before = mallinfo2();
    CHECK_EQ(redis_run(interp, "many(20000)", &run, 0), 0);
    after = mallinfo2();

    CHECK(after.uordblks < before.uordblks + 1024 * 1024);
    if (after.uordblks >= before.uordblks + 1024 * 1024) {
        fprintf(stderr, "  grew by %zu bytes\n",
                after.uordblks - before.uordblks);
    }

    mrb_interp_close(interp);
    close(fd);
}


/*
 * A request's own AUTH, alone and in a pipeline that grows its buffer:
 * the commands' buffers are wiped before they are freed.  The password is
 * made by a startup script, so that no block of the request's own script
 * holds it; it is short enough to live inside its String object, which
 * the allocator never sees.  The server never answers: each command
 * times out, after it was sent.
 */
TEST(redis_auth_of_a_request_leaves_no_password_in_freed_memory)
{
    char          err[256], code[256];
    mrb_interp   *interp;
    mrb_script   *s;
    mrb_run_rec   run;
    int           fd, port;
    static const char  request[] =
        "begin\n"
        "  R.auth('app', PW)\n"
        "rescue Redis::TimeoutError\n"
        "end\n"
        "begin\n"
        "  R.pipelined { |p| p.call('AUTH', PW); p.set('k', 'v' * 100) }\n"
        "rescue Redis::TimeoutError\n"
        "end\n"
        "Apache.rputs 'sent'";

    fd = redis_listener(&port);
    REQUIRE(fd >= 0);
    interp = mrb_interp_open(&redis_server, NULL, err, sizeof(err));
    REQUIRE(interp != NULL);
    mrb_interp_seal(interp);

    snprintf(code, sizeof(code), "PW = 'secret-pw-5e1'\n"
             "R = Redis.new('127.0.0.1', %d, timeout: 0.2)", port);
    REQUIRE(redis_run(interp, code, &run, 1) == 0);

    s = mrb_script_from_code(request, strlen(request), "auth", 1, err,
                             sizeof(err));
    REQUIRE(s != NULL);
    redis_out[0] = '\0';
    mrb_run_init(&run, (void *) 1, 0);

    unit_secret_watch("secret-pw-5e1");
    CHECK_EQ(mrb_script_run(interp, s, &run), 0);
    CHECK_EQ(unit_secret_end(), 0);
    CHECK(strcmp(redis_out, "sent") == 0);

    mrb_script_free(s);
    mrb_interp_close(interp);
    close(fd);
}


/*
 * A Redis.new(sentinels:) takes its servers' user, password and TLS files
 * from its group (Redis::Sentinel#__options), which a script can reach and
 * change: what is not a String there is a TypeError, not a String's bytes
 * read from an Integer (the worker died of SIGSEGV).
 */
TEST(redis_sentinel_options_a_script_changed_are_checked)
{
    static const char *const  options[] = {
        "[1, nil, false, nil, nil, nil, nil, nil, nil]",
        "['app', :pw, false, nil, nil, nil, nil, nil, nil]",
        "[nil, nil, true, nil, nil, 7, nil, nil, nil]",
    };
    char          err[256], code[1024];
    mrb_interp   *interp;
    mrb_run_rec   run;
    size_t        i;

    interp = mrb_interp_open(&redis_server, NULL, err, sizeof(err));
    REQUIRE(interp != NULL);
    mrb_interp_seal(interp);

    for (i = 0; i < sizeof(options) / sizeof(options[0]); i++) {
        snprintf(code, sizeof(code),
                 "class Redis::Sentinel\n"
                 "  def __resolve(*); '127.0.0.1:1'; end\n"
                 "  def __options; %s; end\n"
                 "end\n"
                 "begin\n"
                 "  Redis.new(sentinels: ['127.0.0.1:1'], name: 'm')\n"
                 "  Apache.rputs 'made'\n"
                 "rescue TypeError => e\n"
                 "  Apache.rputs e.message\n"
                 "end", options[i]);
        redis_out[0] = '\0';
        CHECK_EQ(redis_run(interp, code, &run, 0), 0);
        if (strstr(redis_out, "options hold a") == NULL) {
            unit_fail(__FILE__, __LINE__, "%s: %s", options[i], redis_out);
        }
    }

    mrb_interp_close(interp);
}
