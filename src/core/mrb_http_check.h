/*
 * The one way in for what a script hands to the wire or to an upstream:
 * header names and values, final statuses, redirect targets, URIs and
 * query strings.  nginx checks none of these and Apache only some, and a
 * CR or LF in any of them splits a response or smuggles a request.
 *
 * Two families, as luaL_check* and plain predicates:
 *
 *   mrb_http_valid_*   pure checks on bytes: 1 when acceptable, else 0.
 *                      No Ruby; the fuzz targets and unit tests call them.
 *   mrb_http_check_*   for C called from Ruby: convert each Ruby argument
 *                      once (to_s), then check, and raise ArgumentError
 *                      naming the header or the setter.  What they hand
 *                      back points into a string kept alive by the
 *                      caller's GC arena: copy it before calling back into
 *                      Ruby (a later to_s may change or free it).
 */

#ifndef MRB_HTTP_CHECK_H
#define MRB_HTTP_CHECK_H

#include <stddef.h>
#include <mruby.h>

/*
 * The most request body bytes a script gets in memory unless the
 * configuration says otherwise (mrubyRequestBodyLimit,
 * mruby_request_body_limit): nginx's default client_max_body_size.  The
 * body is held about three times over (the server's buffers, the kept
 * copy, the Ruby String), per request in flight.
 */
#define MRB_HTTP_BODY_LIMIT_DEFAULT  (1024 * 1024)

/*
 * The most response body bytes a body filter holds to give its script
 * (mrubyOutputFilterLimit, mruby_output_body_filter_limit): a larger
 * response is answered with 500 instead of being held whole in memory.
 */
#define MRB_HTTP_FILTER_BODY_LIMIT_DEFAULT  (16 * 1024 * 1024)

/* Bytes checked by an mrb_http_check_* function. */
typedef struct {
    const char  *data;   /* NULL: the Ruby value was nil (delete) */
    size_t       len;
} mrb_http_str;

/* A header name: a non-empty RFC 9110 token. */
int mrb_http_valid_header_name(const char *p, size_t len);

/* A header value: RFC 9110 field content, so no CR, LF, NUL or other
 * control character but HTAB (obs-text, bytes >= 0x80, is allowed). */
int mrb_http_valid_header_value(const char *p, size_t len);

/* A final response status: 200-599.  1xx are interim responses that the
 * servers send themselves; a script's 1xx would end the response early. */
int mrb_http_valid_final_status(mrb_int status);

/* A URI path as the servers keep it, decoded (r.uri=, an internal
 * redirect): non-empty, no control character (0x00-0x1F, 0x7F).  A
 * space is allowed: the servers escape the path when they forward it. */
int mrb_http_valid_uri(const char *p, size_t len);

/* A redirect target sent to the client (a URL or a path): non-empty, no
 * control character and no space. */
int mrb_http_valid_target(const char *p, size_t len);

/* A query string, which the servers forward as it is: no control
 * character and no space, which would end a request line; may be empty. */
int mrb_http_valid_args(const char *p, size_t len);

/*
 * headers[name] = value: both converted (name: a String or Symbol, value:
 * to_s once, nil kept as NULL data), both before either is checked, so a
 * to_s cannot change a string already checked.  Raises ArgumentError
 * "invalid header name ..." / "invalid value for header NAME".
 */
void mrb_http_check_header(mrb_state *mrb, mrb_value name, mrb_value value,
    mrb_http_str *name_out, mrb_http_str *value_out);

/* The value of a header the setter names (what: "Content-Type"): to_s
 * once, checked as a header value; nil raises. */
void mrb_http_check_header_value(mrb_state *mrb, const char *what,
    mrb_value value, mrb_http_str *out);

/* A URI path (what names the setter in the error: "uri="): to_s once,
 * checked with mrb_http_valid_uri. */
void mrb_http_check_uri(mrb_state *mrb, const char *what, mrb_value value,
    mrb_http_str *out);

/* A redirect target for the client: to_s once, checked with
 * mrb_http_valid_target. */
void mrb_http_check_target(mrb_state *mrb, const char *what,
    mrb_value value, mrb_http_str *out);

/* A query string: to_s once, checked with mrb_http_valid_args. */
void mrb_http_check_args(mrb_state *mrb, const char *what, mrb_value value,
    mrb_http_str *out);

/* Raises ArgumentError unless status is a final status (200-599). */
void mrb_http_check_final_status(mrb_state *mrb, mrb_int status);

#endif /* MRB_HTTP_CHECK_H */
