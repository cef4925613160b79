/*
 * Server::SharedDict: the Ruby face of a shared dictionary zone.
 *
 *   d = Apache::SharedDict.new("cache")   # Nginx::SharedDict under nginx
 *   d["k"] = "v";  d.set("k", 1, ttl: 2.5);  d.incr("n", 1, init: 0)
 *
 * Every method is one atomic zone call.  Values are String, Integer, Float,
 * true and false; storing nil deletes.  No Ruby object is allocated while
 * the zone is locked: a value too long for the stack buffer is fetched again
 * into a string of the right size.
 */

#include <math.h>
#include <string.h>
#include <mruby.h>
#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/data.h>
#include <mruby/string.h>
#include <mruby/variable.h>
#include "mrb_api.h"
#include "mrb_errbuf.h"
#include "mrb_interp.h"
#include "mrb_mruby_version.h"
#include "mrb_shdict.h"
#include "mrb_shdict_file.h"
#include "mrb_shdict_zone.h"

/* ttl: at most ~30 years, far from overflowing the ms clock */
#define SHD_TTL_MAX  1e9

static const mrb_data_type  shd_type = { "SharedDict", NULL };


static struct RClass *
shd_class(mrb_state *mrb, mrb_value self, const char *name)
{
    return mrb_class_get_under(mrb, mrb_obj_class(mrb, self), name);
}


static const mrb_shdict_ref *
shd_ref(mrb_state *mrb, mrb_value self)
{
    const mrb_shdict_ref  *ref;

    ref = mrb_data_get_ptr(mrb, self, &shd_type);

    if (ref == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "SharedDict is not initialized");
    }

    return ref;
}


static mrb_shdict_zone *
shd_zone(mrb_state *mrb, mrb_value self)
{
    const mrb_shdict_ref  *ref;
    mrb_shdict_zone       *z;

    ref = shd_ref(mrb, self);
    z = mrb_shdict_ref_zone(ref);

    if (z == NULL) {
        mrb_raisef(mrb, shd_class(mrb, self, "Error"),
                   "shared dictionary \"%s\" was removed by a reload",
                   mrb_shdict_ref_name(ref));
    }

    return z;
}


static void
shd_check_key(mrb_state *mrb, mrb_int klen)
{
    if (klen == 0) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "SharedDict keys cannot be empty");
    }
}


/*
 * The arguments of a method of min..max positional ones (a String key
 * first) and the keywords names (n), read as they lie: mrb_get_args'
 * format parsing cost more than most zone calls.  argv gets the
 * positional arguments (undef for those not given).
 */
static void
shd_args(mrb_state *mrb, mrb_int min, mrb_int max, mrb_value *argv,
    const char *const *names, mrb_value *kw, int n)
{
    mrb_int           i, argc;
    const mrb_value  *args;

    if (n == 0 && mrb_api_kwargs_given(mrb)) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR, "%n takes no keywords",
                   mrb->c->ci->mid);
    }

    argc = mrb_get_argc(mrb);

    if (argc < min || argc > max) {
        mrb_argnum_error(mrb, argc, min, max);
    }

    args = mrb_get_argv(mrb);

    for (i = 0; i < max; i++) {
        argv[i] = (i < argc) ? args[i] : mrb_undef_value();
    }

    mrb_api_kwargs(mrb, names, kw, n);
    argv[0] = mrb_ensure_string_type(mrb, argv[0]);
}


/* Raises for a failed zone call. */
static void
shd_raise(mrb_state *mrb, mrb_value self, mrb_shdict_rc rc)
{
    const char  *name;

    name = mrb_shdict_ref_name(shd_ref(mrb, self));

    switch (rc) {
    case MRB_SHDICT_NO_MEMORY:
        mrb_raisef(mrb, shd_class(mrb, self, "FullError"),
                   "shared dictionary \"%s\" is full", name);
        break;
    case MRB_SHDICT_TOO_LARGE:
        mrb_raisef(mrb, shd_class(mrb, self, "FullError"),
                   "entry too large for shared dictionary \"%s\"", name);
        break;
    case MRB_SHDICT_NOT_A_NUMBER:
        mrb_raisef(mrb, E_TYPE_ERROR,
                   "shared dictionary \"%s\": the value is not a number",
                   name);
        break;
    case MRB_SHDICT_OVERFLOW:
        mrb_raisef(mrb, E_RANGE_ERROR,
                   "shared dictionary \"%s\": integer overflow", name);
        break;
    default:
        mrb_raisef(mrb, shd_class(mrb, self, "Error"),
                   "shared dictionary \"%s\": its lock is unusable", name);
        break;
    }
}


