/*
 * String interpolation built in one allocation, by a rewrite of the
 * bytecode of every script we compile.
 *
 * mruby's code generator builds "a=#{x} b=#{y}\n" as a new String of its
 * first literal (OP_STRING), then, for each further piece, a load of it
 * into the next register (a MOVE of a value, or an OP_STRING that makes a
 * new String of a literal) and an OP_STRCAT, which converts the value
 * (mrb_obj_as_string) and appends it, growing the String by realloc: a
 * String made and collected for each literal, an append for each piece.
 * In nginx's typical script (bench/typical.rb) the body's 13 pieces made
 * 7 Strings and 12 appends (~4,400 instructions a request).
 *
 * So a run of at least DSTR_PIECES_MIN pieces whose values are local
 * variables (a MOVE from a register under the String's) is rewritten in
 * place, the same bytes:
 *
 *   GETGV  R[a] $"(interpolation)"    the builder (mrb_api_define_hidden)
 *   LOADI  R[a+1] t                   t: a template we add to the pool
 *   SEND   R[a] :"(interpolation)" 1
 *   JMP    past the rest of the old bytes
 *
 * The template lists the pieces in order: each literal's bytes, and for
 * each value the register that holds it.  The builder reads the registers
 * of its caller's frame: when every value is a String or an Integer, it
 * sizes the result, allocates it once and copies (an Integer written as
 * mrb_obj_as_string writes it: Integer#to_s is not called there either);
 * otherwise it appends piece by piece with mrb_str_concat, reading each
 * register when it reaches it, as OP_STRCAT did after its MOVE, so a to_s
 * that changes a later variable (through a block) is seen as before.  The
 * result is a new String, as before.
 *
 * A run is cut before a piece that is computed (a call, an instance
 * variable: the code that computes it stays, with the OP_STRCATs after
 * it), or where control can arrive inside it (a jump's target, a catch
 * handler's bounds).  Positions keep their lines: an error in a to_s is
 * reported on the interpolation's line (on one of its lines, for one over
 * several).  mruby 4.0 is left as it is: its opcodes differ (no OP_LOADI)
 * and its code generator was not read for this.
 */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <mruby.h>
#include <mruby/irep.h>
#include <mruby/numeric.h>
#include <mruby/opcode.h>
#include <mruby/proc.h>
#include <mruby/string.h>

#include "mrb_api.h"
#include "mrb_irep_dstr.h"
#include "mrb_irep_insn.h"
#include "mrb_mruby_version.h"

/*
 * A template: the number of pieces (4 bytes), a record of 4 bytes for
 * each piece (all little-endian), then the literals' bytes in order.  A
 * record is a literal's length, or DSTR_VALUE and the register that holds
 * a value.  Fixed records are read with a load each: the builder walks
 * them twice a call.
 */
#define DSTR_VALUE       0x80000000u
#define DSTR_RECORD_LEN  4

/* Fewer pieces take fewer bytes than the call (GETGV, LOADI, SEND) */
#define DSTR_PIECES_MIN  3

/* Values in one template: the builder's fast path keeps them on its stack */
#define DSTR_VALUES_MAX  16

/* Bytes of code in one run: the JMP over its rest takes a signed 16-bit
 * offset (a heredoc of thousands of short lines is one run otherwise) */
#define DSTR_RUN_MAX     INT16_MAX

/* An Integer in decimal, with its sign and NUL */
#define DSTR_INT_LEN     (MRB_INT_BIT / 3 + 3)


#ifdef MRB_IREP_DSTR_REWRITES

/* ------------------------------------------------------------------ */
/* The rewrite, at compile time                                        */

typedef struct {
    uint32_t  start;        /* the first OP_STRING */
    uint32_t  end;          /* past the run's last OP_STRCAT */
    unsigned  reg;          /* a: the String's register */
    unsigned  values;
} dstr_run;


/* A catch handler's position (4 bytes, big-endian), at most ilen. */
static uint32_t
dstr_catch_pos(const uint8_t *b, uint32_t ilen)
{
    uint32_t  v = (uint32_t) b[0] << 24 | (uint32_t) b[1] << 16
                  | (uint32_t) b[2] << 8 | b[3];

    return v < ilen ? v : ilen;
}


