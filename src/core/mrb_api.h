/*
 * One way to give Ruby a class: a table of methods, one of constants, and
 * one walker for each (as Lua's luaL_Reg and luaL_setfuncs).  A class's
 * whole Ruby surface then reads as one table, the same in the core, in
 * src/lib and in both adapters, and the docs can be checked against it.
 *
 * Every table ends with its *_END entry (a NULL name).
 */

#ifndef MRB_API_H
#define MRB_API_H

#include <mruby.h>

/* A Ruby method written in C. */
typedef struct {
    const char  *name;
    mrb_func_t   func;
    mrb_aspec    aspec;
} mrb_api_method;

#define MRB_API_METHOD_END  { NULL, NULL, 0 }

/*
 * An attribute: name reads it and, when set is not NULL, name= writes it
 * (one argument).  A class of many fields reads as one list of them.
 */
typedef struct {
    const char  *name;
    mrb_func_t   get;
    mrb_func_t   set;
} mrb_api_attr;

#define MRB_API_ATTR_END  { NULL, NULL, NULL }

/*
 * A field: an attribute whose getter is shared by many fields of one
 * struct, as nginx's ngx_http_variables.c shares one handler among the
 * request's fields by their offset.  get reads the field at
 * mrb_api_field_offset(mrb) of its object; set (name=, or NULL) is the
 * field's own.  The getter takes no argument.
 */
typedef struct {
    const char  *name;
    mrb_func_t   get;
    mrb_func_t   set;
    size_t       offset;
} mrb_api_field;

#define MRB_API_FIELD_END  { NULL, NULL, NULL, 0 }

/* An Integer constant. */
typedef struct {
    const char  *name;
    mrb_int      value;
} mrb_api_const;

#define MRB_API_CONST_END  { NULL, 0 }

/* The methods of m as instance methods of c. */
void mrb_api_define_methods(mrb_state *mrb, struct RClass *c,
    const mrb_api_method *m);

/* The methods of m as class (singleton) methods of c: Nginx.rputs. */
void mrb_api_define_class_methods(mrb_state *mrb, struct RClass *c,
    const mrb_api_method *m);

/* The attributes of a as instance methods of c: name and name=. */
void mrb_api_define_attrs(mrb_state *mrb, struct RClass *c,
    const mrb_api_attr *a);

/* The fields of f as instance methods of c: name and name=. */
void mrb_api_define_fields(mrb_state *mrb, struct RClass *c,
    const mrb_api_field *f);

/* In a field's getter: the offset of the field it was defined for. */
size_t mrb_api_field_offset(mrb_state *mrb);

/*
 * An object for the bytecode our compiler passes write (mrb_irep_check.c,
 * mrb_irep_dstr.c) to call: an instance of a class of its own with the
 * one method name (func), kept in the global of the same name.  name is
 * no variable's syntax (no method sets a global by name), and object and
 * class are frozen: should a script reach them (ObjectSpace), every change
 * to their methods, a singleton class, an include, a prepend or an extend
 * raises FrozenError, so the calls always find func.
 */
void mrb_api_define_hidden(mrb_state *mrb, const char *name,
    mrb_func_t func, mrb_aspec aspec);

/*
 * c's method name, the C function func with value (a class, or anything
 * else the GC can keep) at hand through mrb_api_method_value: what func
 * would otherwise look up by name on every call.  The method is not
 * checked for arguments as one defined with MRB_ARGS_NONE() is: func
 * checks them (mrb_api_no_args).
 */
void mrb_api_define_method_with(mrb_state *mrb, struct RClass *c,
    const char *name, mrb_func_t func, mrb_value value);

/* In such a method: its value. */
mrb_value mrb_api_method_value(mrb_state *mrb);

/*
 * c.new made in C, for a class whose objects scripts make on every
 * request (Server::Request, SharedDict), c's initialize being init:
 * mruby 3.1's Class#new is bytecode that packs the arguments into an
 * Array and a Hash and calls initialize through the VM.  While the
 * class's initialize is still init, init runs in new's own call (it reads
 * the same arguments; a backtrace names new); otherwise (a subclass with
 * an initialize of its own) Class#new runs, as if there were no other.
 */
void mrb_api_define_new(mrb_state *mrb, struct RClass *c, mrb_func_t init);

/*
 * The number of positional arguments of the current call, or
 * ArgumentError when it is not within min..max, as mrb_get_args would
 * raise (keywords given to such a method count as one more argument);
 * without mrb_get_args' format parsing.  mrb_get_argv has them.
 */
mrb_int mrb_api_argc(mrb_state *mrb, mrb_int min, mrb_int max);

/* mrb_api_argc(mrb, 0, 0). */
void mrb_api_no_args(mrb_state *mrb);

/*
 * The keyword arguments of the current call, read where they lie:
 * mrb_get_args(":") copies their Hash and interns every name on each
 * call.  values[i] gets the argument named names[i] (n names), undef
 * when it was not given; a keyword not in names raises ArgumentError, as
 * mrb_get_args does.
 */
void mrb_api_kwargs(mrb_state *mrb, const char *const *names,
    mrb_value *values, int n);

/* Whether the current call got keyword arguments (a call that forwards
 * **kw, as Class#new does to initialize, passes an empty Hash: none). */
int mrb_api_kwargs_given(mrb_state *mrb);

/* The constants of k in c. */
void mrb_api_define_consts(mrb_state *mrb, struct RClass *c,
    const mrb_api_const *k);

/*
 * Class outer::name (under Object when outer is NULL), a subclass of super
 * (Object when NULL), with the instance methods of m (none when NULL).
 */
struct RClass *mrb_api_define_class(mrb_state *mrb, struct RClass *outer,
    const char *name, struct RClass *super, const mrb_api_method *m);

/* Module outer::name (under Object when outer is NULL) with the module
 * functions of m (none when NULL): callable as Name.f and, included, as f. */
struct RClass *mrb_api_define_module(mrb_state *mrb, struct RClass *outer,
    const char *name, const mrb_api_method *m);

#endif /* MRB_API_H */