static void
shd_value_from(mrb_state *mrb, mrb_value v, mrb_shdict_value *out)
{
    memset(out, 0, sizeof(*out));

    switch (mrb_type(v)) {
    case MRB_TT_STRING:
        out->type = MRB_SHDICT_STRING;
        out->str = RSTRING_PTR(v);
        out->len = RSTRING_LEN(v);
        return;
    case MRB_TT_INTEGER:
        out->type = MRB_SHDICT_INTEGER;
        out->i = mrb_integer(v);
        return;
    case MRB_TT_FLOAT:
        out->type = MRB_SHDICT_FLOAT;
        out->f = mrb_float(v);
        return;
    case MRB_TT_TRUE:
        out->type = MRB_SHDICT_TRUE;
        return;
    case MRB_TT_FALSE:
        if (!mrb_nil_p(v)) {
            out->type = MRB_SHDICT_FALSE;
            return;
        }
        break;
    default:
        break;
    }

    mrb_raisef(mrb, E_TYPE_ERROR, "SharedDict values are String, Integer, "
               "Float, true or false, not %T", v);
}


static void
shd_number_from(mrb_state *mrb, mrb_value v, mrb_shdict_value *out)
{
    if (!mrb_integer_p(v) && !mrb_float_p(v)) {
        mrb_raisef(mrb, E_TYPE_ERROR, "expected an Integer or a Float, "
                   "not %T", v);
    }

    shd_value_from(mrb, v, out);
}


static mrb_value
shd_value_to(mrb_state *mrb, const mrb_shdict_value *v)
{
    switch (v->type) {
    case MRB_SHDICT_STRING:
        return mrb_str_new(mrb, v->str, v->len);
    case MRB_SHDICT_INTEGER:
        return mrb_int_value(mrb, v->i);
    case MRB_SHDICT_FLOAT:
        return mrb_float_value(mrb, v->f);
    case MRB_SHDICT_TRUE:
        return mrb_true_value();
    default:
        return mrb_false_value();
    }
}


/* ttl: nil (never) or seconds > 0, rounded up to ms. */
static uint64_t
shd_ttl_from(mrb_state *mrb, mrb_value ttl)
{
    double  sec;

    if (mrb_undef_p(ttl) || mrb_nil_p(ttl)) {
        return 0;
    }

    if (mrb_integer_p(ttl)) {
        sec = (double) mrb_integer(ttl);

    } else if (mrb_float_p(ttl)) {
        sec = mrb_float(ttl);

    } else {
        mrb_raisef(mrb, E_TYPE_ERROR, "ttl must be a number of seconds, "
                   "not %T", ttl);
        return 0;
    }

    if (!(sec > 0) || sec > SHD_TTL_MAX) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "ttl must be a positive number of "
                  "seconds");
    }

    return (uint64_t) ceil(sec * 1000);
}


/*
 * A dictionary nobody declared: a startup script of the parent or master
 * makes it with the default size (the access-limiter post's configuration declares
 * none), with a notice saying how to size it; elsewhere it is an error.
 */
