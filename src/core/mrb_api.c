/*
 * The walkers of the registration tables declared in mrb_api.h.
 */

#include "mrb_api.h"

#include <string.h>
#include <mruby/class.h>
#include <mruby/hash.h>
#include <mruby/proc.h>
#include <mruby/string.h>
#include <mruby/variable.h>
#include "mrb_mruby_version.h"


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
 * The method is a C function proc whose environment holds value (mruby's
 * own way to give a C method data of its own).
 */
void
mrb_api_define_method_with(mrb_state *mrb, struct RClass *c,
    const char *name, mrb_func_t func, mrb_value value)
{
    int            ai;
    mrb_method_t   m;
    struct RProc  *p;

    ai = mrb_gc_arena_save(mrb);
    p = mrb_proc_new_cfunc_with_env(mrb, func, 1, &value);
    MRB_METHOD_FROM_PROC(m, p);
    mrb_define_method_raw(mrb, c, mrb_intern_cstr(mrb, name), m);
    mrb_gc_arena_restore(mrb, ai);
}


mrb_value
mrb_api_method_value(mrb_state *mrb)
{
    return mrb_proc_cfunc_env_get(mrb, 0);
}


mrb_int
mrb_api_argc(mrb_state *mrb, mrb_int min, mrb_int max)
{
    int      kw = mrb_api_kwargs_given(mrb);
    mrb_int  argc = mrb_get_argc(mrb);

    if (argc < min || argc > max || kw) {
        mrb_argnum_error(mrb, argc + kw, min, max);
    }

    return argc;
}


void
mrb_api_no_args(mrb_state *mrb)
{
    (void) mrb_api_argc(mrb, 0, 0);
}


/* new's environment: init, the symbol initialize (interning it on each
 * call would cost as much as the rest) and Class#new. */
enum { MRB_API_NEW_INIT, MRB_API_NEW_SYM, MRB_API_NEW_CLASS_NEW,
       MRB_API_NEW_N };


static mrb_value
mrb_api_new(mrb_state *mrb, mrb_value self)
{
    mrb_func_t       init;
    mrb_method_t     m;
    struct RClass   *c = mrb_class_ptr(self), *found = c;
    enum mrb_vtype   tt = MRB_INSTANCE_TT(c);
    mrb_value        obj;

    init = (mrb_func_t) mrb_cptr(mrb_proc_cfunc_env_get(mrb,
                                                        MRB_API_NEW_INIT));
    m = mrb_method_search_vm(mrb, &found, mrb_symbol(
            mrb_proc_cfunc_env_get(mrb, MRB_API_NEW_SYM)));

    if (c->tt == MRB_TT_SCLASS || MRB_METHOD_UNDEF_P(m)
        || !MRB_METHOD_CFUNC_P(m) || MRB_METHOD_CFUNC(m) != init)
    {
        /* a subclass's own initialize, or no instance to make: Class#new
         * in this call, which keeps its arguments (keywords included) */
        return mrb_exec_irep(mrb, self, mrb_proc_ptr(
                   mrb_proc_cfunc_env_get(mrb, MRB_API_NEW_CLASS_NEW)));
    }

    obj = mrb_obj_value(mrb_obj_alloc(mrb, tt != 0 ? tt : MRB_TT_OBJECT, c));
    init(mrb, obj);

    return obj;
}


void
mrb_api_define_new(mrb_state *mrb, struct RClass *c, mrb_func_t init)
{
    int             ai;
    mrb_sym         new_sym;
    mrb_value       env[MRB_API_NEW_N];
    mrb_method_t    m;
    struct RClass  *class_class = mrb->class_class;
    struct RProc   *p;

    ai = mrb_gc_arena_save(mrb);
    new_sym = mrb_intern_lit(mrb, "new");

    m = mrb_method_search_vm(mrb, &class_class, new_sym);
    /* const in mruby 4.0 */
    p = MRB_METHOD_PROC_P(m) ? (struct RProc *) MRB_METHOD_PROC(m)
                             : mrb_proc_new_cfunc(mrb, MRB_METHOD_FUNC(m));

    env[MRB_API_NEW_INIT] = mrb_cptr_value(mrb, (void *) init);
    env[MRB_API_NEW_SYM] = mrb_symbol_value(mrb_intern_lit(mrb,
                                                           "initialize"));
    env[MRB_API_NEW_CLASS_NEW] = mrb_obj_value(p);

    p = mrb_proc_new_cfunc_with_env(mrb, mrb_api_new, MRB_API_NEW_N, env);
    MRB_METHOD_FROM_PROC(m, p);
    mrb_define_method_raw(mrb, mrb_class_ptr(mrb_singleton_class(mrb,
                              mrb_obj_value(c))), new_sym, m);
    mrb_gc_arena_restore(mrb, ai);
}


