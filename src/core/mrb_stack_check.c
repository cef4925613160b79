/*
 * The machine stack of a run is fixed (a coroutine's, mrb_coro.h, or the
 * thread's), and mruby recurses on it each time C calls Ruby again: a
 * to_s called by string interpolation that interpolates again, a Hash
 * default block that reads the hash, <=> under sort.  Each such re-entry
 * costs some 1.5 KB.  Before every one, the remaining stack is checked
 * (mrb_stack.h), and below MRB_STACK_RESERVE the call raises
 * SystemStackError, a 500 and a log line like any other exception, long
 * before the guard page.
 *
 * The re-entries are mruby's public entry points into the VM.  The link
 * wraps them (ld --wrap, the names in mrb_stack_check.wrap):
 * every call from another object file of libmruby.a, and from ours, lands
 * here first.  (Calls inside vm.o itself, such as mrb_funcall to
 * mrb_funcall_argv, are not wrapped, and need not be: one check per
 * re-entry is enough.)  Signatures as in mruby 3.1.0's vm.c.
 */

#include <stdarg.h>

#include <mruby.h>

#include "mrb_interp_core.h"
#include "mrb_mruby_version.h"
#include "mrb_stack.h"

/* vm.c's MRB_FUNCALL_ARGC_MAX (mruby 3.1.0), not in its headers */
#define STACK_CHECK_ARGC_MAX  16

mrb_value __real_mrb_funcall_argv(mrb_state *mrb, mrb_value self,
    mrb_sym mid, mrb_int argc, const mrb_value *argv);
mrb_value __real_mrb_funcall_with_block(mrb_state *mrb, mrb_value self,
    mrb_sym mid, mrb_int argc, const mrb_value *argv, mrb_value blk);
mrb_value __real_mrb_yield(mrb_state *mrb, mrb_value b, mrb_value arg);
mrb_value __real_mrb_yield_argv(mrb_state *mrb, mrb_value b, mrb_int argc,
    const mrb_value *argv);
mrb_value __real_mrb_yield_with_class(mrb_state *mrb, mrb_value b,
    mrb_int argc, const mrb_value *argv, mrb_value self, struct RClass *c);
mrb_value __real_mrb_yield_cont(mrb_state *mrb, mrb_value b, mrb_value self,
    mrb_int argc, const mrb_value *argv);
mrb_value __real_mrb_top_run(mrb_state *mrb, const struct RProc *proc,
    mrb_value self, mrb_int stack_keep);
mrb_value __real_mrb_exec_irep(mrb_state *mrb, mrb_value self,
    struct RProc *p);

mrb_value __wrap_mrb_funcall(mrb_state *mrb, mrb_value self,
    const char *name, mrb_int argc, ...);
mrb_value __wrap_mrb_funcall_id(mrb_state *mrb, mrb_value self, mrb_sym mid,
    mrb_int argc, ...);
mrb_value __wrap_mrb_funcall_argv(mrb_state *mrb, mrb_value self,
    mrb_sym mid, mrb_int argc, const mrb_value *argv);
mrb_value __wrap_mrb_funcall_with_block(mrb_state *mrb, mrb_value self,
    mrb_sym mid, mrb_int argc, const mrb_value *argv, mrb_value blk);
mrb_value __wrap_mrb_yield(mrb_state *mrb, mrb_value b, mrb_value arg);
mrb_value __wrap_mrb_yield_argv(mrb_state *mrb, mrb_value b, mrb_int argc,
    const mrb_value *argv);
mrb_value __wrap_mrb_yield_with_class(mrb_state *mrb, mrb_value b,
    mrb_int argc, const mrb_value *argv, mrb_value self, struct RClass *c);
mrb_value __wrap_mrb_yield_cont(mrb_state *mrb, mrb_value b, mrb_value self,
    mrb_int argc, const mrb_value *argv);
mrb_value __wrap_mrb_top_run(mrb_state *mrb, const struct RProc *proc,
    mrb_value self, mrb_int stack_keep);
