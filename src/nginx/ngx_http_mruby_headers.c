/*
 * Nginx::Headers_in and Nginx::Headers_out: [], []=, delete, all.
 *
 * nginx keeps some headers twice, in the list and as a pointer in
 * r->headers_in / r->headers_out (or, for the response's type and length,
 * only as fields): both are kept in step here so that what a script sets
 * is what nginx sends or forwards.
 *
 * Since nginx 1.23.0 each such pointer is the head of a list, through
 * ngx_table_elt_t's next, of every header of that name (Cookie and
 * X-Forwarded-For included, which were arrays of pointers before); before,
 * it kept the first.  NGX_HTTP_MRUBY_HEADER_LISTS is the newer scheme.
 */

#include "ngx_http_mruby_module.h"

#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/hash.h>
#include <mruby/string.h>

#if (nginx_version >= 1023000)
#define NGX_HTTP_MRUBY_HEADER_LISTS  1
#endif


typedef struct {
    ngx_str_t    name;        /* lower case */
    ngx_uint_t   offset;
} ngx_http_mruby_header_field_t;


#define ngx_http_mruby_in(name, field)                                        \
    { ngx_string(name), offsetof(ngx_http_headers_in_t, field) }
#define ngx_http_mruby_out(name, field)                                       \
    { ngx_string(name), offsetof(ngx_http_headers_out_t, field) }


/* The ngx_table_elt_t pointers of r->headers_in. */
static ngx_http_mruby_header_field_t  ngx_http_mruby_headers_in_fields[] = {
    ngx_http_mruby_in("host", host),
    ngx_http_mruby_in("connection", connection),
    ngx_http_mruby_in("if-modified-since", if_modified_since),
    ngx_http_mruby_in("if-unmodified-since", if_unmodified_since),
    ngx_http_mruby_in("if-match", if_match),
    ngx_http_mruby_in("if-none-match", if_none_match),
    ngx_http_mruby_in("user-agent", user_agent),
    ngx_http_mruby_in("referer", referer),
    ngx_http_mruby_in("content-length", content_length),
    ngx_http_mruby_in("content-range", content_range),
    ngx_http_mruby_in("content-type", content_type),
    ngx_http_mruby_in("range", range),
    ngx_http_mruby_in("if-range", if_range),
    ngx_http_mruby_in("transfer-encoding", transfer_encoding),
    ngx_http_mruby_in("te", te),
    ngx_http_mruby_in("expect", expect),
    ngx_http_mruby_in("upgrade", upgrade),
#if (NGX_HTTP_GZIP || NGX_HTTP_HEADERS)
    ngx_http_mruby_in("accept-encoding", accept_encoding),
    ngx_http_mruby_in("via", via),
#endif
    ngx_http_mruby_in("authorization", authorization),
    ngx_http_mruby_in("keep-alive", keep_alive),
#if (NGX_HTTP_REALIP)
    ngx_http_mruby_in("x-real-ip", x_real_ip),
#endif
#if (NGX_HTTP_HEADERS)
    ngx_http_mruby_in("accept", accept),
    ngx_http_mruby_in("accept-language", accept_language),
#endif
#if (NGX_HTTP_DAV)
    ngx_http_mruby_in("depth", depth),
    ngx_http_mruby_in("destination", destination),
    ngx_http_mruby_in("overwrite", overwrite),
    ngx_http_mruby_in("date", date),
#endif
#if (NGX_HTTP_MRUBY_HEADER_LISTS)
#if (NGX_HTTP_X_FORWARDED_FOR)
    ngx_http_mruby_in("x-forwarded-for", x_forwarded_for),
#endif
    ngx_http_mruby_in("cookie", cookie),
#endif
};

#if !(NGX_HTTP_MRUBY_HEADER_LISTS)
/* The arrays of ngx_table_elt_t pointers of r->headers_in. */
static ngx_http_mruby_header_field_t  ngx_http_mruby_headers_in_arrays[] = {
#if (NGX_HTTP_X_FORWARDED_FOR)
    ngx_http_mruby_in("x-forwarded-for", x_forwarded_for),
#endif
    ngx_http_mruby_in("cookie", cookies),
};
#endif

