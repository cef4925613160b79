/*
 * Reading the compiled bytecode of a script (mrb_irep_insn.h).  The
 * instruction lengths come from mruby's own opcode table (mruby/ops.h), so
 * a release with other opcodes reads right; the jump and EXT semantics are
 * those of 3.1.0 and 3.3.0 (mrb_mruby_version.h).
 */

#include <mruby.h>
#include <mruby/irep.h>
#include <mruby/opcode.h>

#include "mrb_irep_insn.h"
#include "mrb_mruby_version.h"

/* Each opcode's operand kinds, as mruby/ops.h names them ("BS": an 8-bit
 * register then a 16-bit number) */
static const char *const  irep_operands[] = {
#define OPCODE(name, operands) #operands,
#include <mruby/ops.h>
#undef OPCODE
};

#define IREP_OPS  (sizeof(irep_operands) / sizeof(irep_operands[0]))


/* Bytes of the operand kind k ('Z' none, 'B' 8 bits, 'S' 16, 'W' 24),
 * made 16 bits by an EXT prefix when wide. */
static unsigned
irep_operand_len(char k, int wide)
{
    switch (k) {
    case 'B':
        return wide ? 2 : 1;
    case 'S':
        return 2;
    case 'W':
        return 3;
    default:
        return 0;
    }
}


int
mrb_irep_insn(const mrb_code *iseq, uint32_t pc, uint32_t end,
    uint32_t *len, uint32_t *jump)
{
    const char  *k;
    uint32_t     at = pc;
    unsigned     ext = 0;
    int          op;

    op = iseq[at];
    if (op == OP_EXT1 || op == OP_EXT2 || op == OP_EXT3) {
        ext = op == OP_EXT1 ? 1 : op == OP_EXT2 ? 2 : 3;
        at++;
        if (at >= end) {
            return -1;
        }
        op = iseq[at];
    }

    if ((size_t) op >= IREP_OPS) {
        return -1;
    }

    k = irep_operands[op];
    at++;
    *jump = 0;

    if (op == OP_JMP || op == OP_JMPUW) {
        *jump = at;
    } else if (op == OP_JMPIF || op == OP_JMPNOT || op == OP_JMPNIL) {
        *jump = at + irep_operand_len('B', ext & 1);
    }

    if (k[0] != 'Z') {
        at += irep_operand_len(k[0], ext & 1);
        if (k[1] != '\0') {
            at += irep_operand_len(k[1], ext & 2);
            if (k[2] != '\0') {
                at += irep_operand_len(k[2], 0);
            }
        }
    }

    if (at > end) {
        return -1;
    }

    *len = at - pc;
    return op;
}


int32_t
mrb_irep_jump_offset(const mrb_code *iseq, uint32_t at)
{
    return (int16_t) (uint16_t) ((iseq[at] << 8) | iseq[at + 1]);
}
