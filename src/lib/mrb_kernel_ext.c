/*
 * Kernel#usleep (mruby-sleep; Kernel#sleep is the core's, mrb_wait.c) and
 * Kernel#exit, #exit!, #abort (mruby-exit), for scripts that run inside a
 * server's worker.
 *
 * usleep waits as sleep does (mrb_wait_sleep: it suspends the request on
 * nginx and in Apache's content handlers on the event MPM, blocks the
 * thread elsewhere on Apache), to the millisecond.  exit raises
 * SystemExit (an Exception, not a StandardError, so that a bare rescue
 * does not swallow it): the run fails with one log line and a 500 if
 * nothing was sent, and the worker lives on.  (The originals' exit ended
 * the whole worker process.)
 */


#include <mruby.h>
#include <mruby/error.h>
#include <mruby/string.h>
#include <mruby/variable.h>

#include "mrb_api.h"
#include "mrb_sys.h"
#include "mrb_wait.h"


/* usleep(microseconds) */
static mrb_value
kernel_usleep(mrb_state *mrb, mrb_value self)
{
    mrb_value  v;
    double     us;

    mrb_get_args(mrb, "o", &v);
    us = mrb_float_p(v) ? mrb_float(v) : (double) mrb_as_int(mrb, v);
    if (!(us >= 0 && us <= 86400e6)) {
        mrb_raise(mrb, E_ARGUMENT_ERROR,
                  "usleep: microseconds must be 0 to 86400000000");
    }
    mrb_wait_sleep(mrb, (mrb_int) ((us + 999) / 1000), "usleep");
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
    mrb_api_define_class(mrb, NULL, "SystemExit", mrb->eException_class,
                         NULL);
}
