/*
 * Digest::MD5, SHA1, SHA256, SHA384, SHA512 (and RMD160 where OpenSSL has
 * it) and Digest::HMAC, on OpenSSL's libcrypto, with mruby-digest's and
 * CRuby's API: Class.digest/hexdigest/base64digest(data), and instances
 * fed with update/<< that give digest/hexdigest without losing their
 * state.  The hex and Base64 forms are in digest.rb.
 *
 * Each class names its algorithm in the class variable-like ivar
 * __algorithm__; an instance holds an EVP_MD_CTX, freed with it.
 */

#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <mruby.h>
#include <mruby/class.h>
#include <mruby/data.h>
#include <mruby/string.h>
#include <mruby/variable.h>

#include "mrb_api.h"
#include "mrb_digest.h"


static void
digest_free(mrb_state *mrb, void *p)
{
    EVP_MD_CTX_free(p);
}

static const struct mrb_data_type  digest_type = { "Digest", digest_free };


/* The algorithm of a Digest class (or of the class of an instance). */
static const EVP_MD *
digest_md(mrb_state *mrb, mrb_value klass)
{
    mrb_value      name;
    const EVP_MD  *md;

    name = mrb_iv_get(mrb, klass, mrb_intern_lit(mrb, "__algorithm__"));
    if (!mrb_string_p(name)) {
        mrb_raise(mrb, E_NOTIMP_ERROR, "Digest::Base is an abstract class");
    }

    md = EVP_get_digestbyname(RSTRING_PTR(name));
    if (md == NULL) {
        mrb_raisef(mrb, E_NOTIMP_ERROR, "%v is not in this OpenSSL", name);
    }

    return md;
}


static mrb_value
digest_bytes(mrb_state *mrb, const unsigned char *p, unsigned int len)
{
    return mrb_str_new(mrb, (const char *) p, len);
}


/* Digest::X.digest(data) */
static mrb_value
digest_s_digest(mrb_state *mrb, mrb_value self)
{
    const EVP_MD   *md = digest_md(mrb, self);
    unsigned char   out[EVP_MAX_MD_SIZE];
    unsigned int    len = 0;
    mrb_value       data;

    mrb_get_args(mrb, "S", &data);
    if (!EVP_Digest(RSTRING_PTR(data), (size_t) RSTRING_LEN(data), out, &len,
                    md, NULL))
    {
        mrb_raise(mrb, E_RUNTIME_ERROR, "OpenSSL digest failed");
    }

    return digest_bytes(mrb, out, len);
}


static EVP_MD_CTX *
digest_ctx(mrb_state *mrb, mrb_value self)
{
    EVP_MD_CTX  *ctx = mrb_data_get_ptr(mrb, self, &digest_type);

    if (ctx == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "uninitialized digest");
    }
    return ctx;
}


/* Digest::X.new([data]) */
static mrb_value
digest_initialize(mrb_state *mrb, mrb_value self)
{
    const EVP_MD  *md = digest_md(mrb, mrb_obj_value(mrb_obj_class(mrb, self)));
    mrb_value      data = mrb_nil_value();
    EVP_MD_CTX    *ctx;

    mrb_get_args(mrb, "|S!", &data);

    if (DATA_PTR(self) != NULL) {
        EVP_MD_CTX_free(DATA_PTR(self));
    }
    DATA_TYPE(self) = &digest_type;
    DATA_PTR(self) = NULL;

    ctx = EVP_MD_CTX_new();
    if (ctx == NULL || !EVP_DigestInit_ex(ctx, md, NULL)) {
        EVP_MD_CTX_free(ctx);
        mrb_raise(mrb, E_RUNTIME_ERROR, "OpenSSL digest failed");
    }
    DATA_PTR(self) = ctx;

    if (!mrb_nil_p(data)) {
        EVP_DigestUpdate(ctx, RSTRING_PTR(data), (size_t) RSTRING_LEN(data));
    }
    return self;
}


static mrb_value
digest_initialize_copy(mrb_state *mrb, mrb_value self)
{
    mrb_value    src;
    EVP_MD_CTX  *ctx;

    mrb_get_args(mrb, "o", &src);
    ctx = EVP_MD_CTX_new();
    if (ctx == NULL || !EVP_MD_CTX_copy_ex(ctx, digest_ctx(mrb, src))) {
        EVP_MD_CTX_free(ctx);
        mrb_raise(mrb, E_RUNTIME_ERROR, "OpenSSL digest failed");
    }
    if (DATA_PTR(self) != NULL) {
        EVP_MD_CTX_free(DATA_PTR(self));
    }
    DATA_TYPE(self) = &digest_type;
    DATA_PTR(self) = ctx;
    return self;
}


/* d.update(data), d << data */
static mrb_value
digest_update(mrb_state *mrb, mrb_value self)
{
    mrb_value  data;

    mrb_get_args(mrb, "S", &data);
    EVP_DigestUpdate(digest_ctx(mrb, self), RSTRING_PTR(data),
                     (size_t) RSTRING_LEN(data));
    return self;
}


