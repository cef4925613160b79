/*
 * The run's time checks, written into the bytecode of every script we
 * compile.
 *
 * Debian's mruby 3.1 has no instruction hook (3.3 has one, called before
 * every instruction: too dear), so the places where a script can go on
 * for ever are given a call of the run check (mrb_run_budget.h) in the
 * bytecode itself: before each backward jump (while, until, redo, retry,
 * a `next` inside begin/ensure) and, in the blocks and lambdas, before
 * each return, so that a C method that calls a block for ever (loop,
 * Integer#times, each, sort_by) passes a check at each call.  Recursion
 * is the depth limit's (SystemStackError).
 *
 * A check is two instructions on a register of its own past the irep's
 * (n = nregs): `GETGV R[n] $"(run check)"`, which loads the checker,
 * then `SEND R[n] :"(run check)" 0` (the send clears R[n+1] for the
 * absent block), each with EXT1/EXT2/EXT3 before it where n or the
 * symbol's index needs 16 bits.  Why not a send to self: self's class is
 * the script's to change, and a method it defines, aliases, removes or
 * undefines on any class between self and the check's would turn the
 * checks off; the checker's class is not (mrb_run_budget.c says why).
 *
 * Inserting a check moves the code after it, so every place that names a
 * position is moved too: the relative jumps (JMP, JMPIF,
 * JMPNOT, JMPNIL, JMPUW), the catch handlers (rescue and ensure ranges
 * and their targets, after the code) and the debug lines, which are
 * rewritten with one entry a line change, in the form this mruby reads
 * (MRB_DEBUG_LINES_PACKED).  A jump that pointed at an instruction given
 * a check now points at its check; a catch range that began there
 * includes it and one that ended there excludes it, as they did the
 * instruction.  Code with no loop and no block (a hello
 * world) is left as it is: its runs pay nothing; so is an irep that would
 * grow past 32 KB, the reach of a jump (the watchdog still sees it).
 *
 * The instructions are read by mrb_irep_insn.c.
 */

#include <stdint.h>
#include <string.h>

#include <mruby.h>
#include <mruby/irep.h>
#include <mruby/debug.h>
#include <mruby/opcode.h>

#include "mrb_irep_check.h"
#include "mrb_irep_insn.h"
#include "mrb_mruby_version.h"

/* The longest check: GETGV and SEND, each with an EXT3 prefix */
#define IREP_CHECK_MAX  (6 + 7)


/* Per old position: the bytes inserted before it (a check there), and the
 * shift of everything at or after it. */
typedef struct {
    mrb_state   *mrb;
    uint32_t     ilen;
    uint8_t     *check;     /* [ilen]: bytes of the check before pc */
    uint32_t    *shift;     /* [ilen + 1]: bytes inserted before pc */
} irep_map;


/* The new position of old position pc's check (or of the instruction,
 * when it has none): jumps, catch ranges and lines are moved by it. */
static uint32_t
irep_map_pos(const irep_map *m, uint32_t pc)
{
    return pc + m->shift[pc];
}


/* Whether op ends a block's run (4.0 added returns of a constant). */
static int
irep_is_return(int op)
{
#if MRUBY_RELEASE_NO >= 40000
    if (op == OP_RETSELF || op == OP_RETNIL || op == OP_RETTRUE
        || op == OP_RETFALSE)
    {
        return 1;
    }
#endif
    return op == OP_RETURN;
}


/* Marks where the checks go; returns how many, or -1 for bytecode that
 * cannot be read (then the irep is left as it is). */
static int
irep_mark(irep_map *m, const mrb_irep *irep, int is_block, unsigned size)
{
    uint32_t  pc, len, jump;
    int       op, n = 0;

    for (pc = 0; pc < irep->ilen; pc += len) {
        op = mrb_irep_insn(irep->iseq, pc, irep->ilen, &len, &jump);
        if (op < 0) {
            return -1;
        }

        if ((jump != 0
             && mrb_irep_jump_offset(irep->iseq, jump) < 0)
            || (is_block && irep_is_return(op)))
        {
            m->check[pc] = (uint8_t) size;
            n++;
        }
    }

    return n;
}


/* One instruction `op R[reg] sym` into out, with the EXT prefix the
 * operands need (SEND's third operand, the argument count, is 0); returns
 * its length. */