/* The ngx_table_elt_t pointers of r->headers_out. */
static ngx_http_mruby_header_field_t  ngx_http_mruby_headers_out_fields[] = {
    ngx_http_mruby_out("server", server),
    ngx_http_mruby_out("date", date),
    ngx_http_mruby_out("content-length", content_length),
    ngx_http_mruby_out("content-encoding", content_encoding),
    ngx_http_mruby_out("location", location),
    ngx_http_mruby_out("refresh", refresh),
    ngx_http_mruby_out("last-modified", last_modified),
    ngx_http_mruby_out("content-range", content_range),
    ngx_http_mruby_out("accept-ranges", accept_ranges),
    ngx_http_mruby_out("www-authenticate", www_authenticate),
    ngx_http_mruby_out("expires", expires),
    ngx_http_mruby_out("etag", etag),
};


#define ngx_http_mruby_nelts(a)  (sizeof(a) / sizeof(a[0]))

#define ngx_http_mruby_key_is(key, lit)                                       \
    ((key)->len == sizeof(lit) - 1                                            \
     && ngx_strncasecmp((key)->data, (u_char *) lit, sizeof(lit) - 1) == 0)

/* The pointer that r->headers_in or r->headers_out keeps for key, or NULL. */
#define ngx_http_mruby_header_ptr(headers, fields, key)                       \
    ngx_http_mruby_header_field(headers, fields, ngx_http_mruby_nelts(fields),\
                                key)


typedef ngx_int_t (*ngx_http_mruby_header_set_pt)(ngx_http_request_t *r,
    ngx_str_t *key, ngx_str_t *value);


/* Header names are not case-sensitive. */
static ngx_uint_t
ngx_http_mruby_header_is(ngx_str_t *name, ngx_str_t *key)
{
    return name->len == key->len
           && ngx_strncasecmp(name->data, key->data, key->len) == 0;
}


static void *
ngx_http_mruby_header_field(void *headers,
    ngx_http_mruby_header_field_t *fields, ngx_uint_t n, ngx_str_t *key)
{
    ngx_uint_t  i;

    for (i = 0; i < n; i++) {
        if (ngx_http_mruby_header_is(&fields[i].name, key)) {
            return (char *) headers + fields[i].offset;
        }
    }

    return NULL;
}


/*
 * Element *i of a list, where *i counts from the start of *part: moves on
 * to the part it is in, or returns NULL at the end of the list.
 */
static ngx_table_elt_t *
ngx_http_mruby_header_at(ngx_list_part_t **part, ngx_uint_t *i)
{
    while (*i >= (*part)->nelts) {
        if ((*part)->next == NULL) {
            return NULL;
        }

        *part = (*part)->next;
        *i = 0;
    }

    return (ngx_table_elt_t *) (*part)->elts + *i;
}


/* The first live header named key (any case) in list, or NULL. */
static ngx_table_elt_t *
ngx_http_mruby_header_find(ngx_list_t *list, ngx_str_t *key)
{
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    part = &list->part;

    for (i = 0; (h = ngx_http_mruby_header_at(&part, &i)) != NULL; i++) {
        if (h->hash != 0 && ngx_http_mruby_header_is(&h->key, key)) {
            return h;
        }
    }

    return NULL;
}


/*
 * A new header at the end of list, live (hash 1, as nginx marks the
 * response headers it makes); a request header gets its name's hash
 * from ngx_http_mruby_header_in_push: ngx_hash_strlow, for a hash nginx
 * never reads in a response header, cost 150 instructions a name there,
 * ngx_strlow 100 (bench/callgrind_lib.py typical-nginx-mruby,
 * 2026-11-27).
 */
static ngx_table_elt_t *
ngx_http_mruby_header_push(ngx_http_request_t *r, ngx_list_t *list,
    ngx_str_t *key, ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(list);
    if (h == NULL) {
        return NULL;
    }

    h->key.data = ngx_pnalloc(r->pool, key->len);
    h->lowcase_key = ngx_pnalloc(r->pool, key->len);

    if (h->key.data == NULL || h->lowcase_key == NULL) {
        return NULL;
    }

    h->key.len = key->len;
    ngx_memcpy(h->key.data, key->data, key->len);
    ngx_strlow(h->lowcase_key, key->data, key->len);

    h->hash = 1;
    h->value = *value;
#if (NGX_HTTP_MRUBY_HEADER_LISTS)
    h->next = NULL;
#endif

    return h;
}


