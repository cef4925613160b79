/*
 * The owner of a Mutex (mutex.rb) is the run that locked it.
 *
 * Runs of one interpreter share a Mutex a startup script made (a constant
 * of mruby_init_worker), and while one waits (a sleep inside synchronize)
 * others run.  So the lock is not the object's but the run's: the Mutexes
 * the current outermost run holds are in an Array, this part's state
 * (mrb_part.h).  It is taken aside while the run waits and put back
 * before it resumes, so that the runs meanwhile neither own nor unlock
 * those locks and wait for them as for a lock held in another process.
 * A run that ends holding some lets them go, as a Ruby thread that ends
 * does: no lock outlives the run that owned it.
 *
 * The Array sits in slot 0 of a one-slot Array that Kernel holds (a
 * script cannot reach it, and run_end, which must not raise, finds it
 * without a constant lookup); nil while the run holds nothing.
 */

#include <errno.h>
#include <limits.h>
#include <signal.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/error.h>
#include <mruby/variable.h>

#include "mrb_api.h"
#include "mrb_mutex.h"
#include "mrb_wait.h"


static mrb_value
mutex_box(mrb_state *mrb)
{
    return mrb_iv_get(mrb, mrb_obj_value(mrb->kernel_module),
                      mrb_intern_lit(mrb, "__mutex_held__"));
}


/* The current run's Array of the Mutexes it holds, or nil. */
static mrb_value
mutex_held(mrb_state *mrb)
{
    mrb_value  box = mutex_box(mrb);

    return mrb_array_p(box) ? RARRAY_PTR(box)[0] : mrb_nil_value();
}


/* Sets the box's slot (it exists: allocates nothing). */
static void
mutex_held_set(mrb_state *mrb, mrb_value held)
{
    mrb_value  box = mutex_box(mrb);

    if (mrb_array_p(box)) {
        RARRAY_PTR(box)[0] = held;
        mrb_field_write_barrier_value(mrb, (struct RBasic *) mrb_ary_ptr(box),
                                      held);
    }
}


/* The index of m in held, or -1. */
static mrb_int
mutex_held_index(mrb_state *mrb, mrb_value held, mrb_value m)
{
    mrb_int  i;

    if (!mrb_array_p(held)) {
        return -1;
    }

    for (i = 0; i < RARRAY_LEN(held); i++) {
        if (mrb_obj_eq(mrb, RARRAY_PTR(held)[i], m)) {
            return i;
        }
    }

    return -1;
}


/* Mutex.__own(m): the current run now holds m. */
static mrb_value
mutex_s_own(mrb_state *mrb, mrb_value self)
{
    mrb_value  m, held;

    mrb_get_args(mrb, "o", &m);

    held = mutex_held(mrb);
    if (!mrb_array_p(held)) {
        held = mrb_ary_new(mrb);
        mutex_held_set(mrb, held);
    }

    mrb_ary_push(mrb, held, m);
    mrb_part_dirty(mrb, &mrb_mutex_part);
    return m;
}


/* Mutex.__owned?(m): whether the current run holds m. */
static mrb_value
mutex_s_owned_p(mrb_state *mrb, mrb_value self)
{
    mrb_value  m;

    mrb_get_args(mrb, "o", &m);
    return mrb_bool_value(mutex_held_index(mrb, mutex_held(mrb), m) >= 0);
}


/* Mutex.__disown(m): the current run no longer holds m. */
static mrb_value
mutex_s_disown(mrb_state *mrb, mrb_value self)
{
    mrb_value  m, held;
    mrb_int    i, last;

    mrb_get_args(mrb, "o", &m);

    held = mutex_held(mrb);
    i = mutex_held_index(mrb, held, m);
    if (i >= 0) {
        last = RARRAY_LEN(held) - 1;
        mrb_ary_set(mrb, held, i, RARRAY_PTR(held)[last]);
        mrb_ary_pop(mrb, held);
    }

    return m;
}