/* Marks, in entry[ilen + 1], the positions control can reach other than
 * from the instruction before: jump targets, catch handlers' bounds and
 * targets.  -1 for bytecode that cannot be read. */
static int
dstr_entries(const mrb_irep *irep, uint8_t *entry)
{
    const struct mrb_irep_catch_handler  *ch;
    uint32_t  pc, len, jump;
    int64_t   to;
    uint16_t  i;

    for (pc = 0; pc < irep->ilen; pc += len) {
        if (mrb_irep_insn(irep->iseq, pc, irep->ilen, &len, &jump) < 0) {
            return -1;
        }
        if (jump != 0) {
            to = (int64_t) pc + len + mrb_irep_jump_offset(irep->iseq, jump);
            if (to < 0 || to > irep->ilen) {
                return -1;
            }
            entry[to] = 1;
        }
    }

    ch = mrb_irep_catch_handler_table(irep);
    for (i = 0; i < irep->clen; i++) {
        entry[dstr_catch_pos(ch[i].begin, irep->ilen)] = 1;
        entry[dstr_catch_pos(ch[i].end, irep->ilen)] = 1;
        entry[dstr_catch_pos(ch[i].target, irep->ilen)] = 1;
    }

    return 0;
}


/* Whether iseq[pc] is `op` with no EXT prefix, len bytes long, its first
 * operand reg. */
static int
dstr_is(const mrb_irep *irep, uint32_t pc, int op, uint32_t len,
    unsigned reg)
{
    uint32_t  l, jump;

    return pc + len <= irep->ilen
           && mrb_irep_insn(irep->iseq, pc, irep->ilen, &l, &jump) == op
           && l == len && irep->iseq[pc] == op && irep->iseq[pc + 1] == reg;
}


/* The run that begins with the OP_STRING at pc, in *run: 1 when it has
 * DSTR_PIECES_MIN pieces or more. */
static int
dstr_run_find(const mrb_irep *irep, const uint8_t *entry, uint32_t pc,
    dstr_run *run)
{
    const mrb_code  *c = irep->iseq;
    unsigned         a = c[pc + 1], pieces = 1;
    uint32_t         q = pc + 3;

    run->start = pc;
    run->reg = a;
    run->values = 0;

    /* the SEND clears R[a+2]: an operand of 8 bits */
    if (a + 2 > 0xff) {
        return 0;
    }

    while (q + 5 - pc <= DSTR_RUN_MAX && !entry[q] && !entry[q + 3]
           && dstr_is(irep, q + 3, OP_STRCAT, 2, a))
    {
        if (dstr_is(irep, q, OP_MOVE, 3, a + 1) && c[q + 2] < a
            && run->values < DSTR_VALUES_MAX)
        {
            run->values++;
        } else if (!dstr_is(irep, q, OP_STRING, 3, a + 1)) {
            break;
        }
        pieces++;
        q += 5;
    }

    run->end = q;
    return pieces >= DSTR_PIECES_MIN;
}


/* The literal of OP_STRING's pool index at pc: its bytes and length. */
static const char *
dstr_literal(const mrb_irep *irep, uint32_t pc, uint32_t *len)
{
    const mrb_pool_value  *v = &irep->pool[irep->iseq[pc + 2]];

    *len = v->tt >> 2;
    return v->u.str;
}


static void
dstr_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t) v;
    p[1] = (uint8_t) (v >> 8);
    p[2] = (uint8_t) (v >> 16);
    p[3] = (uint8_t) (v >> 24);
}


/* The run's template, as a new string in the pool: its index, or -1 when
 * it is longer than a dumped pool string can be (16 bits).  May raise; the
 * irep stays whole (its pool perhaps one entry longer than used). */
