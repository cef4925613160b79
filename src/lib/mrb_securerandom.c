/*
 * SecureRandom.random_bytes(n) on OpenSSL's RAND_bytes (seeded from the
 * kernel, safe after fork); the other forms (hex, base64, uuid,
 * random_number, ...) are in securerandom.rb.
 */

#include <openssl/rand.h>

#include <mruby.h>
#include <mruby/string.h>

#include "mrb_api.h"
#include "mrb_securerandom.h"

#define SECURERANDOM_MAX  (1 << 20)     /* bytes in one call */


/* SecureRandom.random_bytes(n = 16) */
static mrb_value
securerandom_random_bytes(mrb_state *mrb, mrb_value self)
{
    mrb_value  n = mrb_nil_value(), out;
    mrb_int    len = 16;

    mrb_get_args(mrb, "|o", &n);
    if (!mrb_nil_p(n)) {
        len = mrb_as_int(mrb, n);
    }
    if (len < 0 || len > SECURERANDOM_MAX) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR, "invalid length: %i", len);
    }

    out = mrb_str_new(mrb, NULL, len);
    if (len > 0 && RAND_bytes((unsigned char *) RSTRING_PTR(out), (int) len)
                   != 1)
    {
        mrb_raise(mrb, E_RUNTIME_ERROR, "OpenSSL RAND_bytes failed");
    }

    return out;
}


static const mrb_api_method  securerandom_functions[] = {
    { "random_bytes",  securerandom_random_bytes,  MRB_ARGS_OPT(1) },
    { "gen_random",    securerandom_random_bytes,  MRB_ARGS_OPT(1) },
    MRB_API_METHOD_END
};


void
mrb_securerandom_define(mrb_state *mrb)
{
    mrb_api_define_module(mrb, NULL, "SecureRandom", securerandom_functions);
}