/* Each getter is a method with the field's offset as its value. */
void
mrb_api_define_fields(mrb_state *mrb, struct RClass *c,
    const mrb_api_field *f)
{
    for ( /* void */ ; f->name != NULL; f++) {
        mrb_api_define_method_with(mrb, c, f->name, f->get,
                                   mrb_int_value(mrb, (mrb_int) f->offset));
        mrb_api_define_setter(mrb, c, f->name, f->set);
    }
}


size_t
mrb_api_field_offset(mrb_state *mrb)
{
    mrb_api_no_args(mrb);

    return (size_t) mrb_integer(mrb_api_method_value(mrb));
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


typedef struct {
    const char *const  *names;
    mrb_value          *values;
    int                 n;
} mrb_api_kwargs_walk;


static int
mrb_api_kwarg(mrb_state *mrb, mrb_value key, mrb_value val, void *data)
{
    int                   i;
    mrb_int               len;
    const char           *name;
    mrb_api_kwargs_walk  *w = data;

    if (mrb_symbol_p(key)) {
        name = mrb_sym_name_len(mrb, mrb_symbol(key), &len);

        for (i = 0; i < w->n; i++) {
            if (strncmp(w->names[i], name, len) == 0
                && w->names[i][len] == '\0')
            {
                w->values[i] = val;
                return 0;
            }
        }
    }

    mrb_raisef(mrb, E_ARGUMENT_ERROR, "unknown keyword: %v", key);
    return 1;
}


/*
 * The Hash of the current call's keyword arguments, or nil.  mruby 3.1
 * and 3.3 pack them into one Hash after the positional arguments (ci->nk
 * 15), also when a C function is called: the layout mrb_get_arg1 reads.
 */
static mrb_value
mrb_api_kwargs_hash(mrb_state *mrb)
{
    mrb_callinfo  *ci = mrb->c->ci;
    mrb_value      kw;

    if (ci->nk == 0) {
        return mrb_nil_value();
    }

    kw = ci->stack[(ci->n == 15 ? 1 : ci->n) + 1];

    if (!mrb_hash_p(kw)) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "keyword arguments are not a Hash");
    }

    return kw;
}


int
mrb_api_kwargs_given(mrb_state *mrb)
{
    mrb_value  kw = mrb_api_kwargs_hash(mrb);

    return !mrb_nil_p(kw) && mrb_hash_size(mrb, kw) > 0;
}


void
mrb_api_kwargs(mrb_state *mrb, const char *const *names, mrb_value *values,
    int n)
{
    int                   i;
    mrb_value             kw;
    mrb_api_kwargs_walk   w;

    for (i = 0; i < n; i++) {
        values[i] = mrb_undef_value();
    }

    kw = mrb_api_kwargs_hash(mrb);

    if (mrb_nil_p(kw)) {
        return;
    }

    w.names = names;
    w.values = values;
    w.n = n;
    mrb_hash_foreach(mrb, mrb_hash_ptr(kw), mrb_api_kwarg, &w);
}


void
mrb_api_define_hidden(mrb_state *mrb, const char *name, mrb_func_t func,
    mrb_aspec aspec)
{
    struct RClass  *c;
    mrb_value       obj;

    c = mrb_class_new(mrb, mrb_class_get(mrb, "BasicObject"));
    mrb_define_method(mrb, c, name, func, aspec);
    obj = mrb_obj_new(mrb, c, 0, NULL);
    MRB_SET_FROZEN_FLAG(mrb_obj_ptr(obj));
    MRB_SET_FROZEN_FLAG(c);
    mrb_gv_set(mrb, mrb_intern_cstr(mrb, name), obj);
}
