/*
 * The helpers of lib_eval.h.
 */

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib_eval.h"
#include "mrb_coro.h"
#include "mrb_lib.h"
#include "mrb_mruby_version.h"
#include "mrb_script.h"
#include "unit.h"

static char  lib_out[8192];


static int
lib_write(mrb_run_rec *run, const char *data, size_t len)
{
    size_t  used = strlen(lib_out);

    if (used + len >= sizeof(lib_out)) {
        return -1;
    }

    memcpy(lib_out + used, data, len);
    lib_out[used + len] = '\0';
    return 0;
}


static void
lib_log(void *target, mrb_run_rec *run, int level, const char *msg, size_t len)
{
    printf("  log[%d]: %.*s\n", level, (int) len, msg);
}


static const mrb_server  lib_server = {
    .name = "Test", .class_name = "Apache", .module_name = "mod_mruby",
    .module_version = "test", .write = lib_write, .log = lib_log,
    .parts = mrb_parts
};


mrb_interp *
lib_interp(void)
{
    return lib_interp_startup(NULL);
}


mrb_interp *
lib_interp_startup(const char *code)
{
    char         err[512];
    mrb_interp  *interp;
    mrb_script  *s;
    mrb_run_rec  run;

    interp = mrb_interp_open(&lib_server, NULL, err, sizeof(err));
    if (interp == NULL) {
        printf("  mrb_interp_open: %s\n", err);
        return NULL;
    }

    if (code != NULL) {
        s = mrb_script_from_code(code, strlen(code), "startup", 1, err,
                                 sizeof(err));
        if (s == NULL) {
            printf("  startup: %s\n", err);
            mrb_interp_close(interp);
            return NULL;
        }
        mrb_run_init(&run, NULL, 0);
        run.startup = 1;
        mrb_script_run(interp, s, &run);
        mrb_script_free(s);
    }

    mrb_interp_seal(interp);
    return interp;
}


int
lib_eval(mrb_interp *interp, const char *code, char *out, size_t len)
{
    static const char  head[] = "__v = begin\n",
                       tail[] = "\nend\nApache.rputs __v.inspect";
    char               err[512], *wrapped;
    size_t             n = strlen(code);
    mrb_script        *s;
    mrb_run_rec        run;
    int                rc;

    /* as long as the code is: a case may be a script of thousands of
     * lines */
    wrapped = malloc(sizeof(head) + n + sizeof(tail));
    if (wrapped == NULL) {
        snprintf(out, len, "out of memory");
        return -1;
    }
    memcpy(wrapped, head, sizeof(head) - 1);
    memcpy(wrapped + sizeof(head) - 1, code, n);
    memcpy(wrapped + sizeof(head) - 1 + n, tail, sizeof(tail));

    s = mrb_script_from_code(wrapped, strlen(wrapped), "case", 1, err,
                             sizeof(err));
    free(wrapped);
    if (s == NULL) {
        snprintf(out, len, "compile: %s", err);
        return -1;
    }

    lib_out[0] = '\0';
    mrb_run_init(&run, (void *) 1, 0);
    rc = mrb_script_run(interp, s, &run);
    mrb_script_free(s);

    snprintf(out, len, "%s", rc == 0 ? lib_out : run.error);
    return rc == 0 ? 0 : -1;
}


typedef struct {
    mrb_interp  *interp;
    const char  *code;
    char        *out;
    size_t       len;
    int          rc;
} lib_coro_eval;


static void
lib_eval_coro(mrb_coro *coro, void *arg)
{
    lib_coro_eval  *e = arg;

    e->rc = lib_eval(e->interp, e->code, e->out, e->len);
}


int
lib_eval_on_coroutine(mrb_interp *interp, const char *code, char *out,
    size_t len)
{
    lib_coro_eval   e = { interp, code, out, len, -1 };
    mrb_coro_pool  *pool = mrb_coro_pool_new(MRB_CORO_STACK_DEFAULT, 0);
    mrb_coro       *coro;

    coro = pool != NULL ? mrb_coro_new(pool, lib_eval_coro, &e) : NULL;
    if (coro == NULL) {
        snprintf(out, len, "no coroutine");
        mrb_coro_pool_free(pool);
        return -1;
    }

    /* lib_eval never suspends: one resume runs it to its end */
    mrb_coro_resume(coro);

    mrb_coro_pool_free(pool);
    return e.rc;
}


#if MRUBY_RELEASE_NO >= 40000
/*
 * mruby 4.0 inspects a Hash as Ruby 3.4 does: {"a" => 1, b: 2} where 3.x
 * writes {"a"=>1, :b=>2}.  The expected values are written the 3.x way:
 * this writes them the 4.0 way (outside string literals: a "=>" after a
 * plain symbol key becomes "key: ", any other " => ").
 */
static const char *
lib_hash_inspect_as_40(const char *in, char *out, size_t len)
{
    size_t  o = 0, k;
    int     quoted = 0;

    for (; *in != '\0' && o + 4 < len; in++) {
        if (quoted) {
            if (*in == '\\' && in[1] != '\0') {
                out[o++] = *in++;
            } else if (*in == '"') {
                quoted = 0;
            }
            out[o++] = *in;
            continue;
        }

        if (*in == '"') {
            quoted = 1;
        } else if (in[0] == '=' && in[1] == '>') {
            for (k = o; k > 0 && (isalnum((unsigned char) out[k - 1])
                                  || out[k - 1] == '_'); k--) {
                /* back over a symbol's name */
            }
            if (k > 0 && k < o && out[k - 1] == ':'
                && (k == 1 || out[k - 2] == '{' || out[k - 2] == ' '))
            {
                memmove(out + k - 1, out + k, o - k);
                o--;
                out[o++] = ':';
                out[o++] = ' ';
            } else {
                out[o++] = ' ';
                out[o++] = '=';
                out[o++] = '>';
                out[o++] = ' ';
            }
            in++;
            continue;
        }
        out[o++] = *in;
    }

    out[o] = '\0';
    return out;
}
#endif


void
lib_expect(mrb_interp *interp, const char *file, int line, const char *code,
    const char *expected, int coro)
{
    char  got[8192];
    int   rc;
#if MRUBY_RELEASE_NO >= 40000
    char  as_40[8192];

    expected = lib_hash_inspect_as_40(expected, as_40, sizeof(as_40));
#endif

    rc = coro ? lib_eval_on_coroutine(interp, code, got, sizeof(got))
              : lib_eval(interp, code, got, sizeof(got));
    if (rc != 0 || strcmp(got, expected) != 0)
    {
        unit_fail(file, line, "%s\n      expected %s\n      got      %s",
                  code, expected, got);
    }
}
