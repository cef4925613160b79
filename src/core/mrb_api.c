/*
 * The walkers of the registration tables declared in mrb_api.h.
 */

#include "mrb_api.h"

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


void
mrb_api_define_attrs(mrb_state *mrb, struct RClass *c, const mrb_api_attr *a)
{
    int        ai;
    mrb_value  setter;

    for ( /* void */ ; a->name != NULL; a++) {
        mrb_define_method(mrb, c, a->name, a->get, MRB_ARGS_NONE());

        if (a->set == NULL) {
            continue;
        }

        ai = mrb_gc_arena_save(mrb);
        setter = mrb_str_cat_lit(mrb, mrb_str_new_cstr(mrb, a->name), "=");
        mrb_define_method_id(mrb, c, mrb_intern_str(mrb, setter), a->set,
                             MRB_ARGS_REQ(1));
        mrb_gc_arena_restore(mrb, ai);
    }
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