static int
dstr_template_add(mrb_state *mrb, mrb_irep *irep, const dstr_run *run)
{
    mrb_pool_value  *pool;
    uint8_t         *t, *rec;
    const char      *lit;
    uint32_t         pc, len, pieces = 0;
    size_t           n = DSTR_RECORD_LEN, at;

    for (pc = run->start; pc < run->end; pc += pc == run->start ? 3 : 5) {
        n += DSTR_RECORD_LEN;
        if (irep->iseq[pc] == OP_STRING) {
            dstr_literal(irep, pc, &len);
            n += len;
        }
        pieces++;
    }

    if (n > UINT16_MAX) {
        return -1;
    }

    pool = mrb_realloc(mrb, (mrb_pool_value *) irep->pool,
                       (irep->plen + 1) * sizeof(mrb_pool_value));
    irep->pool = pool;
    t = mrb_malloc(mrb, n + 1);

    dstr_put32(t, pieces);
    rec = t + DSTR_RECORD_LEN;
    at = DSTR_RECORD_LEN * (1 + pieces);
    for (pc = run->start; pc < run->end; pc += pc == run->start ? 3 : 5) {
        if (irep->iseq[pc] == OP_STRING) {
            lit = dstr_literal(irep, pc, &len);
            dstr_put32(rec, len);
            memcpy(t + at, lit, len);
            at += len;
        } else {
            dstr_put32(rec, DSTR_VALUE | irep->iseq[pc + 2]);
        }
        rec += DSTR_RECORD_LEN;
    }
    t[n] = '\0';

    pool[irep->plen].tt = (uint32_t) (n << 2) | IREP_TT_STR;
    pool[irep->plen].u.str = (const char *) t;
    return (int) irep->plen++;
}


/* The run's bytes made the builder's call, then a jump past the rest. */
static void
dstr_run_write(mrb_irep *irep, const dstr_run *run, unsigned sym,
    unsigned tmpl)
{
    uint8_t   *out = (uint8_t *) irep->iseq + run->start;
    uint32_t   n = 0, rest, size = run->end - run->start;
    unsigned   a = run->reg;

    out[n++] = OP_GETGV;
    out[n++] = (uint8_t) a;
    out[n++] = (uint8_t) sym;
    if (tmpl <= 0xff) {
        out[n++] = OP_LOADI;
        out[n++] = (uint8_t) (a + 1);
        out[n++] = (uint8_t) tmpl;
    } else {
        out[n++] = OP_LOADI16;
        out[n++] = (uint8_t) (a + 1);
        out[n++] = (uint8_t) (tmpl >> 8);
        out[n++] = (uint8_t) tmpl;
    }
    out[n++] = OP_SEND;
    out[n++] = (uint8_t) a;
    out[n++] = (uint8_t) sym;
    out[n++] = 1;

    rest = size - n;
    if (rest >= 3) {
        out[n++] = OP_JMP;
        out[n++] = (uint8_t) ((rest - 3) >> 8);
        out[n++] = (uint8_t) (rest - 3);
    }
    memset(out + n, OP_NOP, size - n);

    if (irep->nregs < a + 3) {
        irep->nregs = (uint16_t) (a + 3);
    }
}


/* The index of the builder's name in irep's symbols, added if missing;
 * -1 when it would need 16 bits. */
static int
dstr_sym(mrb_state *mrb, mrb_irep *irep)
{
    mrb_sym   sym = mrb_intern_lit(mrb, MRB_IREP_DSTR_NAME);
    mrb_sym  *syms;
    unsigned  i;

    for (i = 0; i < irep->slen; i++) {
        if (irep->syms[i] == sym) {
            return i <= 0xff ? (int) i : -1;
        }
    }

    if (irep->slen > 0xff) {
        return -1;
    }

    /* harmless if what follows fails: a name no code uses */
    syms = mrb_realloc(mrb, (mrb_sym *) irep->syms,
                       (irep->slen + 1) * sizeof(mrb_sym));
    syms[irep->slen] = sym;
    irep->syms = syms;
    return irep->slen++;
}