/* A new request header: its hash is what other modules look its name up
 * by (proxy_set_header's hidden headers). */
static ngx_table_elt_t *
ngx_http_mruby_header_in_push(ngx_http_request_t *r, ngx_str_t *key,
    ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_http_mruby_header_push(r, &r->headers_in.headers, key, value);
    if (h != NULL) {
        h->hash = ngx_hash_key(h->lowcase_key, h->key.len);
    }

    return h;
}


/* h, a new header, into the pointer *p nginx keeps for its name: at the
 * end of the list there, or (before the lists) there if it is empty. */
static void
ngx_http_mruby_header_link(ngx_table_elt_t **p, ngx_table_elt_t *h)
{
#if (NGX_HTTP_MRUBY_HEADER_LISTS)
    while (*p != NULL) {
        p = &(*p)->next;
    }
#else
    if (*p != NULL) {
        return;
    }
#endif

    *p = h;
}


/*
 * The name argument of [] and delete, where it lies: it is only compared,
 * and the VM's stack keeps the String for the call.
 */
static void
ngx_http_mruby_header_name_arg(mrb_state *mrb, ngx_str_t *key)
{
    mrb_value  k;

    (void) mrb_api_argc(mrb, 1, 1);
    k = mrb_ensure_string_type(mrb, mrb_get_argv(mrb)[0]);

    if (RSTRING_LEN(k) == 0) {
        mrb_raise(mrb, E_ARGUMENT_ERROR, "empty header name");
    }

    key->data = (u_char *) RSTRING_PTR(k);
    key->len = (size_t) RSTRING_LEN(k);
}


/*
 * key in lower case into buf (NGX_HTTP_MRUBY_LOWCASE_LEN bytes), to be
 * compared with the lowcase_key nginx keeps of every request header,
 * byte for byte; NULL for a longer key, compared as it is.
 */
#define NGX_HTTP_MRUBY_LOWCASE_LEN  64

static u_char *
ngx_http_mruby_header_lowcase(ngx_str_t *key, u_char *buf)
{
    if (key->len > NGX_HTTP_MRUBY_LOWCASE_LEN) {
        return NULL;
    }

    ngx_strlow(buf, key->data, key->len);

    return buf;
}


/*
 * The value of [] for the live headers named key in list: nil, a String,
 * or, when the header is repeated, an Array of its values in order (as
 * the original gave them).  lowcase: key in lower case, for a list whose
 * headers have their lowcase_key (the request's), or NULL.
 */
static mrb_value
ngx_http_mruby_header_values(mrb_state *mrb, ngx_list_t *list,
    ngx_str_t *key, u_char *lowcase)
{
    mrb_value         first, all;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    first = mrb_nil_value();
    all = mrb_nil_value();
    part = &list->part;

    for (i = 0; (h = ngx_http_mruby_header_at(&part, &i)) != NULL; i++) {
        if (h->hash == 0 || h->key.len != key->len) {
            continue;
        }

        if (lowcase != NULL && h->lowcase_key != NULL
            ? ngx_memcmp(h->lowcase_key, lowcase, key->len) != 0
            : ngx_strncasecmp(h->key.data, key->data, key->len) != 0)
        {
            continue;
        }

        if (mrb_nil_p(first)) {
            first = ngx_http_mruby_str(mrb, &h->value);
            continue;
        }

        if (mrb_nil_p(all)) {
            all = mrb_ary_new_from_values(mrb, 1, &first);
        }

        mrb_ary_push(mrb, all, ngx_http_mruby_str(mrb, &h->value));
    }

    return mrb_nil_p(all) ? first : all;
}


/*
 * Name and value through the wire check and into the pool (a NULL value
 * data, from nil, deletes), before anything else runs.
 */