mrb_value __wrap_mrb_exec_irep(mrb_state *mrb, mrb_value self,
    struct RProc *p);


void
mrb_stack_raise(mrb_state *mrb)
{
    mrb_raise(mrb, mrb_class_get(mrb, "SystemStackError"),
              "stack level too deep (the run's machine stack is nearly "
              "used up: less recursion through blocks and methods called "
              "from C, or a larger stack)");
}


/* The variadic ones, as vm.c writes them, onto the checked argv form. */
static mrb_value
stack_check_funcall_va(mrb_state *mrb, mrb_value self, mrb_sym mid,
    mrb_int argc, va_list ap)
{
    mrb_value  argv[STACK_CHECK_ARGC_MAX];
    mrb_int    i;

    if (argc > STACK_CHECK_ARGC_MAX) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "Too long arguments. (limit=16)");
    }

    for (i = 0; i < argc; i++) {
        argv[i] = va_arg(ap, mrb_value);
    }

    mrb_stack_check(mrb);
    return __real_mrb_funcall_argv(mrb, self, mid, argc, argv);
}


mrb_value
__wrap_mrb_funcall(mrb_state *mrb, mrb_value self, const char *name,
    mrb_int argc, ...)
{
    mrb_value  v;
    va_list    ap;

    va_start(ap, argc);
    v = stack_check_funcall_va(mrb, self, mrb_intern_cstr(mrb, name), argc,
                               ap);
    va_end(ap);
    return v;
}


mrb_value
__wrap_mrb_funcall_id(mrb_state *mrb, mrb_value self, mrb_sym mid,
    mrb_int argc, ...)
{
    mrb_value  v;
    va_list    ap;

    va_start(ap, argc);
    v = stack_check_funcall_va(mrb, self, mid, argc, ap);
    va_end(ap);
    return v;
}


mrb_value
__wrap_mrb_funcall_argv(mrb_state *mrb, mrb_value self, mrb_sym mid,
    mrb_int argc, const mrb_value *argv)
{
    mrb_stack_check(mrb);
    return __real_mrb_funcall_argv(mrb, self, mid, argc, argv);
}


mrb_value
__wrap_mrb_funcall_with_block(mrb_state *mrb, mrb_value self, mrb_sym mid,
    mrb_int argc, const mrb_value *argv, mrb_value blk)
{
    mrb_stack_check(mrb);
    return __real_mrb_funcall_with_block(mrb, self, mid, argc, argv, blk);
}


mrb_value
__wrap_mrb_yield(mrb_state *mrb, mrb_value b, mrb_value arg)
{
    mrb_stack_check(mrb);
    return __real_mrb_yield(mrb, b, arg);
}


mrb_value
__wrap_mrb_yield_argv(mrb_state *mrb, mrb_value b, mrb_int argc,
    const mrb_value *argv)
{
    mrb_stack_check(mrb);
    return __real_mrb_yield_argv(mrb, b, argc, argv);
}


mrb_value
__wrap_mrb_yield_with_class(mrb_state *mrb, mrb_value b, mrb_int argc,
    const mrb_value *argv, mrb_value self, struct RClass *c)
{
    mrb_stack_check(mrb);
    return __real_mrb_yield_with_class(mrb, b, argc, argv, self, c);
}


mrb_value
__wrap_mrb_yield_cont(mrb_state *mrb, mrb_value b, mrb_value self,
    mrb_int argc, const mrb_value *argv)
{
    mrb_stack_check(mrb);
    return __real_mrb_yield_cont(mrb, b, self, argc, argv);
}


mrb_value
__wrap_mrb_top_run(mrb_state *mrb, const struct RProc *proc, mrb_value self,
    mrb_int stack_keep)
{
    mrb_stack_check(mrb);
    return __real_mrb_top_run(mrb, proc, self, stack_keep);
}


mrb_value
__wrap_mrb_exec_irep(mrb_state *mrb, mrb_value self, struct RProc *p)
{
    mrb_stack_check(mrb);
    return __real_mrb_exec_irep(mrb, self, p);
}
