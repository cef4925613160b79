/*
 * Which bytecode can change what mrb_toplevel_restore puts back (Object's
 * and the server class's constants, Kernel's and the server class's own
 * methods), so that only runs of such bytecode pay for the whole-table
 * comparison (about 830 instructions of nginx's hello world:
 * bench/callgrind.py nginx cache, 2026-11-24).
 *
 * A run can change those tables only
 *
 *   - by its own instructions: OP_SETCONST, OP_SETMCNST, OP_SETCV,
 *     OP_CLASS, OP_MODULE, OP_SCLASS, OP_DEF (4.0: OP_TDEF, OP_SDEF),
 *     OP_ALIAS, OP_UNDEF,
 *     OP_INTERN (a symbol made at run time: a method name the code does
 *     not show);
 *   - by calling, by name, a method that does it for it (const_set,
 *     define_method, eval, send, ..., the list below, read from mruby
 *     3.1's kernel.c, class.c, variable.c and the metaprog gem), or that
 *     makes a symbol from data (to_sym, methods, ...: a name for a later
 *     `&sym` or send);
 *   - by calling a method of the library (src/lib, mrblib/) that does
 *     one of these with names it was given: Forwardable's (audited by
 *     hand; the unit test toplevel_scan_library_definers_are_known lists
 *     every library method that names one of these, and fails on a new
 *     one);
 *   - by calling code a startup script left (a method, a block kept in a
 *     constant): a startup script whose methods or blocks could do any
 *     of the above makes every run restore (mrb_toplevel_startup_leaves);
 *   - by calling code an earlier request run left: methods a run defines
 *     in other classes, blocks it kept in a startup object, a Method
 *     object, a symbol.  So a run whose code could leave such a thing
 *     (it names one of the methods below, aliases, or has a block or
 *     method that could change the tables) makes every later run of its
 *     interpreter restore too (MRB_TOPLEVEL_LEAVES).
 *
 * freeze is a name of its own kind: it changes the frozen flags, read only
 * after runs that name it, and leaves nothing behind.
 *
 * Symbols are compared with the irep's symbol list, which holds every
 * name the code sends and every symbol literal.  The answer for each irep
 * is kept in its flags (MRB_TOPLEVEL_IREP_*), so a script is scanned once
 * per interpreter that loads it (a static irep, compiled into C, is
 * read-only: never cached, and never a script).
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mruby.h>
#include <mruby/irep.h>
#include <mruby/opcode.h>
#include <mruby/proc.h>
#include "mrb_mruby_version.h"
#include "mrb_toplevel.h"


#define SCAN_IREP_LEAVES    MRB_TOPLEVEL_IREP_LEAVES
#define SCAN_IREP_DONE      MRB_TOPLEVEL_IREP_SCANNED
#define SCAN_IREP_CHANGES   MRB_TOPLEVEL_IREP_CHANGES

/*
 * Methods that change constants, methods or classes for their caller, run
 * code the bytecode does not show, or make method names from data.
 */
static const char *const  scan_names[] = {
    /* code from strings and blocks run with another self */
    "eval", "instance_eval", "instance_exec", "class_eval", "class_exec",
    "module_eval", "module_exec", "load", "require", "require_relative",
    /* calls by a computed name, and methods as objects */
    "send", "__send__", "public_send", "method", "public_method",
    "singleton_method", "instance_method", "public_instance_method",
    "to_proc",
    /* methods */
    "define_method", "define_singleton_method", "alias_method",
    "remove_method", "undef_method", "attr", "attr_reader", "attr_writer",
    "attr_accessor", "module_function", "private", "public", "protected",
    "private_class_method", "public_class_method",
    "include", "prepend", "extend", "append_features", "prepend_features",
    "extend_object",
    /* constants and variables of modules */
    "const_set", "remove_const", "private_constant", "class_variable_set",
    "remove_class_variable", "instance_variable_set",
    "remove_instance_variable",
    /* method names from data */
    "to_sym", "intern", "all_symbols", "parameters", "members",
    "symbolize_names", "methods", "public_methods", "private_methods",
    "protected_methods", "singleton_methods", "instance_methods",
    "public_instance_methods", "private_instance_methods",
    "protected_instance_methods",
    /* the library's (src/lib/forwardable.rb): define_method with a name
     * and target they are given */
    "def_delegator", "def_delegators", "delegate_method", "delegate",
    NULL
};