static mrb_shdict_ref *
shd_open_default(mrb_state *mrb, mrb_value self, const char *name,
    mrb_int len)
{
    mrb_run_rec     *run = mrb_interp_run(mrb);
    mrb_shdict_ref  *ref = NULL;
    char             err[256];

    snprintf(err, sizeof(err), "not in a startup script");
    if (run != NULL && run->startup) {
        ref = mrb_shdict_open_default(name, (size_t) len, err, sizeof(err));
    }

    if (ref == NULL) {
        mrb_raisef(mrb, shd_class(mrb, self, "Error"),
                   "no shared dictionary named \"%v\": declare it with "
                   "mrubySharedDict (Apache) or mruby_shared_dict (nginx), "
                   "or open it first in a post_config / mruby_init script "
                   "(%s)", mrb_str_new(mrb, name, len), err);
    }

    mrb_interp_log(mrb_interp_from_state(mrb), MRB_LOG_NOTICE,
                   "shared dictionary \"%.*s\" was not declared: made with "
                   "the default size " MRB_SHDICT_DEFAULT_SIZE_TEXT "; size "
                   "it with mrubySharedDict %.*s <size> (Apache) or "
                   "mruby_shared_dict %.*s <size>; (nginx)", (int) len, name,
                   (int) len, name, (int) len, name);
    return ref;
}


static mrb_value
shd_initialize(mrb_state *mrb, mrb_value self)
{
    char            *name;
    mrb_int          len;
    mrb_value        arg;
    mrb_shdict_ref  *ref;

    shd_args(mrb, 1, 1, &arg, NULL, NULL, 0);
    name = RSTRING_PTR(arg);
    len = RSTRING_LEN(arg);

    ref = mrb_shdict_find(name, len);

    if (ref == NULL || mrb_shdict_ref_zone(ref) == NULL) {
        ref = shd_open_default(mrb, self, name, len);
    }

    mrb_data_init(self, ref, &shd_type);
    return self;
}


/*
 * SharedDict.__file(name, path, size): the store of Cache.new, in a file
 * (mrb_shdict_file.c): the namespace name when path is false, else the
 * file at name; made with size bytes when it is not there.
 */
static mrb_value
shd_s_file(mrb_state *mrb, mrb_value klass)
{
    char                 *name, err[MRB_ERR_MSG_LEN];
    mrb_int               len, size;
    mrb_bool              path;
    mrb_shdict_ref       *ref;
    mrb_shdict_file_rc    rc;

    mrb_get_args(mrb, "sbi", &name, &len, &path, &size);

    if (size < 0) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "a Cache store's size cannot be "
                  "negative");
    }

    rc = path ? mrb_shdict_file_open_path(name, (size_t) len, (size_t) size,
                                          &ref, err, sizeof(err))
              : mrb_shdict_file_open_namespace(name, (size_t) len,
                                               (size_t) size, &ref, err,
                                               sizeof(err));

    if (rc == MRB_SHDICT_FILE_BAD_ARGUMENT) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, err);
    }

    if (rc != MRB_SHDICT_FILE_OK) {
        mrb_raise(mrb, mrb_class_get_under(mrb, mrb_class_ptr(klass),
                                           "Error"), err);
    }

    return mrb_obj_value(mrb_data_object_alloc(mrb, mrb_class_ptr(klass),
                                               ref, &shd_type));
}


/* __usage => [total bytes, bytes in free pages] (Cache#shm_status) */
static mrb_value
shd_usage(mrb_state *mrb, mrb_value self)
{
    mrb_value          pair[2];
    mrb_shdict_stats   st;

    mrb_shdict_zone_stats(shd_zone(mrb, self), &st);
    pair[0] = mrb_int_value(mrb, (mrb_int) mrb_shdict_ref_size(
                                              shd_ref(mrb, self)));
    pair[1] = mrb_int_value(mrb, (mrb_int) (st.free_pages * st.page_size));
    return mrb_ary_new_from_values(mrb, 2, pair);
}