static unsigned
irep_check_insn(uint8_t *out, int op, unsigned reg, unsigned sym)
{
    unsigned  n = 0;

    if (reg > 0xff && sym > 0xff) {
        out[n++] = OP_EXT3;
    } else if (reg > 0xff) {
        out[n++] = OP_EXT1;
    } else if (sym > 0xff) {
        out[n++] = OP_EXT2;
    }

    out[n++] = (uint8_t) op;
    if (reg > 0xff) {
        out[n++] = (uint8_t) (reg >> 8);
    }
    out[n++] = (uint8_t) reg;
    if (sym > 0xff) {
        out[n++] = (uint8_t) (sym >> 8);
    }
    out[n++] = (uint8_t) sym;
    if (op == OP_SEND) {
        out[n++] = 0;
    }

    return n;
}


/* The check for register reg and symbol index sym into out (at most
 * IREP_CHECK_MAX bytes); returns its length. */
static unsigned
irep_check_code(uint8_t *out, unsigned reg, unsigned sym)
{
    unsigned  n;

    n = irep_check_insn(out, OP_GETGV, reg, sym);
    return n + irep_check_insn(out + n, OP_SEND, reg, sym);
}


/* The line of each old position, from whichever form mruby stored. */
static void
irep_lines_read(const mrb_irep_debug_info_file *f, uint32_t from,
    uint32_t to, uint16_t *line)
{
    const uint8_t  *p, *pend;
    uint32_t        pc, pos, l, i, d;
    unsigned        shift;

    switch (f->line_type) {
    case mrb_debug_line_ary:
        for (pc = from; pc < to; pc++) {
            line[pc] = pc - from < f->line_entry_count
                       ? f->lines.ary[pc - from] : 0;
        }
        break;

    case mrb_debug_line_flat_map:
        for (pc = from, i = 0; pc < to; pc++) {
            while (i + 1 < f->line_entry_count
                   && f->lines.flat_map[i + 1].start_pos <= pc)
            {
                i++;
            }
            line[pc] = f->line_entry_count > 0 ? f->lines.flat_map[i].line
                                               : 0;
        }
        break;

    default:
        /* (position delta, line delta) pairs, each unsigned LEB128,
         * from position 0; a line delta is taken modulo 2^32 */
        p = f->lines.packed_map;
        pend = p + f->line_entry_count;
        pos = 0;
        l = 0;
        pc = from;
        while (p < pend) {
            for (d = 0, shift = 0; p < pend; shift += 7) {
                d |= (uint32_t) (*p & 0x7f) << shift;
                if ((*p++ & 0x80) == 0) {
                    break;
                }
            }
            pos += d;
            for (; pc < pos && pc < to; pc++) {
                line[pc] = (uint16_t) l;
            }
            for (d = 0, shift = 0; p < pend; shift += 7) {
                d |= (uint32_t) (*p & 0x7f) << shift;
                if ((*p++ & 0x80) == 0) {
                    break;
                }
            }
            l += d;
        }
        for (; pc < to; pc++) {
            line[pc] = (uint16_t) l;
        }
        break;
    }
}


#ifdef MRB_DEBUG_LINES_PACKED

