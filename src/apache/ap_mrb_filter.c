/*
 * The "mruby" output and input filters (SetOutputFilter / SetInputFilter
 * mruby) and Apache::Filter, the body they let a script read and rewrite.
 *
 * A filter collects the whole body (response or request), runs its script
 * once with it, and passes on what the script left.  One run per body,
 * whatever the number of brigades it came in, so a script always sees
 * complete content; the price is that the body is held in memory.
 */

#include <http_core.h>
#include <http_protocol.h>
#include <http_request.h>

#include <mruby.h>
#include <mruby/string.h>

#include "ap_mrb.h"

APLOG_USE_MODULE(mruby);

typedef struct {
    ap_mrb_run_kind      kind;      /* first: what run->data points to */
    request_rec         *r;
    apr_bucket_brigade  *body;      /* the collected body, then the new one */
    apr_bucket_brigade  *meta;      /* metadata buckets met while collecting */
    apr_off_t            len;       /* bytes collected */
    int                  error;     /* error_create's status, or 0 */
    unsigned             ran:1;     /* the script has run */
    unsigned             changed:1; /* the script changed the body */
    unsigned             too_large:1; /* past mrubyRequestBodyLimit */
    unsigned             dropping:1;  /* answered 500: the rest goes */
} ap_mrb_filter_ctx;


static ap_mrb_filter_ctx *
ap_mrb_filter_ctx_new(request_rec *r, ap_mrb_run_kind kind)
{
    ap_mrb_filter_ctx  *ctx = apr_pcalloc(r->pool, sizeof(ap_mrb_filter_ctx));

    ctx->kind = kind;
    ctx->r = r;
    ctx->body = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    ctx->meta = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    return ctx;
}


/*
 * Moves the data of bb into ctx->body (copied: bb's buckets may be
 * transient) and its metadata into ctx->meta; flushes are dropped, as
 * nothing can go out before the script has run.  Stops once more than
 * limit bytes (when limit > 0) are held: one brigade may carry a whole
 * file, read here piece by piece.  Returns 1 at EOS.
 */
static int
ap_mrb_filter_collect(ap_mrb_filter_ctx *ctx, apr_bucket_brigade *bb,
    apr_off_t limit, apr_status_t *rv)
{
    apr_bucket  *e;
    const char  *data;
    apr_size_t   len;

    *rv = APR_SUCCESS;

    while (!APR_BRIGADE_EMPTY(bb)) {
        e = APR_BRIGADE_FIRST(bb);

        if (APR_BUCKET_IS_EOS(e)) {
            apr_bucket_delete(e);
            return 1;
        }

        if (APR_BUCKET_IS_FLUSH(e)) {
            apr_bucket_delete(e);
            continue;
        }

        if (APR_BUCKET_IS_METADATA(e)) {
            APR_BUCKET_REMOVE(e);
            APR_BRIGADE_INSERT_TAIL(ctx->meta, e);
            continue;
        }

        *rv = apr_bucket_read(e, &data, &len, APR_BLOCK_READ);
        if (*rv != APR_SUCCESS) {
            return 0;
        }

        *rv = apr_brigade_write(ctx->body, NULL, NULL, data, len);
        if (*rv != APR_SUCCESS) {
            return 0;
        }

        ctx->len += len;

        apr_bucket_delete(e);

        if (limit > 0 && ctx->len > limit) {
            return 0;
        }
    }

    return 0;
}


/* Runs the filter's script over the collected body; an HTTP status on
 * failure, or OK. */
static int
ap_mrb_filter_run(ap_mrb_filter_ctx *ctx, mrb_script *script,
    const char *phase, const char *what)
{
    int  rc;

    ctx->ran = 1;

    rc = ap_mrb_run_script(ctx->r, script, ctx, OK, phase, what);
    return rc >= 400 ? rc : OK;
}


/*
 * A response past mrubyOutputFilterLimit: rather than hold it whole, the
 * filter answers 500 in its place (nothing has gone out yet: the header
 * waits for the body) and drops the rest as it comes.
 */