static void
ngx_http_mruby_header_checked(mrb_state *mrb, ngx_http_request_t *r,
    mrb_value k, mrb_value v, ngx_str_t *key, ngx_str_t *value)
{
    mrb_http_str  name, val;

    mrb_http_check_header(mrb, k, v, &name, &val);
    ngx_http_mruby_copy_checked(mrb, r, &name, key, "[]=");

    value->data = NULL;
    value->len = 0;
    if (val.data != NULL) {
        ngx_http_mruby_copy_checked(mrb, r, &val, value, "[]=");
    }
}


/* Raises for what set answered: NGX_DECLINED an invalid Content-Length. */
static void
ngx_http_mruby_header_stored(mrb_state *mrb, ngx_int_t rc, ngx_str_t *value)
{
    if (rc == NGX_DECLINED) {
        mrb_raisef(mrb, E_ARGUMENT_ERROR, "invalid Content-Length: %v",
                   ngx_http_mruby_str(mrb, value));
    }

    if (rc != NGX_OK) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "out of memory");
    }
}


/*
 * headers[key] = value with set; an Array value replaces every header of
 * that name with one per element (nil elements skipped), through add.
 * Every element is checked and copied before the old values go, so that
 * a bad one raises as it would alone and leaves the header as it was;
 * valid (or NULL) is what set would decline.
 */
static mrb_value
ngx_http_mruby_headers_assign(mrb_state *mrb,
    ngx_http_mruby_header_set_pt set, ngx_http_mruby_header_set_pt add,
    ngx_http_mruby_header_set_pt valid)
{
    mrb_int              i, n, m;
    mrb_value            k, v, e;
    ngx_str_t            key, value, *values;
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    (void) mrb_api_argc(mrb, 2, 2);
    k = mrb_get_argv(mrb)[0];
    v = mrb_get_argv(mrb)[1];

    if (!mrb_array_p(v)) {
        ngx_http_mruby_header_checked(mrb, r, k, v, &key, &value);
        ngx_http_mruby_header_stored(mrb,
            set(r, &key, value.data != NULL ? &value : NULL), &value);
        return v;
    }

    ngx_http_mruby_header_checked(mrb, r, k, mrb_nil_value(), &key, &value);

    /* a to_s may change the array: at most the elements it had */
    n = RARRAY_LEN(v);
    values = ngx_palloc(r->pool, (n ? n : 1) * sizeof(ngx_str_t));
    if (values == NULL) {
        mrb_raise(mrb, E_RUNTIME_ERROR, "[]=: out of memory");
    }

    for (i = 0, m = 0; i < RARRAY_LEN(v) && m < n; i++) {
        e = mrb_ary_ref(mrb, v, i);

        if (!mrb_nil_p(e)) {
            ngx_http_mruby_header_checked(mrb, r, k, e, &key, &values[m]);
            if (valid != NULL) {
                ngx_http_mruby_header_stored(mrb, valid(r, &key, &values[m]),
                                             &values[m]);
            }
            m++;
        }
    }

    ngx_http_mruby_header_stored(mrb, set(r, &key, NULL), NULL);

    for (i = 0; i < m; i++) {
        ngx_http_mruby_header_stored(mrb, add(r, &key, &values[i]),
                                     &values[i]);
    }

    return v;
}


static mrb_value
ngx_http_mruby_headers_hash(mrb_state *mrb, ngx_list_t *list)
{
    mrb_value         hash, key;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    hash = mrb_hash_new(mrb);

    part = &list->part;

    for (i = 0; (h = ngx_http_mruby_header_at(&part, &i)) != NULL; i++) {

        if (h->hash == 0) {
            continue;
        }

        key = ngx_http_mruby_str(mrb, &h->key);

        /* the first of repeated headers, as [] gives */
        if (mrb_nil_p(mrb_hash_fetch(mrb, hash, key, mrb_nil_value()))) {
            mrb_hash_set(mrb, hash, key, ngx_http_mruby_str(mrb, &h->value));
        }
    }

    return hash;
}


/* Request headers */


/*
 * Takes element i out of a part of the request's header list, and moves
 * the pointers nginx keeps into that part along.  (A header only marked
 * with hash 0 would still be forwarded by proxy_pass.)
 */