/* v as unsigned LEB128 at out (NULL: only counted); returns its bytes. */
static uint32_t
irep_leb128_put(uint8_t *out, uint32_t v)
{
    uint32_t  n = 0;

    do {
        if (out != NULL) {
            out[n] = (uint8_t) ((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        }
        n++;
        v >>= 7;
    } while (v != 0);

    return n;
}


/* The lines in the packed map at out (NULL: only counted), as mruby's
 * code generator writes it: at each change of line, the position's and
 * the line's deltas from the last change (position 0, line 0 before the
 * first), the line's modulo 2^32.  Returns its bytes. */
static uint32_t
irep_lines_pack(const irep_map *m, const uint16_t *line, uint32_t from,
    uint8_t *out)
{
    uint32_t  pc, pos, last_pos = 0, n = 0;
    uint16_t  last_line = 0;

    for (pc = from; pc < m->ilen; pc++) {
        if (line[pc] == last_line) {
            continue;
        }
        pos = irep_map_pos(m, pc);
        n += irep_leb128_put(out != NULL ? out + n : NULL, pos - last_pos);
        n += irep_leb128_put(out != NULL ? out + n : NULL,
                             (uint32_t) line[pc] - last_line);
        last_pos = pos;
        last_line = line[pc];
    }

    return n;
}


/* The lines of the old positions from from on, at their new positions,
 * in the form this mruby reads; NULL out of memory.  *count: its
 * line_entry_count. */
static void *
irep_lines_write(const irep_map *m, const uint16_t *line, uint32_t from,
    uint32_t *count)
{
    uint8_t   *map;
    uint32_t   n = irep_lines_pack(m, line, from, NULL);

    map = mrb_malloc_simple(m->mrb, n + 1);
    if (map != NULL) {
        irep_lines_pack(m, line, from, map);
        *count = n;
    }

    return map;
}

#define IREP_LINE_TYPE  mrb_debug_line_packed_map

#else

static void *
irep_lines_write(const irep_map *m, const uint16_t *line, uint32_t from,
    uint32_t *count)
{
    mrb_irep_debug_info_line  *map;
    uint32_t                   pc, n;

    map = mrb_malloc_simple(m->mrb, (m->ilen + 1) * sizeof(*map));
    if (map == NULL) {
        return NULL;
    }

    for (pc = from, n = 0; pc < m->ilen; pc++) {
        if (n == 0 || map[n - 1].line != line[pc]) {
            map[n].start_pos = irep_map_pos(m, pc);
            map[n].line = line[pc];
            n++;
        }
    }

    *count = n;
    return map;
}

#define IREP_LINE_TYPE  mrb_debug_line_flat_map

#endif


/*
 * The debug lines at the new positions, as a flat map (3.1) or a packed
 * one (MRB_DEBUG_LINES_PACKED): 0, or -1 out of memory with the debug
 * info as it was.  One file only: the compiler gives a script's ireps no
 * more (irep_check_one skips the others).
 */
static int
irep_lines_move(const irep_map *m, mrb_irep *irep, uint32_t new_ilen)
{
    mrb_state                  *mrb = m->mrb;
    mrb_irep_debug_info        *d = irep->debug_info;
    mrb_irep_debug_info_file   *f;
    uint16_t                   *line;
    void                       *map;
    uint32_t                    from, n;

    if (d == NULL || d->flen == 0) {
        return 0;
    }

    f = d->files[0];
    from = f->start_pos < m->ilen ? f->start_pos : m->ilen;

    line = mrb_malloc_simple(mrb, (m->ilen + 1) * sizeof(uint16_t));
    if (line == NULL) {
        return -1;
    }

    irep_lines_read(f, from, m->ilen, line);
    map = irep_lines_write(m, line, from, &n);
    mrb_free(mrb, line);
    if (map == NULL) {
        return -1;
    }

    mrb_free(mrb, f->lines.ptr);
    f->lines.ptr = map;
    f->line_entry_count = n;
    f->line_type = IREP_LINE_TYPE;
    f->start_pos = irep_map_pos(m, from);
    d->pc_count = new_ilen;

    return 0;
}


/* A catch handler's position (4 bytes, big-endian) moved. */
static void
irep_catch_move(const irep_map *m, uint8_t *b)
{
    uint32_t  v = (uint32_t) b[0] << 24 | (uint32_t) b[1] << 16
                  | (uint32_t) b[2] << 8 | b[3];

    v = irep_map_pos(m, v < m->ilen ? v : m->ilen);
    b[0] = (uint8_t) (v >> 24);
    b[1] = (uint8_t) (v >> 16);
    b[2] = (uint8_t) (v >> 8);
    b[3] = (uint8_t) v;
}


/* Rewrites one irep with its checks; may raise (out of memory). */
static void
irep_rewrite(irep_map *m, mrb_irep *irep, unsigned sym_index)
{
    mrb_state   *mrb = m->mrb;
    const struct mrb_irep_catch_handler  *ch;
    struct mrb_irep_catch_handler         h;
    uint8_t     *code;
    mrb_sym     *syms;
    uint32_t     pc, len, jump, new_ilen, to;
    int32_t      off;
    unsigned     reg = irep->nregs;
    uint16_t     i;
    size_t       at;

    if (sym_index == irep->slen) {
        /* harmless if what follows fails: a name no code uses */
        syms = mrb_realloc(mrb, (mrb_sym *) irep->syms,
                           (irep->slen + 1) * sizeof(mrb_sym));
        syms[irep->slen] = mrb_intern_lit(mrb, MRB_IREP_CHECK_NAME);
        irep->syms = syms;
        irep->slen++;
    }

    new_ilen = irep->ilen + m->shift[irep->ilen];
    code = mrb_malloc(mrb, new_ilen
                      + irep->clen * sizeof(struct mrb_irep_catch_handler));

    for (pc = 0, at = 0; pc < irep->ilen; pc += len) {
        mrb_irep_insn(irep->iseq, pc, irep->ilen, &len, &jump);

        if (m->check[pc] != 0) {
            at += irep_check_code(code + at, reg, sym_index);
        }
        memcpy(code + at, irep->iseq + pc, len);

        if (jump != 0) {
            off = mrb_irep_jump_offset(irep->iseq, jump);
            to = (uint32_t) ((int32_t) (pc + len) + off);
            off = (int32_t) irep_map_pos(m, to)
                  - (int32_t) (at + len);
            code[at + (jump - pc)] = (uint8_t) ((uint16_t) off >> 8);
            code[at + (jump - pc) + 1] = (uint8_t) off;
        }
        at += len;
    }

    ch = mrb_irep_catch_handler_table(irep);
    for (i = 0; i < irep->clen; i++) {
        h = ch[i];
        irep_catch_move(m, h.begin);
        irep_catch_move(m, h.end);
        irep_catch_move(m, h.target);
        memcpy(code + new_ilen + i * sizeof(h), &h, sizeof(h));
    }

    if (irep_lines_move(m, irep, new_ilen) != 0) {
        mrb_free(mrb, code);
        mrb_exc_raise(mrb, mrb_obj_value(mrb->nomem_err));
    }

    mrb_free(mrb, (mrb_code *) irep->iseq);
    irep->iseq = code;
    irep->ilen = new_ilen;
    irep->nregs = (uint16_t) (reg + 2);
}


/* The index of the check's symbol in irep's table, or slen: to be added. */
static unsigned
irep_check_sym(mrb_state *mrb, const mrb_irep *irep)
{
    mrb_sym   sym = mrb_intern_lit(mrb, MRB_IREP_CHECK_NAME);
    unsigned  i;

    for (i = 0; i < irep->slen; i++) {
        if (irep->syms[i] == sym) {
            return i;
        }
    }

    return irep->slen;
}


/* Gives irep (not its children) its checks; may raise (out of memory). */
static void
irep_check_one(mrb_state *mrb, mrb_irep *irep, int is_block)
{
    irep_map   m;
    unsigned   sym, size;
    uint8_t    code[IREP_CHECK_MAX];
    uint32_t   pc;

    if ((irep->flags & MRB_ISEQ_NO_FREE) || irep->nregs + 2 > 0xffff
        || (irep->debug_info != NULL && irep->debug_info->flen > 1))
    {
        return;
    }

    sym = irep_check_sym(mrb, irep);
    size = irep_check_code(code, irep->nregs, sym);

    m.mrb = mrb;
    m.ilen = irep->ilen;
    m.check = mrb_calloc(mrb, irep->ilen + 1, 1);

    if (irep_mark(&m, irep, is_block, size) <= 0) {
        mrb_free(mrb, m.check);
        return;
    }

    m.shift = mrb_calloc(mrb, irep->ilen + 1, sizeof(uint32_t));
    for (pc = 0; pc < irep->ilen; pc++) {
        m.shift[pc + 1] = m.shift[pc] + m.check[pc];
    }

    /* a jump's 16-bit offset reaches 32 KB: a longer irep keeps none */
    if (irep->ilen + m.shift[irep->ilen] <= INT16_MAX) {
        irep_rewrite(&m, irep, sym);
    }

    mrb_free(mrb, m.shift);
    mrb_free(mrb, m.check);
}


/* Which children are blocks and lambdas: the reps that BLOCK and LAMBDA
 * instructions name. */
static void
irep_check_tree(mrb_state *mrb, mrb_irep *irep, int is_block)
{
    uint8_t   *blocks;
    uint32_t   pc, len, jump;
    int        op;
    uint16_t   i;
    unsigned   b;

    blocks = mrb_calloc(mrb, irep->rlen + 1, 1);

    for (pc = 0; pc < irep->ilen; pc += len) {
        op = mrb_irep_insn(irep->iseq, pc, irep->ilen, &len, &jump);
        if (op < 0) {
            break;
        }
        if (op == OP_BLOCK || op == OP_LAMBDA) {
            /* BB: a register then the rep's index (16 bits after EXT2/3) */
            b = len == 3 ? irep->iseq[pc + 2]
                : irep->iseq[pc] == OP_EXT1 ? irep->iseq[pc + 4]
                : irep->iseq[pc] == OP_EXT2
                  ? (unsigned) (irep->iseq[pc + 3] << 8 | irep->iseq[pc + 4])
                  : (unsigned) (irep->iseq[pc + 4] << 8 | irep->iseq[pc + 5]);
            if (b < irep->rlen) {
                blocks[b] = 1;
            }
        }
    }

    for (i = 0; i < irep->rlen; i++) {
        irep_check_tree(mrb, (mrb_irep *) irep->reps[i], blocks[i]);
    }
    mrb_free(mrb, blocks);

    irep_check_one(mrb, irep, is_block);
}


void
mrb_irep_check_insert(mrb_state *mrb, mrb_irep *irep)
{
    irep_check_tree(mrb, irep, 0);
}