static apr_status_t
ap_mrb_output_too_large(ap_filter_t *f, ap_mrb_filter_ctx *ctx,
    apr_bucket_brigade *bb, apr_off_t limit)
{
    apr_bucket  *e;

    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, f->r, "mrubyOutputFilter: the "
                  "response body is larger than mrubyOutputFilterLimit (%"
                  APR_OFF_T_FMT " bytes): answered 500 instead", limit);

    ctx->dropping = 1;
    apr_brigade_cleanup(ctx->body);
    apr_brigade_cleanup(ctx->meta);
    apr_brigade_cleanup(bb);

    e = ap_bucket_error_create(HTTP_INTERNAL_SERVER_ERROR, NULL, f->r->pool,
                               f->c->bucket_alloc);
    APR_BRIGADE_INSERT_TAIL(ctx->body, e);
    e = apr_bucket_eos_create(f->c->bucket_alloc);
    APR_BRIGADE_INSERT_TAIL(ctx->body, e);

    return ap_pass_brigade(f->next, ctx->body);
}


static apr_status_t
ap_mrb_output_filter(ap_filter_t *f, apr_bucket_brigade *bb)
{
    request_rec        *r = f->r;
    ap_mrb_filter_ctx  *ctx = f->ctx;
    ap_mrb_dir_conf    *dconf;
    apr_bucket         *e;
    apr_off_t           len, limit;
    apr_status_t        rv;
    int                 rc, eos;

    if (ctx == NULL) {
        dconf = ap_get_module_config(r->per_dir_config, &mruby_module);

        if (dconf->output_filter == NULL) {
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "output filter "
                          AP_MRB_FILTER_NAME " without mrubyOutputFilter "
                          "here: passing the response unchanged");
            ap_remove_output_filter(f);
            return ap_pass_brigade(f->next, bb);
        }

        f->ctx = ctx = ap_mrb_filter_ctx_new(r, AP_MRB_RUN_OUTPUT_FILTER);
    }

    if (ctx->dropping) {
        apr_brigade_cleanup(bb);
        return APR_SUCCESS;
    }

    if (ctx->ran) {
        return ap_pass_brigade(f->next, bb);
    }

    limit = ap_mrb_filter_limit(r);
    eos = ap_mrb_filter_collect(ctx, bb, limit, &rv);
    if (rv != APR_SUCCESS) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, rv, r, "mrubyOutputFilter: "
                      "cannot read the response body");
        return rv;
    }

    if (limit > 0 && ctx->len > limit) {
        return ap_mrb_output_too_large(f, ctx, bb, limit);
    }

    if (!eos) {
        return APR_SUCCESS;
    }

    dconf = ap_get_module_config(r->per_dir_config, &mruby_module);
    rc = ap_mrb_filter_run(ctx, dconf->output_filter, "output_filter",
                           "mrubyOutputFilter");
    if (rc == OK && ctx->error != 0) {
        rc = ctx->error;
    }

    APR_BRIGADE_PREPEND(ctx->body, ctx->meta);

    if (rc != OK) {
        apr_brigade_cleanup(ctx->body);
        e = ap_bucket_error_create(rc, NULL, r->pool,
                                   r->connection->bucket_alloc);
        APR_BRIGADE_INSERT_TAIL(ctx->body, e);

    } else if (ctx->changed) {
        /* the length and validators were those of the old body */
        apr_brigade_length(ctx->body, 1, &len);
        ap_set_content_length(r, len);
        apr_table_unset(r->headers_out, "ETag");
        apr_table_unset(r->headers_out, "Last-Modified");
    }

    e = apr_bucket_eos_create(r->connection->bucket_alloc);
    APR_BRIGADE_INSERT_TAIL(ctx->body, e);

    /* whatever followed EOS in bb */
    APR_BRIGADE_CONCAT(ctx->body, bb);

    return ap_pass_brigade(f->next, ctx->body);
}


/*
 * Reads the whole request body from the filters below into ctx; past
 * mrubyRequestBodyLimit APR_ENOSPC, which whoever reads the body answers
 * with 413 (as Apache's own LimitRequestBody does).
 */