static mrb_value
shd_get(mrb_state *mrb, mrb_value self)
{
    char              *key, stack[1024], *buf;
    size_t             cap;
    mrb_int            klen;
    mrb_value          str, arg;
    mrb_shdict_rc      rc;
    mrb_shdict_zone   *z;
    mrb_shdict_value   v;

    shd_args(mrb, 1, 1, &arg, NULL, NULL, 0);
    key = RSTRING_PTR(arg);
    klen = RSTRING_LEN(arg);
    z = shd_zone(mrb, self);

    buf = stack;
    cap = sizeof(stack);
    str = mrb_nil_value();

    for ( ;; ) {
        rc = mrb_shdict_zone_get(z, key, klen, &v, buf, cap);

        if (rc != MRB_SHDICT_TRUNCATED) {
            break;
        }

        /* fetch again straight into a string of the length seen */
        str = mrb_str_new(mrb, NULL, v.len);
        buf = RSTRING_PTR(str);
        cap = v.len;
    }

    if (rc == MRB_SHDICT_NOT_FOUND) {
        return mrb_nil_value();
    }

    if (rc != MRB_SHDICT_OK) {
        shd_raise(mrb, self, rc);
    }

    if (v.type == MRB_SHDICT_STRING && buf != stack) {
        mrb_str_resize(mrb, str, v.len);
        return str;
    }

    return shd_value_to(mrb, &v);
}


static mrb_value
shd_delete(mrb_state *mrb, mrb_value self)
{
    mrb_value       arg;
    mrb_shdict_rc   rc;

    shd_args(mrb, 1, 1, &arg, NULL, NULL, 0);

    rc = mrb_shdict_zone_delete(shd_zone(mrb, self), RSTRING_PTR(arg),
                                RSTRING_LEN(arg));

    if (rc == MRB_SHDICT_NOT_FOUND) {
        return mrb_false_value();
    }

    if (rc != MRB_SHDICT_OK) {
        shd_raise(mrb, self, rc);
    }

    return mrb_true_value();
}


/* set, add and their safe_ forms: key, value, ttl: */
static mrb_shdict_rc
shd_store(mrb_state *mrb, mrb_value self, unsigned flags, mrb_value *val)
{
    char                      *key;
    mrb_int                    klen;
    mrb_value                  argv[2], kw_values[1];
    mrb_shdict_value           v;
    static const char *const   kw_names[] = { "ttl" };

    shd_args(mrb, 2, 2, argv, kw_names, kw_values, 1);
    key = RSTRING_PTR(argv[0]);
    klen = RSTRING_LEN(argv[0]);
    *val = argv[1];
    shd_check_key(mrb, klen);

    if (mrb_nil_p(*val)) {
        if (flags & MRB_SHDICT_ADD) {
            mrb_raise(mrb, E_ARGUMENT_ERROR, "cannot add nil");
        }

        return mrb_shdict_zone_delete(shd_zone(mrb, self), key, klen);
    }

    shd_value_from(mrb, *val, &v);

    return mrb_shdict_zone_set(shd_zone(mrb, self), key, klen, &v,
                               shd_ttl_from(mrb, kw_values[0]), flags);
}


static mrb_value
shd_set_with(mrb_state *mrb, mrb_value self, unsigned flags)
{
    mrb_value       val;
    mrb_shdict_rc   rc;

    rc = shd_store(mrb, self, flags, &val);

    if (rc != MRB_SHDICT_OK && rc != MRB_SHDICT_NOT_FOUND) {
        shd_raise(mrb, self, rc);
    }

    return val;
}


static mrb_value
shd_set(mrb_state *mrb, mrb_value self)
{
    return shd_set_with(mrb, self, 0);
}


static mrb_value
shd_safe_set(mrb_state *mrb, mrb_value self)
{
    return shd_set_with(mrb, self, MRB_SHDICT_NO_EVICT);
}


static mrb_value
shd_add(mrb_state *mrb, mrb_value self)
{
    mrb_value       val;
    mrb_shdict_rc   rc;

    rc = shd_store(mrb, self, MRB_SHDICT_ADD | MRB_SHDICT_NO_EVICT, &val);

    if (rc == MRB_SHDICT_EXISTS) {
        return mrb_false_value();
    }

    if (rc != MRB_SHDICT_OK) {
        shd_raise(mrb, self, rc);
    }

    return mrb_true_value();
}


