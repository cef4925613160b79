/*
 * SecureRandom on libcrypto's RAND_bytes.
 */

#ifndef MRB_SECURERANDOM_H
#define MRB_SECURERANDOM_H

#include <mruby.h>

void mrb_securerandom_define(mrb_state *mrb);

#endif /* MRB_SECURERANDOM_H */