static apr_status_t
ap_mrb_input_collect(ap_filter_t *f, ap_mrb_filter_ctx *ctx)
{
    apr_bucket_brigade  *tmp;
    apr_status_t         rv;
    apr_off_t            limit;
    int                  eos = 0;

    tmp = apr_brigade_create(f->r->pool, f->c->bucket_alloc);
    limit = ap_mrb_body_limit(f->r);

    while (!eos) {
        rv = ap_get_brigade(f->next, tmp, AP_MODE_READBYTES, APR_BLOCK_READ,
                            HUGE_STRING_LEN);
        if (rv != APR_SUCCESS) {
            apr_brigade_destroy(tmp);
            return rv;
        }

        eos = ap_mrb_filter_collect(ctx, tmp, limit, &rv);
        if (rv != APR_SUCCESS) {
            apr_brigade_destroy(tmp);
            return rv;
        }

        if (limit > 0 && ctx->len > limit) {
            ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, f->r, "mrubyInputFilter: "
                          "the request body is larger than "
                          "mrubyRequestBodyLimit (%" APR_OFF_T_FMT ")", limit);
            apr_brigade_destroy(tmp);
            apr_brigade_cleanup(ctx->body);
            ctx->too_large = 1;
            return APR_ENOSPC;
        }
    }

    apr_brigade_destroy(tmp);
    apr_brigade_cleanup(ctx->meta);
    return APR_SUCCESS;
}


/*
 * On the first read, reads the whole body, runs the script, and from then
 * on hands out the script's body in pieces of at most readbytes.  Modes
 * other than READBYTES (a line, a peek) are not body reads to transform.
 */
static apr_status_t
ap_mrb_input_filter(ap_filter_t *f, apr_bucket_brigade *bb,
    ap_input_mode_t mode, apr_read_type_e block, apr_off_t readbytes)
{
    request_rec        *r = f->r;
    ap_mrb_filter_ctx  *ctx = f->ctx;
    ap_mrb_dir_conf    *dconf;
    apr_bucket         *e, *after;
    apr_off_t           len;
    apr_status_t        rv;

    if (mode != AP_MODE_READBYTES) {
        return ap_get_brigade(f->next, bb, mode, block, readbytes);
    }

    if (ctx == NULL) {
        dconf = ap_get_module_config(r->per_dir_config, &mruby_module);

        if (dconf->input_filter == NULL) {
            ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "input filter "
                          AP_MRB_FILTER_NAME " without mrubyInputFilter "
                          "here: passing the request body unchanged");
            ap_remove_input_filter(f);
            return ap_get_brigade(f->next, bb, mode, block, readbytes);
        }

        f->ctx = ctx = ap_mrb_filter_ctx_new(r, AP_MRB_RUN_INPUT_FILTER);
    }

    if (ctx->too_large) {
        return APR_ENOSPC;
    }

    if (!ctx->ran) {
        rv = ap_mrb_input_collect(f, ctx);
        if (rv != APR_SUCCESS) {
            return rv;
        }

        dconf = ap_get_module_config(r->per_dir_config, &mruby_module);
        if (ap_mrb_filter_run(ctx, dconf->input_filter, "input_filter",
                              "mrubyInputFilter")
            != OK)
        {
            return APR_EGENERAL;
        }

        if (ctx->changed) {
            apr_brigade_length(ctx->body, 1, &len);
            apr_table_setn(r->headers_in, "Content-Length",
                           apr_off_t_toa(r->pool, len));
        }

        e = apr_bucket_eos_create(f->c->bucket_alloc);
        APR_BRIGADE_INSERT_TAIL(ctx->body, e);
    }

    if (APR_BRIGADE_EMPTY(ctx->body)) {
        e = apr_bucket_eos_create(f->c->bucket_alloc);
        APR_BRIGADE_INSERT_TAIL(bb, e);
        return APR_SUCCESS;
    }

    rv = apr_brigade_partition(ctx->body, readbytes, &after);
    if (rv != APR_SUCCESS && rv != APR_INCOMPLETE) {
        return rv;
    }

    while ((e = APR_BRIGADE_FIRST(ctx->body)) != after
           && e != APR_BRIGADE_SENTINEL(ctx->body))
    {
        APR_BUCKET_REMOVE(e);
        APR_BRIGADE_INSERT_TAIL(bb, e);
    }

    return APR_SUCCESS;
}


/*
 * Called before the handler: the script may make a different body each
 * time, so the handler must not answer a conditional request with 304 by
 * the validators of what it serves (mod_include does the same).
 */
