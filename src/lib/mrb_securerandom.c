/*
 * SecureRandom.random_bytes(n) on OpenSSL's RAND_bytes (seeded from the
 * kernel, safe after fork), and random_number; the other forms (hex,
 * base64, uuid, ...) are in securerandom.rb.
 *
 * random_number is here because its bound can be any Integer: mruby
 * 3.1.0's VM compares an Integer of 2**62 or more wrongly (`2**62 > 2**56`
 * is false: OP_GT reads such an Integer as if it were unboxed), so the
 * Ruby version's guard let a large bound through and its rejection loop
 * never ended.  Here the bound is read with mrb_integer, which is right.
 */

#include <stdint.h>

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


static uint64_t
securerandom_u64(mrb_state *mrb)
{
    uint64_t  v;

    if (RAND_bytes((unsigned char *) &v, sizeof(v)) != 1) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "OpenSSL RAND_bytes failed");
    }

    return v;
}


/* A Float in [0.0, 1.0): 53 random bits, every double of the range
 * equally likely. */
static mrb_float
securerandom_float01(mrb_state *mrb)
{
    return (mrb_float) (securerandom_u64(mrb) >> 11) * 0x1.0p-53;
}


/*
 * SecureRandom.random_number(n = 0): an Integer in 0...n for an Integer
 * n > 0, a Float in 0.0...n for a Float n > 0, otherwise a Float in
 * 0.0...1.0 (nil, 0, a negative n).  Anything else is converted with to_i.
 */
static mrb_value
securerandom_random_number(mrb_state *mrb, mrb_value self)
{
    mrb_value  n = mrb_fixnum_value(0);
    uint64_t   bound, v, reject;

    mrb_get_args(mrb, "|o", &n);

    if (mrb_float_p(n) && mrb_float(n) > 0) {
        return mrb_float_value(mrb, securerandom_float01(mrb) * mrb_float(n));
    }

    if (!mrb_integer_p(n)) {
        n = mrb_nil_p(n) ? mrb_fixnum_value(0)
                         : mrb_funcall(mrb, n, "to_i", 0);
        if (!mrb_integer_p(n)) {
            mrb_raisef(mrb, E_TYPE_ERROR, "can't convert %T into Integer", n);
        }
    }

    if (mrb_integer(n) <= 0) {
        return mrb_float_value(mrb, securerandom_float01(mrb));
    }

    /* rejection sampling: the values below reject (2**64 mod bound) are
     * dropped, so that every remainder is equally likely; at most half
     * of them, so the loop ends after two draws on average */
    bound = (uint64_t) mrb_integer(n);
    reject = (0 - bound) % bound;
    do {
        v = securerandom_u64(mrb);
    } while (v < reject);

    return mrb_int_value(mrb, (mrb_int) (v % bound));
}


static const mrb_api_method  securerandom_functions[] = {
    { "random_bytes",  securerandom_random_bytes,  MRB_ARGS_OPT(1) },
    { "gen_random",    securerandom_random_bytes,  MRB_ARGS_OPT(1) },
    { "random_number", securerandom_random_number, MRB_ARGS_OPT(1) },
    MRB_API_METHOD_END
};


void
mrb_securerandom_define(mrb_state *mrb)
{
    mrb_api_define_module(mrb, NULL, "SecureRandom", securerandom_functions);
}