static mrb_value
shd_incr(mrb_state *mrb, mrb_value self)
{
    char                      *key;
    mrb_int                    klen;
    mrb_value                  by, argv[2], kw_values[2];
    mrb_shdict_rc              rc;
    mrb_shdict_value           vby, vinit, out;
    static const char *const   kw_names[] = { "init", "ttl" };

    shd_args(mrb, 1, 2, argv, kw_names, kw_values, 2);
    key = RSTRING_PTR(argv[0]);
    klen = RSTRING_LEN(argv[0]);
    by = mrb_undef_p(argv[1]) ? mrb_fixnum_value(1) : argv[1];
    shd_check_key(mrb, klen);
    shd_number_from(mrb, by, &vby);

    if (!mrb_undef_p(kw_values[0]) && !mrb_nil_p(kw_values[0])) {
        shd_number_from(mrb, kw_values[0], &vinit);
    }

    rc = mrb_shdict_zone_incr(shd_zone(mrb, self), key, klen, &vby,
             (mrb_undef_p(kw_values[0]) || mrb_nil_p(kw_values[0]))
             ? NULL : &vinit,
             shd_ttl_from(mrb, kw_values[1]), &out);

    if (rc == MRB_SHDICT_NOT_FOUND) {
        return mrb_nil_value();
    }

    if (rc != MRB_SHDICT_OK) {
        shd_raise(mrb, self, rc);
    }

    return shd_value_to(mrb, &out);
}


static mrb_value
shd_ttl(mrb_state *mrb, mrb_value self)
{
    int64_t         ms;
    mrb_value       arg;
    mrb_shdict_rc   rc;

    shd_args(mrb, 1, 1, &arg, NULL, NULL, 0);

    rc = mrb_shdict_zone_ttl(shd_zone(mrb, self), RSTRING_PTR(arg),
                             RSTRING_LEN(arg), &ms);

    if (rc == MRB_SHDICT_NOT_FOUND) {
        return mrb_nil_value();
    }

    if (rc != MRB_SHDICT_OK) {
        shd_raise(mrb, self, rc);
    }

    if (ms < 0) {
        return mrb_fixnum_value(-1);
    }

    return mrb_float_value(mrb, (mrb_float) ms / 1000);
}


static mrb_value
shd_keys(mrb_state *mrb, mrb_value self)
{
    char              stack[4096], *buf, *p;
    size_t            cap, need, count, i;
    uint32_t          len;
    mrb_value         ary, tmp;
    mrb_shdict_rc     rc;
    mrb_shdict_zone  *z;

    z = shd_zone(mrb, self);
    buf = stack;
    cap = sizeof(stack);

    for ( ;; ) {
        rc = mrb_shdict_zone_keys(z, buf, cap, &need, &count);

        if (rc != MRB_SHDICT_TRUNCATED) {
            break;
        }

        /* room for some growth meanwhile; the string keeps it GC-owned */
        cap = need + need / 4;
        tmp = mrb_str_new(mrb, NULL, cap);
        buf = RSTRING_PTR(tmp);
    }

    if (rc != MRB_SHDICT_OK) {
        shd_raise(mrb, self, rc);
    }

    ary = mrb_ary_new_capa(mrb, count);
    p = buf;

    for (i = 0; i < count; i++) {
        memcpy(&len, p, 4);
        mrb_ary_push(mrb, ary, mrb_str_new(mrb, p + 4, len));
        p += 4 + len;
    }

    return ary;
}


static mrb_value
shd_size(mrb_state *mrb, mrb_value self)
{
    return mrb_int_value(mrb, mrb_shdict_zone_count(shd_zone(mrb, self)));
}


static mrb_value
shd_flush_all(mrb_state *mrb, mrb_value self)
{
    mrb_shdict_rc  rc;

    rc = mrb_shdict_zone_flush(shd_zone(mrb, self));

    if (rc != MRB_SHDICT_OK) {
        shd_raise(mrb, self, rc);
    }

    return mrb_nil_value();
}


/*
 * hold(key, n = 1) => the new total; release(key, n = 1) => the new total,
 * or nil if this process held none of key.  The access limiter calls
 * these on every request.
 */
