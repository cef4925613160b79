/*
 * An exception as one error-log line: class, message and backtrace, with
 * newlines escaped so that one error is one line; where the server logs
 * at debug, a run's backtrace instead on lines of their own, one a frame,
 * as the original ngx_mruby logged it.  And the one conversion of a run's
 * value that happens after the run, protected the same way.
 */

#include <stdio.h>
#include <string.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/irep.h>
#include <mruby/debug.h>
#include <mruby/error.h>
#include <mruby/string.h>

#include "mrb_interp_core.h"
#include "mrb_mruby_version.h"


typedef struct {
    char    *p;
    size_t   left;
} mrb_line_buf;


/*
 * Appends len bytes, "\n" and "\r" escaped, and NUL too: the line is a C
 * string from here on, and a NUL in a message would cut off the rest of it
 * and the backtrace.  Silently truncates.
 */
static void
line_put(mrb_line_buf *b, const char *s, size_t len)
{
    size_t  i;
    char    c;

    for (i = 0; i < len && b->left > 1; i++) {
        c = s[i];

        if (c == '\n' || c == '\r' || c == '\0') {
            if (b->left <= 2) {
                break;
            }
            *b->p++ = '\\';
            *b->p++ = (c == '\n') ? 'n' : (c == '\r') ? 'r' : '0';
            b->left -= 2;
            continue;
        }

        *b->p++ = c;
        b->left--;
    }

    *b->p = '\0';
}


static void
line_puts(mrb_line_buf *b, const char *s)
{
    line_put(b, s, strlen(s));
}


static void
line_put_value(mrb_state *mrb, mrb_line_buf *b, mrb_value v)
{
    if (mrb_string_p(v)) {
        line_put(b, RSTRING_PTR(v), (size_t) RSTRING_LEN(v));
    }
}


static mrb_value
exc_message(mrb_state *mrb, void *exc)
{
    return mrb_funcall(mrb, *(mrb_value *) exc, "message", 0);
}


/* The backtrace's frames, one a line, each "mruby: backtrace I/N: FRAME"
 * at level. */
static void
log_frames(mrb_interp *interp, mrb_run_rec *run, int level, mrb_value bt)
{
    char          line[MRB_ERR_MSG_LEN];
    mrb_line_buf  b;
    mrb_int       i, n = RARRAY_LEN(bt);
    int           head;

    for (i = 0; i < n; i++) {
        head = snprintf(line, sizeof(line), "mruby: backtrace %d/%d: ",
                        (int) i + 1, (int) n);
        b.p = line + head;
        b.left = sizeof(line) - head;
        line_put_value(mrb_interp_state(interp), &b, RARRAY_PTR(bt)[i]);

        mrb_interp_server(interp)->log(mrb_interp_log_target(interp), run,
                                       level, line, (size_t) (b.p - line));
    }
}


typedef struct {
    mrb_value      exc;
    mrb_interp    *interp;
    mrb_run_rec   *run;
    mrb_line_buf  *line;
} error_format_arg;


static mrb_value
error_format_body(mrb_state *mrb, void *arg)
{
    error_format_arg   *e = arg;
    mrb_line_buf       *b = e->line;
    mrb_value           msg, bt, frame;
    mrb_int             i, n;
    mrb_bool            failed;
    const mrb_server   *server;

    /* exc is caught: left in mrb->exc, mruby 3.3's VM would raise it again
     * at the first call below (message); the arena keeps it from the GC
     * instead, which would otherwise free it while the calls below
     * allocate (then setting its backtrace raises outside any rescue) */
    mrb_gc_protect(mrb, e->exc);

    line_puts(b, mrb_obj_classname(mrb, e->exc));
    line_puts(b, ": ");

    /* A message method of a user's exception class may raise too. */
    msg = mrb_protect_error(mrb, exc_message, &e->exc, &failed);
    if (!failed) {
        line_put_value(mrb, b, msg);
    }

    bt = mrb_exc_backtrace(mrb, e->exc);
    n = mrb_array_p(bt) ? RARRAY_LEN(bt) : 0;
    server = e->interp != NULL ? mrb_interp_server(e->interp) : NULL;

    /* a server without log_enabled (the unit tests') is not at debug */
    if (n > 0 && server != NULL && server->log_enabled != NULL
        && server->log_enabled(mrb_interp_log_target(e->interp), e->run,
                               MRB_LOG_DEBUG))
    {
        /* at the error line's level: every log that has it has them */
        log_frames(e->interp, e->run, MRB_LOG_ERR, bt);
        line_puts(b, " (backtrace above)");

    } else if (n > 0) {
        line_puts(b, " (");

        for (i = 0; i < n; i++) {
            frame = RARRAY_PTR(bt)[i];
            if (i > 0) {
                line_puts(b, ", ");
            }
            line_put_value(mrb, b, frame);
        }

        line_puts(b, ")");
    }

    return mrb_nil_value();
}