/*
 * Methods that change the tables' state but leave nothing behind: freezing
 * the main object, Object, Kernel or the server class (their frozen flags
 * are read only after a run that could set them).
 */
static const char *const  scan_change_names[] = {
    "freeze", NULL
};

/* At a startup script's top level and in its class bodies, which run only
 * at startup, these only shape the classes it defines. */
static const char *const  scan_startup_names_ok[] = {
    "attr", "attr_reader", "attr_writer", "attr_accessor", "include",
    "prepend", "extend", "private", "public", "protected",
    "module_function", "private_constant", "private_class_method",
    "public_class_method", NULL
};

/*
 * Symbols below SCAN_SYM_BITS (mruby's preset ones and most interned
 * names) are a bit each; larger ones (mruby 3.1 packs some short names
 * into the symbol itself: "load" is 222306624) are in a short list.
 */
#define SCAN_SYM_BITS   8192
#define SCAN_NAMES_MAX  96

struct mrb_toplevel_names_s {
    uint8_t   bits[SCAN_SYM_BITS / 8];
    mrb_sym   large[SCAN_NAMES_MAX];
    int       nlarge;
    mrb_sym   change[4];    /* scan_change_names */
    int       nchange;
};


static int
scan_names_add(mrb_toplevel_names *names, mrb_sym sym)
{
    if (sym < SCAN_SYM_BITS) {
        names->bits[sym / 8] |= (uint8_t) (1 << (sym % 8));
        return 0;
    }

    if (names->nlarge == SCAN_NAMES_MAX) {
        return -1;
    }

    names->large[names->nlarge++] = sym;
    return 0;
}


static void
scan_names_remove(mrb_toplevel_names *names, mrb_sym sym)
{
    int  i;

    if (sym < SCAN_SYM_BITS) {
        names->bits[sym / 8] &= (uint8_t) ~(1 << (sym % 8));
        return;
    }

    for (i = 0; i < names->nlarge; i++) {
        if (names->large[i] == sym) {
            names->large[i] = names->large[--names->nlarge];
            return;
        }
    }
}


static int
scan_names_has(const mrb_toplevel_names *names, mrb_sym sym)
{
    int  i;

    if (sym < SCAN_SYM_BITS) {
        return (names->bits[sym / 8] & (1 << (sym % 8))) != 0;
    }

    for (i = 0; i < names->nlarge; i++) {
        if (names->large[i] == sym) {
            return 1;
        }
    }

    return 0;
}


mrb_toplevel_names *
mrb_toplevel_names_new(mrb_state *mrb, int startup)
{
    mrb_toplevel_names  *names;
    int                  i;

    names = calloc(1, sizeof(mrb_toplevel_names));
    if (names == NULL) {
        return NULL;
    }

    for (i = 0; scan_names[i] != NULL; i++) {
        if (scan_names_add(names, mrb_intern_cstr(mrb, scan_names[i])) != 0) {
            mrb_toplevel_names_free(names);
            return NULL;
        }
    }

    for (i = 0; scan_change_names[i] != NULL; i++) {
        names->change[names->nchange++] = mrb_intern_cstr(mrb,
                                                          scan_change_names[i]);
    }

    if (startup) {
        for (i = 0; scan_startup_names_ok[i] != NULL; i++) {
            scan_names_remove(names,
                              mrb_intern_cstr(mrb, scan_startup_names_ok[i]));
        }
    }

    return names;
}


void
mrb_toplevel_names_free(mrb_toplevel_names *names)
{
    free(names);
}


/* Operand layouts of mruby 3.1.0's instructions (mruby/ops.h). */
enum { SCAN_Z, SCAN_B, SCAN_BB, SCAN_BBB, SCAN_BS, SCAN_BSS, SCAN_S, SCAN_W };

#define OPCODE(name, ops)  SCAN_ ## ops,
static const uint8_t  scan_layout[] = {
#include <mruby/ops.h>
};
#undef OPCODE

static const uint8_t  scan_layout_len[] = { 0, 1, 2, 3, 3, 5, 2, 3 };

/* One instruction: its opcode and operands a and b (16 bits after an
 * OP_EXT prefix) and c (8 bits), the length with the prefix. */
typedef struct {
    uint8_t   op;
    uint16_t  a;
    uint16_t  b;
    uint8_t   c;
    uint32_t  len;
} scan_insn;


