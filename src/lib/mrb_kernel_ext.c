/*
 * Kernel#sleep and #usleep (mruby-sleep) and Kernel#exit, #exit!, #abort
 * (mruby-exit), for scripts that run inside a server's worker.
 *
 * Sleeping blocks the worker for now, in mrb_lib_sleep only: the one place
 * a coroutine-aware server hooks to suspend the request instead.  exit
 * raises SystemExit (an Exception, not a StandardError, so that a bare
 * rescue does not swallow it): the run fails with one log line and a 500
 * if nothing was sent, and the worker lives on.  (The originals' exit
 * ended the whole worker process.)
 */

#include <errno.h>
#include <math.h>
#include <time.h>

#include <mruby.h>
#include <mruby/error.h>
#include <mruby/string.h>
#include <mruby/variable.h>

#include "mrb_api.h"
#include "mrb_sys.h"


void
mrb_lib_sleep(mrb_state *mrb, double seconds)
{
    struct timespec  ts;

    ts.tv_sec = (time_t) seconds;
    ts.tv_nsec = (long) ((seconds - (double) ts.tv_sec) * 1e9);

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        /* the rest of it */
    }
}


static double
kernel_seconds(mrb_state *mrb, mrb_value v)
{
    double  s = mrb_float_p(v) ? mrb_float(v) : (double) mrb_as_int(mrb, v);

    if (!(s >= 0) || isinf(s)) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "time interval must not be negative");
    }
    return s;
}


/* sleep(seconds): the whole seconds slept, as CRuby returns them. */
static mrb_value
kernel_sleep(mrb_state *mrb, mrb_value self)
{
    mrb_value  v;
    double     s;

    mrb_get_args(mrb, "o", &v);
    s = kernel_seconds(mrb, v);
    mrb_lib_sleep(mrb, s);
    return mrb_fixnum_value((mrb_int) llround(s));
}


/* usleep(microseconds) */
static mrb_value
kernel_usleep(mrb_state *mrb, mrb_value self)
{
    mrb_value  v;
    double     us;

    mrb_get_args(mrb, "o", &v);
    us = kernel_seconds(mrb, v);
    mrb_lib_sleep(mrb, us / 1e6);
    return mrb_fixnum_value((mrb_int) us);
}


static mrb_value
kernel_exit_raise(mrb_state *mrb, mrb_value status, mrb_value msg)
{
    struct RClass  *c = mrb_class_get(mrb, "SystemExit");
    mrb_value       exc;

    if (mrb_nil_p(msg)) {
        msg = mrb_format(mrb, "exit(%v) called in a script: the request "
                         "ends here, the server's worker does not",
                         status);
    }

    exc = mrb_exc_new_str(mrb, c, mrb_str_to_str(mrb, msg));
    mrb_iv_set(mrb, exc, mrb_intern_lit(mrb, "@status"), status);
    mrb_exc_raise(mrb, exc);
    return mrb_nil_value();
}


/* exit(status = true), exit!(status = false) */
static mrb_value
kernel_exit(mrb_state *mrb, mrb_value self)
{
    mrb_value  status = mrb_true_value();

    mrb_get_args(mrb, "|o", &status);
    if (mrb_true_p(status)) {
        status = mrb_fixnum_value(0);
    } else if (mrb_false_p(status)) {
        status = mrb_fixnum_value(1);
    }
    return kernel_exit_raise(mrb, status, mrb_nil_value());
}


/* abort(message = nil) */
static mrb_value
kernel_abort(mrb_state *mrb, mrb_value self)
{
    mrb_value  msg = mrb_nil_value();

    mrb_get_args(mrb, "|S!", &msg);
    return kernel_exit_raise(mrb, mrb_fixnum_value(1), msg);
}


static const mrb_api_method  kernel_functions[] = {
    { "sleep",   kernel_sleep,   MRB_ARGS_REQ(1) },
    { "usleep",  kernel_usleep,  MRB_ARGS_REQ(1) },
    { "exit",    kernel_exit,    MRB_ARGS_OPT(1) },
    { "exit!",   kernel_exit,    MRB_ARGS_OPT(1) },
    { "abort",   kernel_abort,   MRB_ARGS_OPT(1) },
    MRB_API_METHOD_END
};


void
mrb_kernel_ext_define(mrb_state *mrb)
{
    mrb_api_define_module(mrb, NULL, "Kernel", kernel_functions);
    mrb_define_class(mrb, "SystemExit", mrb->eException_class);
}
