/*
 * Reading the compiled bytecode of a script, for the passes that rewrite
 * it after mruby's code generator (mrb_irep_check.c, mrb_irep_dstr.c).
 */

#ifndef MRB_IREP_INSN_H
#define MRB_IREP_INSN_H

#include <stdint.h>

#include <mruby.h>
#include <mruby/irep.h>

/*
 * The instruction at pc: its length (with any EXT prefix) in *len, its
 * opcode (after the prefix) as the result, and in *jump where its 16-bit
 * relative offset is (0: not a relative jump).  -1 for an opcode this
 * mruby does not have, or an instruction that runs past end.
 */
int mrb_irep_insn(const mrb_code *iseq, uint32_t pc, uint32_t end,
    uint32_t *len, uint32_t *jump);

/* The 16-bit relative offset stored at iseq[at] (from mrb_irep_insn's
 * *jump): relative to the end of its instruction. */
int32_t mrb_irep_jump_offset(const mrb_code *iseq, uint32_t at);

#endif /* MRB_IREP_INSN_H */