static int
scan_decode(const mrb_code *pc, const mrb_code *end, scan_insn *in)
{
    int       ext = 0, wide_a, wide_b, layout;
    uint32_t  n = 0;

    in->op = pc[n++];
    if (in->op == OP_EXT1 || in->op == OP_EXT2 || in->op == OP_EXT3) {
        ext = in->op - OP_EXT1 + 1;
        if (pc + n >= end) {
            return -1;
        }
        in->op = pc[n++];
    }

    if (in->op >= sizeof(scan_layout)) {
        return -1;
    }

    layout = scan_layout[in->op];
    wide_a = (ext & 1) && layout >= SCAN_B && layout <= SCAN_BSS;
    wide_b = (ext & 2) && (layout == SCAN_BB || layout == SCAN_BBB);
    in->len = n + scan_layout_len[layout] + wide_a + wide_b;

    if (pc + in->len > end) {
        return -1;
    }

    in->a = 0;
    in->b = 0;
    in->c = 0;
    if (layout >= SCAN_B && layout <= SCAN_BSS) {
        in->a = wide_a ? (uint16_t) (pc[n] << 8 | pc[n + 1]) : pc[n];
        n += 1 + wide_a;
        if (layout != SCAN_B) {
            in->b = (wide_b || layout >= SCAN_BS)
                    ? (uint16_t) (pc[n] << 8 | pc[n + 1]) : pc[n];
            n += 1 + (wide_b || layout >= SCAN_BS);
        }
        if (layout == SCAN_BBB) {
            in->c = pc[n];
        }
    }

    return 0;
}


static int
scan_op_changes(uint8_t op)
{
    switch (op) {
    case OP_SETCONST:
    case OP_SETMCNST:
    case OP_SETCV:
    case OP_CLASS:
    case OP_MODULE:
    case OP_SCLASS:
    case OP_DEF:
#ifdef MRB_OP_TDEF
    case OP_TDEF:
    case OP_SDEF:
#endif
    case OP_ALIAS:
    case OP_UNDEF:
    case OP_INTERN:
        return 1;
    default:
        return 0;
    }
}


/* Whether irep names a method of the list (SCAN_IREP_CHANGES and
 * SCAN_IREP_LEAVES), one that only changes (SCAN_IREP_CHANGES), or none. */
static int
scan_names_in(const mrb_toplevel_names *names, const mrb_irep *irep)
{
    int  i, j, f = 0;

    /* mruby 4.0's static ireps (its own Ruby, compiled into the library)
     * may keep no symbol table: not a script's code, which always has one */
    if (irep->syms == NULL) {
        return 0;
    }

    for (i = 0; i < irep->slen; i++) {
        if (scan_names_has(names, irep->syms[i])) {
            return SCAN_IREP_CHANGES | SCAN_IREP_LEAVES;
        }
        for (j = 0; j < names->nchange; j++) {
            if (irep->syms[i] == names->change[j]) {
                f = SCAN_IREP_CHANGES;
            }
        }
    }

    return f;
}


/*
 * irep and what it contains: SCAN_IREP_CHANGES if it could change the
 * tables, SCAN_IREP_LEAVES if it could leave something that does (it
 * names a method of the list, aliases, or contains a block or method
 * that could change them).  Unreadable bytecode counts as both.
 */
static int
scan_irep(const mrb_toplevel_names *names, mrb_irep *irep)
{
    const mrb_code  *pc, *end;
    scan_insn        in;
    int              f = 0, cf, i;

    if (irep->flags & SCAN_IREP_DONE) {
        return irep->flags & (SCAN_IREP_CHANGES | SCAN_IREP_LEAVES);
    }

    f = scan_names_in(names, irep);

    pc = irep->iseq;
    end = pc + irep->ilen;
    while (pc < end && f != (SCAN_IREP_CHANGES | SCAN_IREP_LEAVES)) {
        if (scan_decode(pc, end, &in) != 0) {
            f = SCAN_IREP_CHANGES | SCAN_IREP_LEAVES;
            break;
        }
        if (scan_op_changes(in.op)) {
            f |= SCAN_IREP_CHANGES;
            if (in.op == OP_ALIAS) {
                f |= SCAN_IREP_LEAVES;
            }
        }
        pc += in.len;
    }

    /* mruby's call_irep (Proc#call) counts a child it does not have */
    for (i = 0; irep->reps != NULL && i < irep->rlen; i++) {
        cf = scan_irep(names, (mrb_irep *) irep->reps[i]);
        if (cf & SCAN_IREP_CHANGES) {
            f |= SCAN_IREP_CHANGES | SCAN_IREP_LEAVES;
        }
    }

    /* a static irep (C data: mruby's gems) is read-only */
    if ((irep->flags & MRB_IREP_STATIC) != MRB_IREP_STATIC) {
        irep->flags |= SCAN_IREP_DONE | f;
    }
    return f;
}