/*
 * The line of exc into buf; with interp (a run's error), at debug the
 * frames are logged first and the line refers to them.  Out of memory
 * (the class name, the backtrace allocate), the line says so after what
 * it has: outside the run nothing would catch the raise.
 */
static void
error_format(mrb_state *mrb, mrb_value exc, mrb_interp *interp,
    mrb_run_rec *run, char *buf, size_t len)
{
    mrb_line_buf       b = { buf, len };
    error_format_arg   e = { exc, interp, run, &b };
    mrb_bool           failed;
    int                ai;

    if (len == 0) {
        return;
    }

    buf[0] = '\0';
    ai = mrb_gc_arena_save(mrb);
    mrb->exc = NULL;

    mrb_protect_error(mrb, error_format_body, &e, &failed);
    if (failed) {
        line_puts(&b, b.p == buf ? "an exception (out of memory describing "
                                   "it)"
                                 : " (out of memory describing it)");
    }

    mrb->exc = NULL;
    mrb_gc_arena_restore(mrb, ai);
}


void
mrb_error_format(mrb_state *mrb, mrb_value exc, char *buf, size_t len)
{
    error_format(mrb, exc, NULL, NULL, buf, len);
}


void
mrb_error_where(mrb_state *mrb, char *buf, size_t len)
{
    struct mrb_context  *c = mrb->c;
    const mrb_irep      *irep;
    const mrb_callinfo  *ci;
    const char          *file;
    uint32_t             idx;
    int32_t              line;

    buf[0] = '\0';

    for (ci = c->ci; ci >= c->cibase; ci--) {
        if (ci->proc == NULL || MRB_PROC_CFUNC_P(ci->proc)
            || ci->pc == NULL)
        {
            continue;
        }

        /* ci->pc is past the instruction running, as in a backtrace */
        irep = ci->proc->body.irep;
        idx = (uint32_t) (ci->pc - irep->iseq - 1);
        file = mrb_debug_get_filename(mrb, irep, idx);
        line = mrb_debug_get_line(mrb, irep, idx);

        /* mruby's own methods in Ruby (Array#initialize) have no lines:
         * the script's call of them is where */
        if (file != NULL && line >= 0) {
            snprintf(buf, len, "%s:%d", file, (int) line);
            return;
        }
    }
}


void
mrb_error_format_run(mrb_interp *interp, mrb_value exc, mrb_run_rec *run)
{
    error_format(mrb_interp_state(interp), exc, interp, run, run->error,
                 sizeof(run->error));
}


static mrb_value
value_to_s(mrb_state *mrb, void *value)
{
    return mrb_obj_as_string(mrb, *(mrb_value *) value);
}


int
mrb_run_value_string(mrb_state *mrb, mrb_run_rec *run, mrb_value *out)
{
    mrb_value  s;
    mrb_bool   failed;

    if (mrb_nil_p(run->value)) {
        *out = mrb_str_new_lit(mrb, "");
        return 0;
    }

    s = mrb_protect_error(mrb, value_to_s, &run->value, &failed);

    if (failed) {
        mrb_error_format(mrb, s, run->error, sizeof(run->error));
        return -1;
    }

    *out = s;
    return 0;
}