#if (NGX_HTTP_MRUBY_HEADER_LISTS)

/* A pointer to a header, after the part's headers from gone on moved one
 * place down over gone, whose next was next. */
static ngx_table_elt_t *
ngx_http_mruby_header_moved(ngx_table_elt_t *h, ngx_table_elt_t *gone,
    ngx_table_elt_t *next, ngx_table_elt_t *end)
{
    if (h == gone) {
        h = next;
    }

    return (h > gone && h < end) ? h - 1 : h;
}

#endif


static void
ngx_http_mruby_header_in_remove(ngx_http_request_t *r, ngx_list_part_t *part,
    ngx_uint_t i)
{
    ngx_uint_t         k;
    ngx_table_elt_t   *h, *gone, *end, **p;
#if (NGX_HTTP_MRUBY_HEADER_LISTS)
    ngx_uint_t         j;
    ngx_list_part_t   *all;
    ngx_table_elt_t   *next;
#else
    ngx_uint_t         j, n;
    ngx_array_t       *a;
    ngx_table_elt_t  **e;
#endif

    h = part->elts;
    gone = &h[i];
    end = &h[part->nelts];

#if (NGX_HTTP_MRUBY_HEADER_LISTS)
    next = gone->next;
#endif

    ngx_memmove(gone, gone + 1, (end - gone - 1) * sizeof(ngx_table_elt_t));
    part->nelts--;

    for (k = 0; k < ngx_http_mruby_nelts(ngx_http_mruby_headers_in_fields);
         k++)
    {
        p = (ngx_table_elt_t **) ((char *) &r->headers_in
                          + ngx_http_mruby_headers_in_fields[k].offset);

#if (NGX_HTTP_MRUBY_HEADER_LISTS)
        *p = ngx_http_mruby_header_moved(*p, gone, next, end);
#else
        if (*p == gone) {
            *p = NULL;

        } else if (*p > gone && *p < end) {
            (*p)--;
        }
#endif
    }

#if (NGX_HTTP_MRUBY_HEADER_LISTS)

    /* and the links between headers of one name, in every part */
    all = &r->headers_in.headers.part;
    j = 0;

    while ((h = ngx_http_mruby_header_at(&all, &j)) != NULL) {
        h->next = ngx_http_mruby_header_moved(h->next, gone, next, end);
        j++;
    }

#else

    for (k = 0; k < ngx_http_mruby_nelts(ngx_http_mruby_headers_in_arrays);
         k++)
    {
        a = (ngx_array_t *) ((char *) &r->headers_in
                     + ngx_http_mruby_headers_in_arrays[k].offset);

        e = a->elts;
        n = 0;

        for (j = 0; j < a->nelts; j++) {
            if (e[j] == gone) {
                continue;
            }

            e[n++] = (e[j] > gone && e[j] < end) ? e[j] - 1 : e[j];
        }

        a->nelts = n;
    }

#endif
}


/* Removes every request header named key; returns how many went. */
static ngx_uint_t
ngx_http_mruby_header_in_delete(ngx_http_request_t *r, ngx_str_t *key)
{
    ngx_uint_t        i, n;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    n = 0;
    part = &r->headers_in.headers.part;
    i = 0;

    while ((h = ngx_http_mruby_header_at(&part, &i)) != NULL) {

        if (ngx_http_mruby_header_is(&h->key, key)) {
            ngx_http_mruby_header_in_remove(r, part, i);
            n++;
            continue;  /* the next one moved into i */
        }

        i++;
    }

    return n;
}


