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

#define MRB_MRUBY_SUPPORTED  "3.1.0 (Debian 12), 3.3.0 (Debian 13) and 4.0.0 (Debian testing)"

#if MRUBY_RELEASE_NO != 30100 && MRUBY_RELEASE_NO != 30300 \
    && MRUBY_RELEASE_NO != 40000
#error "written against the insides of mruby 3.1.0, 3.3.0 and 4.0.0 only: see docs/architecture.md, \"The mruby version contract\""
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
#if MRUBY_RELEASE_NO >= 40000 && !defined(MRB_USE_SET)
#error "mruby 4.0.0's build flags are missing: compile with mruby-config --cflags' -D flags"
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
 * An irep's debug lines: 3.1's mrb_debug_get_line reads an array or a
 * flat map of (position, line), 3.3's and 4.0's only the packed map their
 * code generator writes (LEB128 pairs of position and line deltas); for
 * the others they answer -1, and a backtrace loses its file:line.
 */
#if MRUBY_RELEASE_NO >= 30300
#define MRB_DEBUG_LINES_PACKED
#endif

/*
 * vm.c's CINFO_SKIP (1 in 3.1.0 and 3.3.0, not in a header): the mark of
 * a frame where C entered the VM.  An exception that pops such a frame is
 * thrown to that C caller's jmp instead of unwinding further.
 */
#define MRB_CINFO_SKIP  1

/*
 * 4.0 opens a state with the library's allocator only (mrb_open_core()
 * takes no allocator; mrb_basic_alloc_func() is the one for the process),
 * and the compiler context's cleanup no longer takes the state.
 */
#if MRUBY_RELEASE_NO >= 40000
#define MRB_OPEN_CORE()  mrb_open_core()
#define MRB_CCONTEXT_CLEANUP_LOCALS(mrb, cxt) \
    mrb_ccontext_cleanup_local_variables(cxt)
#else
#define MRB_STATE_ALLOCF
#define MRB_OPEN_CORE()  mrb_open_core(mrb_default_allocf, NULL)
#define MRB_CCONTEXT_CLEANUP_LOCALS(mrb, cxt) \
    mrbc_cleanup_local_variables(mrb, cxt)
#endif

/*
 * An object's frozen flag: a bit of its flags until 3.3, a bit field of
 * its own (frozen) in 4.0.
 */
#if MRUBY_RELEASE_NO >= 40000
#define MRB_FROZEN_P(o)           ((o)->frozen)
#define MRB_SET_FROZEN_FLAG(o)    ((o)->frozen = 1)
#define MRB_UNSET_FROZEN_FLAG(o)  ((o)->frozen = 0)
#endif

/*
 * 4.0's method tables: a class's mt is a chain of mrb_mt_tbl (mruby/
 * class.h), the first one writable, those under it read-only tables the
 * library's classes share (MRB_MT_INIT_ROM); an entry is its key, flags
 * and function or Proc.  A method (mrb_method_t) carries its flags
 * (visibility, arguments) beside the pointer.  Until 3.3 the table is
 * the instance variables' layout with the flags in the key, and a method
 * a tagged pointer.
 */
#if MRUBY_RELEASE_NO >= 40000
#define MRB_MT_CHAIN
#endif

/*
 * 4.0's instance-variable tables (globals, a class's constants and
 * variables) keep their live names first, in [0, size) (a removal moves
 * the later ones down), where 3.1 and 3.3 hash them over all alloc slots
 * and mark the removed.  An Object (the main object) may keep its
 * instance variables in a shape (MRB_FL_OBJ_SHAPED), not in a table.
 */
#if MRUBY_RELEASE_NO >= 40000
#define MRB_IV_COMPACT
#endif

/*
 * The symbol table of 3.1 and 3.3: symtbl, with symflags (which names are
 * literals), symlink and 256 symhash buckets (mrb_file_sym.c adds to it).
 * 4.0 marks a literal in bit 0 of its symtbl entry, keeps the other names
 * in the 4 kB blocks of sym_pool, and the links and buckets in a hash
 * table (struct mrb_sym_hash_table, made at the 256th name) that its
 * headers leave incomplete: laid out here as 4.0.0's src/symbol.c has it.
 * MRB_SYM_BUCKETS: the 256 buckets' newest entries (NULL: none yet).
 */
#if MRUBY_RELEASE_NO < 40000
#define MRB_SYMTBL_LINKED
#define MRB_SYM_BUCKETS(mrb)  ((mrb)->symhash)
#else
struct mrb_sym_hash_table {
    uint8_t  *symlink;
    mrb_sym   buckets[256];
};
#define MRB_SYM_BUCKETS(mrb) \
    ((mrb)->symhash != NULL ? (mrb)->symhash->buckets : NULL)
#endif

/*
 * 4.0's code generator defines a method from its irep in one instruction
 * (OP_TDEF: in the target class, OP_SDEF: in a singleton class; operand
 * c the irep) where 3.x loads the Proc (OP_METHOD) and defines it
 * (OP_DEF).
 */
#if MRUBY_RELEASE_NO >= 40000
#define MRB_OP_TDEF
#endif

#endif /* MRB_MRUBY_VERSION_H */
