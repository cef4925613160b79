/*
 * Digest (MD5, SHA1, SHA2, HMAC) on libcrypto.
 */

#ifndef MRB_DIGEST_H
#define MRB_DIGEST_H

#include <mruby.h>

void mrb_digest_define(mrb_state *mrb);

#endif /* MRB_DIGEST_H */
