/*
 * The Ruby face of runs that wait (mrb_wait.c): Kernel#sleep and
 * Server.sleep, Server::Async.sleep and .coroutines, and
 * Server::Async::Cancelled, the exception a cancelled wait raises.
 */

#include <mruby.h>
#include <mruby/array.h>

#include "mrb_api.h"
#include "mrb_interp.h"
#include "mrb_wait.h"
#include "mrb_wait_core.h"


/* Seconds (Integer or Float, 0 to a day) as milliseconds. */
static mrb_int
wait_seconds_ms(mrb_state *mrb, mrb_value sec)
{
    mrb_float  f;

    if (mrb_integer_p(sec)) {
        if (mrb_integer(sec) < 0
            || mrb_integer(sec) > MRB_WAIT_SLEEP_MAX_MS / 1000)
        {
            mrb_raise(mrb, E_ARGUMENT_ERROR,
                      "sleep: seconds must be 0 to 86400");
        }
        return mrb_integer(sec) * 1000;
    }

    f = mrb_as_float(mrb, sec);
    if (!(f >= 0 && f <= MRB_WAIT_SLEEP_MAX_MS / 1000)) {   /* NaN too */
        mrb_raise(mrb, E_ARGUMENT_ERROR, "sleep: seconds must be 0 to 86400");
    }

    return (mrb_int) (f * 1000.0 + 0.5);
}


/* Kernel#sleep(sec) and Server.sleep(sec): returns the seconds slept. */
static mrb_value
wait_kernel_sleep(mrb_state *mrb, mrb_value self)
{
    mrb_value  sec = mrb_get_arg1(mrb);

    mrb_wait_sleep(mrb, wait_seconds_ms(mrb, sec), "sleep");
    return mrb_integer_p(sec) ? sec : mrb_fixnum_value(
        (mrb_int) mrb_as_float(mrb, sec));
}


/* Server::Async.sleep(msec) */
static mrb_value
wait_async_sleep(mrb_state *mrb, mrb_value self)
{
    mrb_wait_sleep(mrb, mrb_as_int(mrb, mrb_get_arg1(mrb)), "Async.sleep");
    return mrb_nil_value();
}


/* Server::Async.coroutines: [live, idle] stacks of this interpreter */
static mrb_value
wait_async_coroutines(mrb_state *mrb, mrb_value self)
{
    unsigned   live, idle;
    mrb_value  v[2];

    mrb_wait_counts(mrb_interp_from_state(mrb), &live, &idle);
    v[0] = mrb_fixnum_value(live);
    v[1] = mrb_fixnum_value(idle);
    return mrb_ary_new_from_values(mrb, 2, v);
}


static const mrb_api_method  wait_kernel_methods[] = {
    { "sleep", wait_kernel_sleep, MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};

static const mrb_api_method  wait_async_methods[] = {
    { "sleep", wait_async_sleep, MRB_ARGS_REQ(1) },
    { "coroutines", wait_async_coroutines, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


void
mrb_wait_define(mrb_state *mrb, struct RClass *server_class)
{
    struct RClass  *async;

    mrb_api_define_methods(mrb, mrb->kernel_module, wait_kernel_methods);
    mrb_api_define_class_methods(mrb, server_class, wait_kernel_methods);

    async = mrb_api_define_module(mrb, server_class, "Async",
                                  wait_async_methods);
    mrb_api_define_class(mrb, async, "Cancelled", mrb->eException_class,
                         NULL);
}