/* Rewrites irep's runs (not its children's); may raise (out of memory). */
static void
dstr_fuse_one(mrb_state *mrb, mrb_irep *irep)
{
    uint8_t   *entry;
    uint32_t   pc, len, jump;
    dstr_run   run;
    int        op, tmpl, sym = -1;

    if (irep->flags & MRB_ISEQ_NO_FREE) {
        return;
    }

    entry = mrb_calloc(mrb, irep->ilen + 6, 1);
    if (dstr_entries(irep, entry) != 0) {
        mrb_free(mrb, entry);
        return;
    }

    for (pc = 0; pc < irep->ilen; pc += len) {
        op = mrb_irep_insn(irep->iseq, pc, irep->ilen, &len, &jump);
        if (op != OP_STRING || len != 3 || irep->iseq[pc] != OP_STRING
            || !dstr_run_find(irep, entry, pc, &run))
        {
            continue;
        }
        if (sym < 0 && (sym = dstr_sym(mrb, irep)) < 0) {
            break;
        }
        if (irep->plen >= INT16_MAX) {
            break;
        }
        tmpl = dstr_template_add(mrb, irep, &run);
        if (tmpl >= 0) {
            dstr_run_write(irep, &run, (unsigned) sym, (unsigned) tmpl);
            len = run.end - pc;
        }
    }

    mrb_free(mrb, entry);
}


static void
dstr_fuse_tree(mrb_state *mrb, mrb_irep *irep)
{
    uint16_t  i;

    for (i = 0; i < irep->rlen; i++) {
        if (irep->reps[i] != NULL) {
            dstr_fuse_tree(mrb, (mrb_irep *) irep->reps[i]);
        }
    }

    dstr_fuse_one(mrb, irep);
}


void
mrb_irep_dstr_fuse(mrb_state *mrb, mrb_irep *irep)
{
    dstr_fuse_tree(mrb, irep);
}


/* ------------------------------------------------------------------ */
/* The builder, at run time                                            */

typedef struct {
    const uint8_t  *rec;        /* the records */
    const char     *lit;        /* the literals' bytes */
    const char     *end;
    uint32_t        pieces;
    ptrdiff_t       call;       /* the caller's register of the call:
                                   values are under it */
} dstr_template;


static uint32_t
dstr_get32(const uint8_t *p)
{
    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16
           | (uint32_t) p[3] << 24;
}


/* The caller's frame (the bytecode that sent the call): its registers. */
static mrb_value *
dstr_caller_regs(mrb_state *mrb)
{
    return mrb->c->ci[-1].stack;
}


static void
dstr_bad(mrb_state *mrb)
{
    mrb_raise(mrb, E_ARGUMENT_ERROR, "not an interpolation of this code");
}


/*
 * The template the call names, in the caller's pool, in *t: its records
 * are inside it (what they say is checked as they are read).  Raises
 * ArgumentError for anything else (a script that reached the builder and
 * called it itself).
 */
static void
dstr_template_of(mrb_state *mrb, mrb_value index, dstr_template *t)
{
    const mrb_callinfo    *ci = mrb->c->ci;
    const mrb_irep        *irep;
    const mrb_pool_value  *v;
    const char            *p;
    size_t                 len;
    mrb_int                i;

    if (ci == mrb->c->cibase || ci[-1].proc == NULL
        || MRB_PROC_CFUNC_P(ci[-1].proc) || !mrb_integer_p(index))
    {
        dstr_bad(mrb);
    }

    irep = ci[-1].proc->body.irep;
    i = mrb_integer(index);
    if (irep == NULL || i < 0 || i >= irep->plen
        || (irep->pool[i].tt & IREP_TT_NFLAG))
    {
        dstr_bad(mrb);
    }

    v = &irep->pool[i];
    p = v->u.str;
    len = v->tt >> 2;
    if (len < DSTR_RECORD_LEN) {
        dstr_bad(mrb);
    }

    t->pieces = dstr_get32((const uint8_t *) p);
    if (t->pieces > (len - DSTR_RECORD_LEN) / DSTR_RECORD_LEN) {
        dstr_bad(mrb);
    }

    t->rec = (const uint8_t *) p + DSTR_RECORD_LEN;
    t->lit = p + DSTR_RECORD_LEN * (1 + t->pieces);
    t->end = p + len;

    /* the registers above a call are not the GC's: a value left there by
     * an earlier call may be one it frees while the result is made */
    t->call = ci->stack - ci[-1].stack;
}


