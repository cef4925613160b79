/*
 * The walkers of the registration tables declared in mrb_api.h.
 */

#include "mrb_api.h"

#include <mruby/class.h>
#include <mruby/proc.h>
#include <mruby/string.h>


void
mrb_api_define_methods(mrb_state *mrb, struct RClass *c,
    const mrb_api_method *m)
{
    for ( /* void */ ; m->name != NULL; m++) {
        mrb_define_method(mrb, c, m->name, m->func, m->aspec);
    }
}


void
mrb_api_define_class_methods(mrb_state *mrb, struct RClass *c,
    const mrb_api_method *m)
{
    for ( /* void */ ; m->name != NULL; m++) {
        mrb_define_class_method(mrb, c, m->name, m->func, m->aspec);
    }
}


/* name=, when set is not NULL */
static void
mrb_api_define_setter(mrb_state *mrb, struct RClass *c, const char *name,
    mrb_func_t set)
{
    int        ai;
    mrb_value  setter;

    if (set == NULL) {
        return;
    }

    ai = mrb_gc_arena_save(mrb);
    setter = mrb_str_cat_lit(mrb, mrb_str_new_cstr(mrb, name), "=");
    mrb_define_method_id(mrb, c, mrb_intern_str(mrb, setter), set,
                         MRB_ARGS_REQ(1));
    mrb_gc_arena_restore(mrb, ai);
}


void
mrb_api_define_attrs(mrb_state *mrb, struct RClass *c, const mrb_api_attr *a)
{
    for ( /* void */ ; a->name != NULL; a++) {
        mrb_define_method(mrb, c, a->name, a->get, MRB_ARGS_NONE());
        mrb_api_define_setter(mrb, c, a->name, a->set);
    }
}


/*
 * Each getter is a C function proc whose environment holds the field's
 * offset (mruby's own way to give a C method data of its own).
 */
void
mrb_api_define_fields(mrb_state *mrb, struct RClass *c,
    const mrb_api_field *f)
{
    int            ai;
    mrb_value      offset;
    mrb_method_t   m;
    struct RProc  *p;

    for ( /* void */ ; f->name != NULL; f++) {
        ai = mrb_gc_arena_save(mrb);
        offset = mrb_int_value(mrb, (mrb_int) f->offset);
        p = mrb_proc_new_cfunc_with_env(mrb, f->get, 1, &offset);
        MRB_METHOD_FROM_PROC(m, p);
        mrb_define_method_raw(mrb, c, mrb_intern_cstr(mrb, f->name), m);
        mrb_gc_arena_restore(mrb, ai);

        mrb_api_define_setter(mrb, c, f->name, f->set);
    }
}


/*
 * A method defined from a proc is not checked for arguments as one
 * defined with MRB_ARGS_NONE() is: the getter checks, with the same
 * ArgumentError.
 */
size_t
mrb_api_field_offset(mrb_state *mrb)
{
    mrb_get_args(mrb, "");

    return (size_t) mrb_integer(mrb_proc_cfunc_env_get(mrb, 0));
}


void
mrb_api_define_consts(mrb_state *mrb, struct RClass *c,
    const mrb_api_const *k)
{
    for ( /* void */ ; k->name != NULL; k++) {
        mrb_define_const(mrb, c, k->name, mrb_fixnum_value(k->value));
    }
}


struct RClass *
mrb_api_define_class(mrb_state *mrb, struct RClass *outer, const char *name,
    struct RClass *super, const mrb_api_method *m)
{
    struct RClass  *c;

    if (super == NULL) {
        super = mrb->object_class;
    }

    c = (outer != NULL) ? mrb_define_class_under(mrb, outer, name, super)
                        : mrb_define_class(mrb, name, super);

    if (m != NULL) {
        mrb_api_define_methods(mrb, c, m);
    }

    return c;
}


struct RClass *
mrb_api_define_module(mrb_state *mrb, struct RClass *outer, const char *name,
    const mrb_api_method *m)
{
    struct RClass  *c;

    c = (outer != NULL) ? mrb_define_module_under(mrb, outer, name)
                        : mrb_define_module(mrb, name);

    for ( /* void */ ; m != NULL && m->name != NULL; m++) {
        mrb_define_module_function(mrb, c, m->name, m->func, m->aspec);
    }

    return c;
}