/* One request header of that name, with value; NULL removes them all. */
static ngx_int_t
ngx_http_mruby_header_in_set(ngx_http_request_t *r, ngx_str_t *key,
    ngx_str_t *value)
{
    ngx_table_elt_t   *h, **p;
#if !(NGX_HTTP_MRUBY_HEADER_LISTS)
    ngx_array_t       *a;
#endif

    if (value == NULL) {
        (void) ngx_http_mruby_header_in_delete(r, key);
        return NGX_OK;
    }

    h = ngx_http_mruby_header_find(&r->headers_in.headers, key);

    if (h != NULL) {
        h->value = *value;
        return NGX_OK;
    }

    h = ngx_http_mruby_header_in_push(r, key, value);
    if (h == NULL) {
        return NGX_ERROR;
    }

    p = ngx_http_mruby_header_ptr(&r->headers_in,
                                  ngx_http_mruby_headers_in_fields, key);
    if (p != NULL) {
        *p = h;
        return NGX_OK;
    }

#if !(NGX_HTTP_MRUBY_HEADER_LISTS)
    a = ngx_http_mruby_header_ptr(&r->headers_in,
                                  ngx_http_mruby_headers_in_arrays, key);
    if (a != NULL) {

        if (a->elts == NULL
            && ngx_array_init(a, r->pool, 1, sizeof(ngx_table_elt_t *))
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        p = ngx_array_push(a);
        if (p == NULL) {
            return NGX_ERROR;
        }

        *p = h;
    }
#endif

    return NGX_OK;
}


/* One more request header of that name, beside those there are. */
static ngx_int_t
ngx_http_mruby_header_in_add(ngx_http_request_t *r, ngx_str_t *key,
    ngx_str_t *value)
{
    ngx_table_elt_t   *h, **p;

    if (value == NULL
        || ngx_http_mruby_header_find(&r->headers_in.headers, key) == NULL)
    {
        return ngx_http_mruby_header_in_set(r, key, value);
    }

    h = ngx_http_mruby_header_in_push(r, key, value);
    if (h == NULL) {
        return NGX_ERROR;
    }

    p = ngx_http_mruby_header_ptr(&r->headers_in,
                                  ngx_http_mruby_headers_in_fields, key);
    if (p != NULL) {
        ngx_http_mruby_header_link(p, h);
    }

    return NGX_OK;
}


static mrb_value
ngx_http_mruby_headers_in_get(mrb_state *mrb, mrb_value self)
{
    u_char               buf[NGX_HTTP_MRUBY_LOWCASE_LEN];
    ngx_str_t            key;
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    ngx_http_mruby_header_name_arg(mrb, &key);

    return ngx_http_mruby_header_values(mrb, &r->headers_in.headers, &key,
               ngx_http_mruby_header_lowcase(&key, buf));
}


static mrb_value
ngx_http_mruby_headers_in_set(mrb_state *mrb, mrb_value self)
{
    return ngx_http_mruby_headers_assign(mrb, ngx_http_mruby_header_in_set,
                                         ngx_http_mruby_header_in_add, NULL);
}


/* The original's shortcut for the User-Agent header. */
static mrb_value
ngx_http_mruby_headers_in_user_agent(mrb_state *mrb, mrb_value self)
{
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    return r->headers_in.user_agent
           ? ngx_http_mruby_str(mrb, &r->headers_in.user_agent->value)
           : mrb_nil_value();
}


static mrb_value
ngx_http_mruby_headers_in_delete(mrb_state *mrb, mrb_value self)
{
    ngx_str_t            key;
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    ngx_http_mruby_header_name_arg(mrb, &key);

    return mrb_bool_value(ngx_http_mruby_header_in_delete(r, &key) > 0);
}


static mrb_value
ngx_http_mruby_headers_in_all(mrb_state *mrb, mrb_value self)
{
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    return ngx_http_mruby_headers_hash(mrb, &r->headers_in.headers);
}


/* Response headers */


static void
ngx_http_mruby_header_out_delete(ngx_http_request_t *r, ngx_str_t *key)
{
    ngx_uint_t         i;
    ngx_list_part_t   *part;
    ngx_table_elt_t   *h, **p;

    if (ngx_http_mruby_key_is(key, "content-type")) {
        ngx_str_null(&r->headers_out.content_type);
        r->headers_out.content_type_len = 0;
        r->headers_out.content_type_lowcase = NULL;
        ngx_str_null(&r->headers_out.charset);
        return;
    }

    if (ngx_http_mruby_key_is(key, "content-length")) {
        r->headers_out.content_length_n = -1;
    }

    p = ngx_http_mruby_header_ptr(&r->headers_out,
                                  ngx_http_mruby_headers_out_fields, key);
    if (p != NULL) {
        *p = NULL;
    }

    /* a response header with hash 0 is one nginx does not send */

    part = &r->headers_out.headers.part;

    for (i = 0; (h = ngx_http_mruby_header_at(&part, &i)) != NULL; i++) {
        if (ngx_http_mruby_header_is(&h->key, key)) {
            h->hash = 0;
        }
    }
}


/* NGX_DECLINED for a response header value nginx cannot keep: a
 * Content-Length that is not a number. */
static ngx_int_t
ngx_http_mruby_headers_out_valid(ngx_http_request_t *r, ngx_str_t *key,
    ngx_str_t *value)
{
    if (ngx_http_mruby_key_is(key, "content-length")
        && ngx_atoof(value->data, value->len) == NGX_ERROR)
    {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * Sets a response header, replacing one of that name (Set-Cookie adds);
 * value NULL deletes it.  NGX_DECLINED: an invalid Content-Length.
 */
ngx_int_t
ngx_http_mruby_headers_out_set(ngx_http_request_t *r, ngx_str_t *key,
    ngx_str_t *value)
{
    u_char            *semi;
    off_t              n;
    ngx_table_elt_t   *h, **p;

    if (value == NULL) {
        ngx_http_mruby_header_out_delete(r, key);
        return NGX_OK;
    }

    if (ngx_http_mruby_key_is(key, "content-type")) {
        r->headers_out.content_type = *value;
        r->headers_out.content_type_lowcase = NULL;
        r->headers_out.content_type_hash = 0;
        ngx_str_null(&r->headers_out.charset);

        semi = ngx_strlchr(value->data, value->data + value->len, ';');
        r->headers_out.content_type_len = semi ? (size_t) (semi - value->data)
                                               : value->len;
        return NGX_OK;
    }

    if (ngx_http_mruby_key_is(key, "content-length")) {
        n = ngx_atoof(value->data, value->len);
        if (n == NGX_ERROR) {
            return NGX_DECLINED;
        }

        ngx_http_mruby_header_out_delete(r, key);
        r->headers_out.content_length_n = n;
        return NGX_OK;
    }

    if (!ngx_http_mruby_key_is(key, "set-cookie")) {
        ngx_http_mruby_header_out_delete(r, key);
    }

    h = ngx_http_mruby_header_push(r, &r->headers_out.headers, key, value);
    if (h == NULL) {
        return NGX_ERROR;
    }

    p = ngx_http_mruby_header_ptr(&r->headers_out,
                                  ngx_http_mruby_headers_out_fields, key);
    if (p != NULL) {
        *p = h;
    }

    return NGX_OK;
}


/*
 * Adds a response header beside those of that name (as Link, Vary or
 * WWW-Authenticate lists are sent); Content-Type and Content-Length, of
 * which a response has one, are set.
 */
static ngx_int_t
ngx_http_mruby_headers_out_add(ngx_http_request_t *r, ngx_str_t *key,
    ngx_str_t *value)
{
    ngx_table_elt_t   *h, **p;

    if (value == NULL
        || ngx_http_mruby_key_is(key, "content-type")
        || ngx_http_mruby_key_is(key, "content-length"))
    {
        return ngx_http_mruby_headers_out_set(r, key, value);
    }

    h = ngx_http_mruby_header_push(r, &r->headers_out.headers, key, value);
    if (h == NULL) {
        return NGX_ERROR;
    }

    p = ngx_http_mruby_header_ptr(&r->headers_out,
                                  ngx_http_mruby_headers_out_fields, key);
    if (p != NULL) {
        ngx_http_mruby_header_link(p, h);
    }

    return NGX_OK;
}


/* Content-Length as nginx keeps it when it has no header for it, or nil. */
static mrb_value
ngx_http_mruby_content_length(mrb_state *mrb, ngx_http_request_t *r)
{
    if (r->headers_out.content_length != NULL
        || r->headers_out.content_length_n < 0)
    {
        return mrb_nil_value();
    }

    return mrb_obj_as_string(mrb, mrb_fixnum_value(
               (mrb_int) r->headers_out.content_length_n));
}


static mrb_value
ngx_http_mruby_headers_out_get(mrb_state *mrb, mrb_value self)
{
    ngx_str_t            key;
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    ngx_http_mruby_header_name_arg(mrb, &key);

    if (ngx_http_mruby_key_is(&key, "content-type")) {
        if (r->headers_out.content_type.len == 0) {
            return mrb_nil_value();
        }

        return ngx_http_mruby_str(mrb, &r->headers_out.content_type);
    }

    if (ngx_http_mruby_key_is(&key, "content-length")
        && r->headers_out.content_length == NULL)
    {
        return ngx_http_mruby_content_length(mrb, r);
    }

    return ngx_http_mruby_header_values(mrb, &r->headers_out.headers, &key,
                                        NULL);
}


static mrb_value
ngx_http_mruby_headers_out_set_m(mrb_state *mrb, mrb_value self)
{
    return ngx_http_mruby_headers_assign(mrb, ngx_http_mruby_headers_out_set,
                                         ngx_http_mruby_headers_out_add,
                                         ngx_http_mruby_headers_out_valid);
}


static mrb_value
ngx_http_mruby_headers_out_add_m(mrb_state *mrb, mrb_value self)
{
    return ngx_http_mruby_headers_assign(mrb, ngx_http_mruby_headers_out_add,
                                         ngx_http_mruby_headers_out_add,
                                         ngx_http_mruby_headers_out_valid);
}


static mrb_value
ngx_http_mruby_headers_out_delete(mrb_state *mrb, mrb_value self)
{
    ngx_str_t            key;
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    ngx_http_mruby_header_name_arg(mrb, &key);
    ngx_http_mruby_header_out_delete(r, &key);

    return mrb_nil_value();
}


static mrb_value
ngx_http_mruby_headers_out_all(mrb_state *mrb, mrb_value self)
{
    mrb_value            hash, length;
    ngx_http_request_t  *r = ngx_http_mruby_request(mrb);

    hash = ngx_http_mruby_headers_hash(mrb, &r->headers_out.headers);

    if (r->headers_out.content_type.len) {
        mrb_hash_set(mrb, hash, mrb_str_new_lit(mrb, "Content-Type"),
                     ngx_http_mruby_str(mrb, &r->headers_out.content_type));
    }

    length = ngx_http_mruby_content_length(mrb, r);

    if (!mrb_nil_p(length)) {
        mrb_hash_set(mrb, hash, mrb_str_new_lit(mrb, "Content-Length"),
                     length);
    }

    return hash;
}


static const mrb_api_method  ngx_http_mruby_headers_in_methods[] = {
    { "[]", ngx_http_mruby_headers_in_get, MRB_ARGS_REQ(1) },
    { "[]=", ngx_http_mruby_headers_in_set, MRB_ARGS_REQ(2) },
    { "delete", ngx_http_mruby_headers_in_delete, MRB_ARGS_REQ(1) },
    { "all", ngx_http_mruby_headers_in_all, MRB_ARGS_NONE() },
    { "user_agent", ngx_http_mruby_headers_in_user_agent, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


static const mrb_api_method  ngx_http_mruby_headers_out_methods[] = {
    { "[]", ngx_http_mruby_headers_out_get, MRB_ARGS_REQ(1) },
    { "[]=", ngx_http_mruby_headers_out_set_m, MRB_ARGS_REQ(2) },
    { "add", ngx_http_mruby_headers_out_add_m, MRB_ARGS_REQ(2) },
    { "delete", ngx_http_mruby_headers_out_delete, MRB_ARGS_REQ(1) },
    { "all", ngx_http_mruby_headers_out_all, MRB_ARGS_NONE() },
    MRB_API_METHOD_END
};


void
ngx_http_mruby_headers_define(mrb_state *mrb, struct RClass *nginx)
{
    mrb_api_define_class(mrb, nginx, "Headers_in", NULL,
                         ngx_http_mruby_headers_in_methods);

    mrb_api_define_class(mrb, nginx, "Headers_out", NULL,
                         ngx_http_mruby_headers_out_methods);
}
