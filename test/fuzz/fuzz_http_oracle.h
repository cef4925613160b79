/*
 * The wire checks' rules written a second time, from RFC 9110's grammar and
 * independently of the tables in mrb_http_check.c, for the fuzz targets to
 * compare against.
 */

#ifndef FUZZ_HTTP_ORACLE_H
#define FUZZ_HTTP_ORACLE_H

#include <stddef.h>
#include <string.h>

static inline int
oracle_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')
           || (c >= 'A' && c <= 'Z') || (c != 0 && strchr("!#$%&'*+-.^_`|~", c));
}


static inline int
oracle_ctl(unsigned char c)
{
    return c <= 0x1f || c == 0x7f;
}


static inline int
oracle_name(const unsigned char *p, size_t len)
{
    size_t  i;

    for (i = 0; i < len; i++) {
        if (!oracle_tchar(p[i])) {
            return 0;
        }
    }

    return len > 0;
}


static inline int
oracle_value(const unsigned char *p, size_t len)
{
    size_t  i;

    for (i = 0; i < len; i++) {
        if (oracle_ctl(p[i]) && p[i] != '\t') {
            return 0;
        }
    }

    return 1;
}


/* no control character; space too unless space_ok */
static inline int
oracle_uri(const unsigned char *p, size_t len, int space_ok, int empty_ok)
{
    size_t  i;

    for (i = 0; i < len; i++) {
        if (oracle_ctl(p[i]) || (!space_ok && p[i] == ' ')) {
            return 0;
        }
    }

    return len > 0 || empty_ok;
}


#endif /* FUZZ_HTTP_ORACLE_H */