/* d.digest: the value so far, the state kept (finished on a copy). */
static mrb_value
digest_digest(mrb_state *mrb, mrb_value self)
{
    EVP_MD_CTX     *ctx = digest_ctx(mrb, self), *copy;
    unsigned char   out[EVP_MAX_MD_SIZE];
    unsigned int    len = 0;
    int             ok;

    copy = EVP_MD_CTX_new();
    ok = copy != NULL && EVP_MD_CTX_copy_ex(copy, ctx)
         && EVP_DigestFinal_ex(copy, out, &len);
    EVP_MD_CTX_free(copy);
    if (!ok) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "OpenSSL digest failed");
    }

    return digest_bytes(mrb, out, len);
}


static mrb_value
digest_reset(mrb_state *mrb, mrb_value self)
{
    EVP_MD_CTX  *ctx = digest_ctx(mrb, self);

    EVP_DigestInit_ex(ctx, EVP_MD_CTX_get0_md(ctx), NULL);
    return self;
}


static mrb_value
digest_length(mrb_state *mrb, mrb_value self)
{
    return mrb_fixnum_value(EVP_MD_CTX_get_size(digest_ctx(mrb, self)));
}


static mrb_value
digest_block_length(mrb_state *mrb, mrb_value self)
{
    return mrb_fixnum_value(EVP_MD_CTX_get_block_size(digest_ctx(mrb, self)));
}


/* Digest::HMAC.digest(data, key, Digest::SHA256): one shot (the
 * incremental form in digest.rb gathers the data, then calls this). */
static mrb_value
digest_hmac_s_digest(mrb_state *mrb, mrb_value self)
{
    mrb_value       data, key, klass;
    const EVP_MD   *md;
    unsigned char   out[EVP_MAX_MD_SIZE];
    unsigned int    len = 0;

    mrb_get_args(mrb, "SSC", &data, &key, &klass);
    md = digest_md(mrb, klass);

    if (HMAC(md, RSTRING_PTR(key), (int) RSTRING_LEN(key),
             (const unsigned char *) RSTRING_PTR(data),
             (size_t) RSTRING_LEN(data), out, &len) == NULL)
    {
        mrb_raise(mrb, E_RUNTIME_ERROR, "OpenSSL HMAC failed");
    }

    return digest_bytes(mrb, out, len);
}


static const mrb_api_method  digest_class_methods[] = {
    { "digest",        digest_s_digest,       MRB_ARGS_REQ(1) },
    MRB_API_METHOD_END
};

static const mrb_api_method  digest_methods[] = {
    { "initialize",       digest_initialize,       MRB_ARGS_OPT(1) },
    { "initialize_copy",  digest_initialize_copy,  MRB_ARGS_REQ(1) },
    { "update",           digest_update,           MRB_ARGS_REQ(1) },
    { "<<",               digest_update,           MRB_ARGS_REQ(1) },
    { "digest",           digest_digest,           MRB_ARGS_NONE() },
    { "reset",            digest_reset,            MRB_ARGS_NONE() },
    { "digest_length",    digest_length,           MRB_ARGS_NONE() },
    { "length",           digest_length,           MRB_ARGS_NONE() },
    { "size",             digest_length,           MRB_ARGS_NONE() },
    { "block_length",     digest_block_length,     MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};

static const mrb_api_method  digest_hmac_class_methods[] = {
    { "__digest",      digest_hmac_s_digest,  MRB_ARGS_REQ(3) },
    MRB_API_METHOD_END
};

/* Class name and OpenSSL's name of its algorithm. */
static const char  *digest_algorithms[][2] = {
    { "MD5",    "MD5" },
    { "SHA1",   "SHA1" },
    { "SHA256", "SHA256" },
    { "SHA384", "SHA384" },
    { "SHA512", "SHA512" },
    { "RMD160", "RIPEMD160" },
};


void
mrb_digest_define(mrb_state *mrb)
{
    struct RClass  *digest, *base, *c;
    size_t          i;

    digest = mrb_api_define_module(mrb, NULL, "Digest", NULL);
    base = mrb_api_define_class(mrb, digest, "Base", NULL, digest_methods);
    MRB_SET_INSTANCE_TT(base, MRB_TT_DATA);
    mrb_api_define_class_methods(mrb, base, digest_class_methods);

    for (i = 0; i < sizeof(digest_algorithms) / sizeof(digest_algorithms[0]);
         i++)
    {
        c = mrb_api_define_class(mrb, digest, digest_algorithms[i][0], base,
                                 NULL);
        MRB_SET_INSTANCE_TT(c, MRB_TT_DATA);
        mrb_iv_set(mrb, mrb_obj_value(c), mrb_intern_lit(mrb, "__algorithm__"),
                   mrb_str_new_cstr(mrb, digest_algorithms[i][1]));
    }

    c = mrb_api_define_class(mrb, digest, "HMAC", NULL, NULL);
    mrb_api_define_class_methods(mrb, c, digest_hmac_class_methods);
}