int
mrb_toplevel_scan(const mrb_toplevel_names *names, const struct RProc *proc)
{
    int  f;

    if (MRB_PROC_CFUNC_P(proc)) {
        return 0;
    }

    f = proc->body.irep->flags;
    if (!(f & SCAN_IREP_DONE)) {
        f = scan_irep(names, (mrb_irep *) proc->body.irep);
    }
    return ((f & SCAN_IREP_CHANGES) ? MRB_TOPLEVEL_CHANGES : 0)
           | ((f & SCAN_IREP_LEAVES) ? MRB_TOPLEVEL_LEAVES : 0);
}


/* Whether irep, which may run after startup (a method or block of a
 * startup script), or anything in it could change the tables: the
 * request scan without its cache (the names differ). */
static int
scan_callable(const mrb_toplevel_names *names, const mrb_irep *irep)
{
    const mrb_code  *pc, *end;
    scan_insn        in;
    int              i;

    if (scan_names_in(names, irep)) {
        return 1;
    }

    pc = irep->iseq;
    end = pc + irep->ilen;
    while (pc < end) {
        if (scan_decode(pc, end, &in) != 0 || scan_op_changes(in.op)) {
            return 1;
        }
        pc += in.len;
    }

    for (i = 0; irep->reps != NULL && i < irep->rlen; i++) {
        if (scan_callable(names, irep->reps[i])) {
            return 1;
        }
    }

    return 0;
}


/*
 * A startup script's top level or class body (code that runs once, at
 * startup): whether it leaves code that could change the tables later.
 * Its class bodies (OP_EXEC) are read the same way; its methods and
 * blocks (OP_METHOD, OP_LAMBDA, OP_BLOCK) with the request's rules.
 */
static int
scan_startup(const mrb_toplevel_names *all, const mrb_toplevel_names *top,
    const mrb_irep *irep, int depth)
{
    const mrb_code  *pc, *end;
    scan_insn        in;

    /* freeze at startup is what the interpreter is sealed with */
    if (depth > 64 || (scan_names_in(top, irep) & SCAN_IREP_LEAVES)) {
        return 1;
    }

    pc = irep->iseq;
    end = pc + irep->ilen;
    while (pc < end) {
        if (scan_decode(pc, end, &in) != 0) {
            return 1;
        }

        switch (in.op) {
        case OP_ALIAS:
            /* alias cs const_set: a new name for a method of the list */
            if (in.b >= irep->slen || irep->syms == NULL
                || scan_names_has(all, irep->syms[in.b]))
            {
                return 1;
            }
            break;
        case OP_EXEC:
            if (in.b >= irep->rlen || irep->reps == NULL
                || scan_startup(all, top, irep->reps[in.b], depth + 1))
            {
                return 1;
            }
            break;
        case OP_METHOD:
        case OP_LAMBDA:
        case OP_BLOCK:
            if (in.b >= irep->rlen || irep->reps == NULL
                || scan_callable(all, irep->reps[in.b])) {
                return 1;
            }
            break;
#ifdef MRB_OP_TDEF
        case OP_TDEF:
        case OP_SDEF:
            /* a method defined from its irep at once (4.0) */
            if (in.c >= irep->rlen || irep->reps == NULL
                || scan_callable(all, irep->reps[in.c])) {
                return 1;
            }
            break;
#endif
        case OP_INTERN:
            return 1;
        default:
            break;
        }

        pc += in.len;
    }

    return 0;
}


int
mrb_toplevel_startup_leaves(mrb_state *mrb, const struct RProc *proc)
{
    mrb_toplevel_names  *all, *top;
    int                  leaves;

    if (MRB_PROC_CFUNC_P(proc)) {
        return 0;
    }

    all = mrb_toplevel_names_new(mrb, 0);
    top = mrb_toplevel_names_new(mrb, 1);
    leaves = all == NULL || top == NULL
             || scan_startup(all, top, proc->body.irep, 0);

    mrb_toplevel_names_free(all);
    mrb_toplevel_names_free(top);
    return leaves;
}
