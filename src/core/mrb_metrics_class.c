/*
 * Server.metrics: the per-script metrics (mrb_metrics.h) as Ruby values,
 * for a status page: an Array with a Hash per script and phase, the same
 * figures as the endpoint's JSON.  Each script's figures are copied out
 * of shared memory before Ruby allocates (which may raise).
 */

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/hash.h>
#include <mruby/string.h>

#include "mrb_api.h"
#include "mrb_metrics.h"


static mrb_value
metrics_seconds(mrb_state *mrb, uint64_t ns)
{
    return mrb_float_value(mrb, (mrb_float) ns / 1e9);
}


static mrb_value
metrics_count(mrb_state *mrb, uint64_t n)
{
    return mrb_int_value(mrb, (mrb_int) n);
}


static mrb_value
metrics_script_hash(mrb_state *mrb, const mrb_metrics_script *m)
{
    mrb_value  h, buckets, exceptions;
    uint32_t   cursor = 0;
    uint64_t   count;
    size_t     k;
    char       cls[MRB_METRICS_NAME_LEN];

    buckets = mrb_ary_new_capa(mrb, MRB_METRICS_NBUCKETS);
    for (k = 0; k < MRB_METRICS_NBUCKETS; k++) {
        mrb_ary_push(mrb, buckets, mrb_assoc_new(mrb,
                     metrics_seconds(mrb, m->le_ns[k]),
                     metrics_count(mrb, m->buckets[k])));
    }

    exceptions = mrb_hash_new(mrb);
    while (mrb_metrics_exception_next(m, &cursor, cls, sizeof(cls), &count)) {
        mrb_hash_set(mrb, exceptions, mrb_str_new_cstr(mrb, cls),
                     metrics_count(mrb, count));
    }

    h = mrb_hash_new_capa(mrb, 8 + MRB_METRICS_NEVENTS);
    mrb_hash_set(mrb, h, mrb_str_new_lit(mrb, "script"),
                 mrb_str_new_cstr(mrb, m->script));
    mrb_hash_set(mrb, h, mrb_str_new_lit(mrb, "phase"),
                 mrb_str_new_cstr(mrb, m->phase));
    mrb_hash_set(mrb, h, mrb_str_new_lit(mrb, "runs"),
                 metrics_count(mrb, m->runs));
    mrb_hash_set(mrb, h, mrb_str_new_lit(mrb, "responses_5xx"),
                 metrics_count(mrb, m->status_5xx));
    mrb_hash_set(mrb, h, mrb_str_new_lit(mrb, "run_seconds"),
                 metrics_seconds(mrb, m->run_ns));
    mrb_hash_set(mrb, h, mrb_str_new_lit(mrb, "wait_seconds"),
                 metrics_seconds(mrb, m->wait_ns));
    mrb_hash_set(mrb, h, mrb_str_new_lit(mrb, "run_seconds_buckets"),
                 buckets);
    mrb_hash_set(mrb, h, mrb_str_new_lit(mrb, "exceptions"), exceptions);

    for (k = 0; k < MRB_METRICS_NEVENTS; k++) {
        mrb_hash_set(mrb, h, mrb_str_new_cstr(mrb, mrb_metrics_event_names[k]),
                     metrics_count(mrb, m->events[k]));
    }

    return h;
}


static mrb_value
metrics_all(mrb_state *mrb, mrb_value self)
{
    mrb_metrics_script  m;
    mrb_value           list = mrb_ary_new(mrb);
    uint32_t            cursor = 0;
    int                 ai = mrb_gc_arena_save(mrb);

    while (mrb_metrics_script_next(&cursor, &m)) {
        mrb_ary_push(mrb, list, metrics_script_hash(mrb, &m));
        mrb_gc_arena_restore(mrb, ai);
    }

    return list;
}


static const mrb_api_method  metrics_class_methods[] = {
    { "metrics", metrics_all, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


void
mrb_metrics_define(mrb_state *mrb, struct RClass *server_class)
{
    mrb_api_define_class_methods(mrb, server_class, metrics_class_methods);
}