/* The piece by piece way, as OP_STRCAT: for values whose conversion may
 * call Ruby (to_s), each read when it is reached.  t was checked whole. */
static mrb_value
dstr_build_each(mrb_state *mrb, const dstr_template *t, size_t known)
{
    mrb_value    s = mrb_str_new_capa(mrb, known);
    const char  *lit = t->lit;
    uint32_t     i, r;
    int          ai = mrb_gc_arena_save(mrb);

    for (i = 0; i < t->pieces; i++) {
        r = dstr_get32(t->rec + DSTR_RECORD_LEN * i);
        if (r & DSTR_VALUE) {
            mrb_str_concat(mrb, s, dstr_caller_regs(mrb)[r & ~DSTR_VALUE]);
            mrb_gc_arena_restore(mrb, ai);
        } else {
            mrb_str_cat(mrb, s, lit, r);
            lit += r;
        }
    }

    return s;
}


/* What the rewritten bytecode calls: the interpolation as a new String. */
static mrb_value
dstr_build(mrb_state *mrb, mrb_value self)
{
    dstr_template   t;
    mrb_value       s, v, *regs;
    const char     *lit, *ptr[DSTR_VALUES_MAX];
    char            num[DSTR_VALUES_MAX][DSTR_INT_LEN], *dst;
    size_t          total = 0, known = 0, vlen[DSTR_VALUES_MAX];
    uint32_t        i, r;
    unsigned        n = 0;
    int             each = 0;

    dstr_template_of(mrb, mrb_get_arg1(mrb), &t);

    /* the records checked; Strings and Integers, which convert with no
     * Ruby, read, to be copied once the result is made */
    regs = dstr_caller_regs(mrb);
    lit = t.lit;
    for (i = 0; i < t.pieces; i++) {
        r = dstr_get32(t.rec + DSTR_RECORD_LEN * i);

        if (!(r & DSTR_VALUE)) {
            if (r > (size_t) (t.end - lit)) {
                dstr_bad(mrb);
            }
            lit += r;
            known += r;
            continue;
        }

        if ((r & ~DSTR_VALUE) >= (uint32_t) t.call
            || n == DSTR_VALUES_MAX)
        {
            dstr_bad(mrb);
        }

        v = regs[r & ~DSTR_VALUE];
        if (mrb_string_p(v)) {
            ptr[n] = RSTRING_PTR(v);
            vlen[n] = (size_t) RSTRING_LEN(v);
        } else if (mrb_integer_p(v)) {
            ptr[n] = mrb_int_to_cstr(num[n], sizeof(num[n]), mrb_integer(v),
                                     10);
            vlen[n] = strlen(ptr[n]);
        } else {
            each = 1;
            vlen[n] = 0;
        }
        total += vlen[n++];
    }

    if (each) {
        return dstr_build_each(mrb, &t, known);
    }

    /* the Strings read stay where they are: the GC moves nothing */
    s = mrb_str_new(mrb, NULL, (mrb_int) (known + total));
    dst = RSTRING_PTR(s);
    lit = t.lit;
    n = 0;
    for (i = 0; i < t.pieces; i++) {
        r = dstr_get32(t.rec + DSTR_RECORD_LEN * i);
        if (r & DSTR_VALUE) {
            memcpy(dst, ptr[n], vlen[n]);
            dst += vlen[n++];
        } else {
            memcpy(dst, lit, r);
            dst += r;
            lit += r;
        }
    }

    return s;
}


void
mrb_irep_dstr_define(mrb_state *mrb)
{
    mrb_api_define_hidden(mrb, MRB_IREP_DSTR_NAME, dstr_build,
                          MRB_ARGS_REQ(1));
}

#else /* !MRB_IREP_DSTR_REWRITES */

void
mrb_irep_dstr_fuse(mrb_state *mrb, mrb_irep *irep)
{
}


void
mrb_irep_dstr_define(mrb_state *mrb)
{
}

#endif