/*
 * Mutex.__wait_check: raises unless the current run can wait (suspend).
 * A run that cannot must not wait for a lock another run of its
 * interpreter holds: blocking its thread, it would keep that run from
 * resuming to let the lock go.
 */
static mrb_value
mutex_s_wait_check(mrb_state *mrb, mrb_value self)
{
    mrb_wait_check(mrb, "Mutex#lock: the lock is held by another run of "
                   "this interpreter, and this one");
    return mrb_nil_value();
}


/*
 * Mutex.__dead?(pid): whether no process pid exists, so that the lock it
 * holds can be taken over.  kill(pid, 0) fails with EPERM for a live
 * process of another user (the root parent or master of the workers); a
 * holder that is no process id (0 or less: a group) is never dead.
 */
static mrb_value
mutex_s_dead_p(mrb_state *mrb, mrb_value self)
{
    mrb_int  pid;

    mrb_get_args(mrb, "i", &pid);

    return mrb_bool_value(pid > 0 && pid <= INT_MAX
                          && kill((pid_t) pid, 0) != 0 && errno == ESRCH);
}


static mrb_value
mutex_release_body(mrb_state *mrb, void *arg)
{
    return mrb_funcall(mrb, *(mrb_value *) arg, "__release", 0);
}


/*
 * The run ended holding the Mutexes of its Array: each lets go, the last
 * first (its __release disowns it: the shared dictionary's key of a global
 * one is deleted too).  The Array stays in the box meanwhile, where the GC
 * sees it.  Each one it held at the end is released once: i only goes
 * down, so that a __release a script redefined (one that raises, keeps
 * the Mutex or owns others) cannot keep this from ending.
 */
static int
mutex_run_end(mrb_state *mrb, const mrb_run_rec *run)
{
    mrb_value  held = mutex_held(mrb), m;
    mrb_int    i;
    mrb_bool   failed;
    int        ai = mrb_gc_arena_save(mrb);

    i = mrb_array_p(held) ? RARRAY_LEN(held) : 0;

    while (i > 0) {
        m = RARRAY_PTR(held)[i - 1];
        mrb_protect_error(mrb, mutex_release_body, &m, &failed);
        if (failed) {
            mrb->exc = NULL;
        }

        held = mutex_held(mrb);
        if (!mrb_array_p(held)) {
            break;
        }
        i = (i - 1 < RARRAY_LEN(held)) ? i - 1 : RARRAY_LEN(held);
    }

    mutex_held_set(mrb, mrb_nil_value());
    mrb_gc_arena_restore(mrb, ai);
    return 0;
}


/* While the run waits, its Array is the run's, not the interpreter's. */
static mrb_value
mutex_take(mrb_state *mrb)
{
    mrb_value  held = mutex_held(mrb);

    mutex_held_set(mrb, mrb_nil_value());
    return held;
}


static void
mutex_put_back(mrb_state *mrb, mrb_value held)
{
    mutex_held_set(mrb, held);
}


static const mrb_api_method  mutex_class_methods[] = {
    { "__own",     mutex_s_own,     MRB_ARGS_REQ(1) },
    { "__owned?",  mutex_s_owned_p, MRB_ARGS_REQ(1) },
    { "__disown",  mutex_s_disown,  MRB_ARGS_REQ(1) },
    { "__wait_check", mutex_s_wait_check, MRB_ARGS_NONE() },
    { "__dead?",   mutex_s_dead_p,  MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};


static void
mutex_define(mrb_state *mrb)
{
    struct RClass  *c = mrb_define_class(mrb, "Mutex", mrb->object_class);
    mrb_value       box = mrb_ary_new_capa(mrb, 1);

    mrb_api_define_class_methods(mrb, c, mutex_class_methods);

    mrb_ary_push(mrb, box, mrb_nil_value());
    mrb_iv_set(mrb, mrb_obj_value(mrb->kernel_module),
               mrb_intern_lit(mrb, "__mutex_held__"), box);
}


const mrb_part  mrb_mutex_part = {
    "Mutex", mutex_define, mutex_run_end, mutex_take, mutex_put_back
};