static int
ap_mrb_output_filter_init(ap_filter_t *f)
{
    f->r->no_local_copy = 1;
    return OK;
}


void
ap_mrb_register_filters(void)
{
    ap_register_output_filter(AP_MRB_FILTER_NAME, ap_mrb_output_filter,
                              ap_mrb_output_filter_init, AP_FTYPE_RESOURCE);
    ap_register_input_filter(AP_MRB_FILTER_NAME, ap_mrb_input_filter, NULL,
                             AP_FTYPE_RESOURCE);
}


/* Server.rputs / echo in a filter script add to the body. */
int
ap_mrb_filter_write(void *data, const char *buf, size_t len)
{
    ap_mrb_filter_ctx  *ctx = data;

    ctx->changed = 1;
    return apr_brigade_write(ctx->body, NULL, NULL, buf, len)
           == APR_SUCCESS ? 0 : -1;
}


/* Apache::Filter: the body of the filter run in progress. */

static ap_mrb_filter_ctx *
ap_mrb_filter_of(mrb_state *mrb)
{
    mrb_run_rec            *run = mrb_interp_run(mrb);
    const ap_mrb_run_kind  *k = run ? run->data : NULL;

    if (k == NULL || (*k != AP_MRB_RUN_OUTPUT_FILTER
                      && *k != AP_MRB_RUN_INPUT_FILTER))
    {
        mrb_raise(mrb, E_RUNTIME_ERROR, "Apache::Filter is only available "
                  "in an mrubyOutputFilter or mrubyInputFilter script");
    }

    return run->data;
}


static mrb_value
ap_mrb_filter_body(mrb_state *mrb, mrb_value self)
{
    ap_mrb_filter_ctx  *ctx = ap_mrb_filter_of(mrb);
    apr_off_t           len;
    mrb_value           s;
    apr_size_t          n;

    apr_brigade_length(ctx->body, 1, &len);
    s = mrb_str_new(mrb, NULL, (size_t) len);
    n = (apr_size_t) len;

    if (apr_brigade_flatten(ctx->body, RSTRING_PTR(s), &n) != APR_SUCCESS) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "cannot read the filter's body");
    }

    return s;
}


static mrb_value
ap_mrb_filter_set_body(mrb_state *mrb, mrb_value self)
{
    ap_mrb_filter_ctx  *ctx = ap_mrb_filter_of(mrb);
    mrb_value           s;

    s = mrb_obj_as_string(mrb, mrb_get_arg1(mrb));
    apr_brigade_cleanup(ctx->body);
    ap_mrb_filter_write(ctx, RSTRING_PTR(s), (size_t) RSTRING_LEN(s));
    return s;
}


static mrb_value
ap_mrb_filter_puts(mrb_state *mrb, mrb_value self)
{
    ap_mrb_filter_ctx  *ctx = ap_mrb_filter_of(mrb);
    mrb_value           s;

    s = mrb_obj_as_string(mrb, mrb_get_arg1(mrb));
    if (ap_mrb_filter_write(ctx, RSTRING_PTR(s), (size_t) RSTRING_LEN(s))
        != 0)
    {
        mrb_raise(mrb, E_RUNTIME_ERROR, "out of memory");
    }
    return self;
}


static mrb_value
ap_mrb_filter_insert_head(mrb_state *mrb, mrb_value self)
{
    ap_mrb_filter_ctx  *ctx = ap_mrb_filter_of(mrb);
    mrb_value           s;
    apr_bucket         *e;

    s = mrb_obj_as_string(mrb, mrb_get_arg1(mrb));
    e = apr_bucket_heap_create(RSTRING_PTR(s), (apr_size_t) RSTRING_LEN(s),
                               NULL, ctx->r->connection->bucket_alloc);
    APR_BRIGADE_INSERT_HEAD(ctx->body, e);
    ctx->changed = 1;
    return self;
}


static mrb_value
ap_mrb_filter_cleanup(mrb_state *mrb, mrb_value self)
{
    ap_mrb_filter_ctx  *ctx = ap_mrb_filter_of(mrb);

    apr_brigade_cleanup(ctx->body);
    ctx->changed = 1;
    return self;
}