static mrb_value
shd_held(mrb_state *mrb, mrb_value self, int hold)
{
    mrb_int          n;
    int64_t          total;
    mrb_value        key, argv[2];
    mrb_shdict_rc    rc;

    shd_args(mrb, 1, 2, argv, NULL, NULL, 0);
    key = argv[0];
    n = mrb_undef_p(argv[1]) ? 1 : mrb_as_int(mrb, argv[1]);
    shd_check_key(mrb, RSTRING_LEN(key));

    if (n <= 0) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "the count must be positive");
    }

    rc = hold ? mrb_shdict_zone_hold(shd_zone(mrb, self), RSTRING_PTR(key),
                                     RSTRING_LEN(key), n, &total)
              : mrb_shdict_zone_release(shd_zone(mrb, self), RSTRING_PTR(key),
                                        RSTRING_LEN(key), n, &total);

    if (rc == MRB_SHDICT_NOT_FOUND) {
        /* release: this process held none of it */
        return mrb_nil_value();
    }

    if (rc != MRB_SHDICT_OK) {
        shd_raise(mrb, self, rc);
    }

    return mrb_int_value(mrb, total);
}


static mrb_value
shd_hold(mrb_state *mrb, mrb_value self)
{
    return shd_held(mrb, self, 1);
}


static mrb_value
shd_release(mrb_state *mrb, mrb_value self)
{
    return shd_held(mrb, self, 0);
}


static mrb_value
shd_name(mrb_state *mrb, mrb_value self)
{
    return mrb_str_new_cstr(mrb, mrb_shdict_ref_name(shd_ref(mrb, self)));
}


static const mrb_api_method  shd_methods[] = {
    { "initialize", shd_initialize, MRB_ARGS_REQ(1) },
    { "get", shd_get, MRB_ARGS_REQ(1) },
    { "[]", shd_get, MRB_ARGS_REQ(1) },
    { "set", shd_set, MRB_ARGS_REQ(2) | MRB_ARGS_KEY(1, 0) },
    { "[]=", shd_set, MRB_ARGS_REQ(2) },
    { "safe_set", shd_safe_set, MRB_ARGS_REQ(2) | MRB_ARGS_KEY(1, 0) },
    { "add", shd_add, MRB_ARGS_REQ(2) | MRB_ARGS_KEY(1, 0) },
    { "safe_add", shd_add, MRB_ARGS_REQ(2) | MRB_ARGS_KEY(1, 0) },
    { "incr", shd_incr, MRB_ARGS_ARG(1, 1) | MRB_ARGS_KEY(2, 0) },
    { "delete", shd_delete, MRB_ARGS_REQ(1) },
    { "ttl", shd_ttl, MRB_ARGS_REQ(1) },
    { "keys", shd_keys, MRB_ARGS_NONE() },
    { "size", shd_size, MRB_ARGS_NONE() },
    { "flush_all", shd_flush_all, MRB_ARGS_NONE() },
    { "hold", shd_hold, MRB_ARGS_ARG(1, 1) },
    { "release", shd_release, MRB_ARGS_ARG(1, 1) },
    { "name", shd_name, MRB_ARGS_NONE() },
    { "__usage", shd_usage, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


static const mrb_api_method  shd_class_methods[] = {
    { "__file", shd_s_file, MRB_ARGS_REQ(3) },
    MRB_API_METHOD_END
};


void
mrb_shdict_define(mrb_state *mrb, struct RClass *server_class)
{
    struct RClass  *c, *error;

    c = mrb_api_define_class(mrb, server_class, "SharedDict", NULL,
                             shd_methods);
    MRB_SET_INSTANCE_TT(c, MRB_TT_DATA);
    mrb_api_define_class_methods(mrb, c, shd_class_methods);
    mrb_api_define_new(mrb, c, shd_initialize);

    error = mrb_api_define_class(mrb, c, "Error", mrb->eStandardError_class,
                                 NULL);
    mrb_api_define_class(mrb, c, "FullError", error, NULL);
}
