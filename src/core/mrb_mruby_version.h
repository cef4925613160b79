/*
 * The mruby releases this code is written against, and a build error on
 * any other.  A file that leans on more than mruby's MRB_API (a private
 * struct layout, the VM's top-level protocol, a field of mrb_callinfo)
 * includes this header: another libmruby then fails the build instead of
 * corrupting memory at run time.  What differs between the releases is
 * named here, once, so that the files using it test a name, not a number.
 * Before adding a release, check what docs/architecture.md lists under
 * "The mruby version contract".
 */

#ifndef MRB_MRUBY_VERSION_H
#define MRB_MRUBY_VERSION_H

#include <mruby/version.h>

#define MRB_MRUBY_SUPPORTED  "3.1.0 (Debian 12) and 3.3.0 (Debian 13)"

#if MRUBY_RELEASE_NO != 30100 && MRUBY_RELEASE_NO != 30300
#error "written against the insides of mruby 3.1.0 and 3.3.0 only: see docs/architecture.md, \"The mruby version contract\""
#endif

/*
 * The build flags of Debian's libmruby.a (mruby-config --cflags, which the
 * Makefile passes on): without them mrb_state and the objects would have
 * another layout here than in the library.
 */
#if !defined(MRB_USE_RATIONAL) || !defined(MRB_USE_COMPLEX)
#error "mruby's build flags are missing: compile with mruby-config --cflags' -D flags"
#endif
#if MRUBY_RELEASE_NO >= 30300 \
    && (!defined(MRB_USE_BIGINT) || !defined(MRB_USE_DEBUG_HOOK))
#error "mruby 3.3.0's build flags are missing: compile with mruby-config --cflags' -D flags"
#endif

/* mrb_dump_irep() and mrb_exc_backtrace() left mruby.h and mruby/dump.h
 * for mruby/internal.h in 3.2 (libmruby.a still has them) */
#if MRUBY_RELEASE_NO >= 30200
#include <mruby.h>
#include <mruby/internal.h>
#endif

/* mrb_exec_irep(), MRB_API in libmruby.a, is declared by 3.1 in no
 * installed header */
#if MRUBY_RELEASE_NO < 30200
#include <mruby.h>
MRB_API mrb_value mrb_exec_irep(mrb_state *mrb, mrb_value self,
    struct RProc *p);
#endif

/*
 * mrb_env_unshare() took a third argument in 3.2: whether it may raise
 * (out of memory copying the frame's values).  Ours never may: at the end
 * of a run nothing is left to catch it.
 */
#if MRUBY_RELEASE_NO >= 30200
#define MRB_ENV_UNSHARE(mrb, env)  mrb_env_unshare(mrb, env, TRUE)
#else
#define MRB_ENV_UNSHARE(mrb, env)  mrb_env_unshare(mrb, env)
#endif

/*
 * Since 3.2 an alias of a method written in Ruby is a Proc of its own
 * (MRB_PROC_ALIAS) that has no bytecode: its upper is the method's Proc.
 * The method's Proc for p; a script's Proc is never an alias.
 */
#ifdef MRB_PROC_ALIAS
#define MRB_PROC_UNALIAS(p)  (MRB_PROC_ALIAS_P(p) ? (p)->upper : (p))
#else
#define MRB_PROC_UNALIAS(p)  (p)
#endif

/*
 * vm.c's CINFO_SKIP (1 in 3.1.0 and 3.3.0, not in a header): the mark of
 * a frame where C entered the VM.  An exception that pops such a frame is
 * thrown to that C caller's jmp instead of unwinding further.
 */
#define MRB_CINFO_SKIP  1

#endif /* MRB_MRUBY_VERSION_H */