static mrb_value
ap_mrb_filter_length(mrb_state *mrb, mrb_value self)
{
    ap_mrb_filter_ctx  *ctx = ap_mrb_filter_of(mrb);
    apr_off_t           len;

    apr_brigade_length(ctx->body, 1, &len);
    return mrb_int_value(mrb, (mrb_int) len);
}


static mrb_value
ap_mrb_filter_is_empty(mrb_state *mrb, mrb_value self)
{
    ap_mrb_filter_ctx  *ctx = ap_mrb_filter_of(mrb);
    apr_off_t           len;

    apr_brigade_length(ctx->body, 1, &len);
    return mrb_bool_value(len == 0);
}


/* The filter sends the end of the body itself once the script ran: the
 * original's insert_eos has nothing left to do. */
static mrb_value
ap_mrb_filter_insert_eos(mrb_state *mrb, mrb_value self)
{
    (void) ap_mrb_filter_of(mrb);
    return self;
}


/* The owner of the file being sent (the request's file), or nil when the
 * response is not a file's. */
static mrb_value
ap_mrb_filter_owner(mrb_state *mrb, int gid)
{
    request_rec  *r = ap_mrb_filter_of(mrb)->r;

    if (r->finfo.filetype != APR_REG) {
        return mrb_nil_value();
    }

    return mrb_int_value(mrb, gid ? (mrb_int) r->finfo.group
                                  : (mrb_int) r->finfo.user);
}


static mrb_value
ap_mrb_filter_uid(mrb_state *mrb, mrb_value self)
{
    return ap_mrb_filter_owner(mrb, 0);
}


static mrb_value
ap_mrb_filter_gid(mrb_state *mrb, mrb_value self)
{
    return ap_mrb_filter_owner(mrb, 1);
}


/* error_create(status): the response becomes Apache's error response for
 * status instead of the body (an output filter only). */
static mrb_value
ap_mrb_filter_error_create(mrb_state *mrb, mrb_value self)
{
    ap_mrb_filter_ctx  *ctx = ap_mrb_filter_of(mrb);
    mrb_int             status;

    mrb_get_args(mrb, "i", &status);

    if (ctx->kind != AP_MRB_RUN_OUTPUT_FILTER) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "error_create: only in an "
                  "mrubyOutputFilter script");
    }

    if (status < 400 || status > 599) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "error_create: an error status "
                  "(400-599)");
    }

    ctx->error = (int) status;
    return self;
}


static mrb_value
ap_mrb_filter_is_output(mrb_state *mrb, mrb_value self)
{
    return mrb_bool_value(ap_mrb_filter_of(mrb)->kind
                          == AP_MRB_RUN_OUTPUT_FILTER);
}


static const mrb_api_method  ap_mrb_filter_methods[] = {
    { "body", ap_mrb_filter_body, MRB_ARGS_NONE() },
    { "flatten", ap_mrb_filter_body, MRB_ARGS_NONE() },
    { "body=", ap_mrb_filter_set_body, MRB_ARGS_REQ(1) },
    { "puts", ap_mrb_filter_puts, MRB_ARGS_REQ(1) },
    { "insert_tail", ap_mrb_filter_puts, MRB_ARGS_REQ(1) },
    { "insert_head", ap_mrb_filter_insert_head, MRB_ARGS_REQ(1) },
    { "cleanup", ap_mrb_filter_cleanup, MRB_ARGS_NONE() },
    { "destroy", ap_mrb_filter_cleanup, MRB_ARGS_NONE() },
    { "insert_eos", ap_mrb_filter_insert_eos, MRB_ARGS_NONE() },
    { "uid", ap_mrb_filter_uid, MRB_ARGS_NONE() },
    { "gid", ap_mrb_filter_gid, MRB_ARGS_NONE() },
    { "error_create", ap_mrb_filter_error_create, MRB_ARGS_REQ(1) },
    { "length", ap_mrb_filter_length, MRB_ARGS_NONE() },
    { "size", ap_mrb_filter_length, MRB_ARGS_NONE() },
    { "empty?", ap_mrb_filter_is_empty, MRB_ARGS_NONE() },
    { "output?", ap_mrb_filter_is_output, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


void
ap_mrb_define_filter(mrb_state *mrb, struct RClass *apache)
{
    mrb_api_define_class(mrb, apache, "Filter", NULL, ap_mrb_filter_methods);
}
