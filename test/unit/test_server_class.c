/*
 * Unit tests of mrb_server_class.c: the vocabulary both servers share,
 * through a server of the test's own (what it writes and logs is kept
 * here), run as request scripts.
 */

#include <stdio.h>
#include <string.h>

#include "mrb_interp.h"
#include "mrb_script.h"
#include "unit.h"

static char  sc_out[1024];
static char  sc_log[1024];


static int
sc_write(mrb_run_rec *run, const char *data, size_t len)
{
    return unit_append(sc_out, sizeof(sc_out), data, len);
}


/* each line as "[LEVEL] MESSAGE\n" */
static void
sc_logger(void *target, mrb_run_rec *run, int level, const char *msg,
    size_t len)
{
    char  line[256];

    snprintf(line, sizeof(line), "[%d] %.*s\n", level, (int) len, msg);
    (void) unit_append(sc_log, sizeof(sc_log), line, strlen(line));
}


/* Apache's numbering: APLOG_EMERG is 0 */
static const mrb_server  sc_server = {
    "Test", "Apache", "mod_mruby", "1.2.3", 0, NULL, sc_write, sc_logger
};


/* Runs code as a request script in a new sealed interpreter: what
 * mrb_script_run returned, with run's result in *run. */
static int
sc_run(const char *code, mrb_run_rec *run)
{
    char         err[256];
    mrb_interp  *interp;
    mrb_script  *s;
    int          rc;

    sc_out[0] = '\0';
    sc_log[0] = '\0';

    interp = mrb_interp_open(&sc_server, NULL, err, sizeof(err));
    if (interp == NULL) {
        return -2;
    }

    mrb_interp_seal(interp);

    s = mrb_script_from_code(code, strlen(code), "sc", 1, err, sizeof(err));
    if (s == NULL) {
        mrb_interp_close(interp);
        return -2;
    }

    mrb_run_init(run, (void *) 1, 0);
    rc = mrb_script_run(interp, s, run);

    mrb_script_free(s);
    mrb_interp_close(interp);
    return rc;
}


TEST(server_class_names_the_server_and_the_module)
{
    mrb_run_rec  run;

    CHECK_EQ(sc_run("Apache.rputs [server_name, get_server_class, "
                    "Apache.module_name, Apache.module_version, "
                    "Apache::HTTP_OK].inspect", &run), 0);
    CHECK(strcmp(sc_out, "[\"Test\", Apache, \"mod_mruby\", \"1.2.3\", "
                 "200]") == 0);
}


TEST(server_class_rputs_writes_any_object_as_its_to_s)
{
    mrb_run_rec  run;

    CHECK_EQ(sc_run("Apache.rputs 42; Apache.rputs nil; Apache.rputs :s",
                    &run), 0);
    CHECK(strcmp(sc_out, "42s") == 0);
}


TEST(server_class_return_sets_the_result_and_the_script_goes_on)
{
    mrb_run_rec  run;

    CHECK_EQ(sc_run("Apache.return 403; Apache.rputs 'after'", &run), 0);
    CHECK_EQ(run.result, 403);
    CHECK(run.returned);
    CHECK(strcmp(sc_out, "after") == 0);
}


TEST(server_class_errlogger_logs_at_the_servers_level)
{
    mrb_run_rec  run;

    /* 3 is APLOG_ERR with a base of 0: MRB_LOG_ERR, syslog's 3 */
    CHECK_EQ(sc_run("Apache.errlogger 3, 'one'; Apache.log 5, [:two]",
                    &run), 0);
    CHECK(strcmp(sc_log, "[3] one\n[5] [:two]\n") == 0);
}
