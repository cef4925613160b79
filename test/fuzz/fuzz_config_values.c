/*
 * libFuzzer target: the parsers of configuration values that both servers
 * share, on arbitrary strings, against an oracle written apart from them:
 * dictionary sizes (mrubySharedDict, mruby_shared_dict: digits with an
 * optional k, m or g, refused when they overflow) and cache policies
 * (stat, forever, never, and their names back).  A disagreement aborts.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mrb_script.h"
#include "mrb_shdict.h"


static void
expect(int cond)
{
    if (!cond) {
        abort();
    }
}


/* The size s means, or -1: what the directives document. */
static int
oracle_size(const char *s, size_t *size)
{
    unsigned long long  n = 0, unit = 1;

    if (*s < '0' || *s > '9') {
        return -1;
    }

    for ( /* void */ ; *s >= '0' && *s <= '9'; s++) {
        if (__builtin_mul_overflow(n, 10, &n)
            || __builtin_add_overflow(n, (unsigned) (*s - '0'), &n))
        {
            return -1;
        }
    }

    switch (*s) {
    case 'k': case 'K': unit = 1024ULL; s++; break;
    case 'm': case 'M': unit = 1024ULL * 1024; s++; break;
    case 'g': case 'G': unit = 1024ULL * 1024 * 1024; s++; break;
    }

    if (*s != '\0' || __builtin_mul_overflow(n, unit, &n) || n > SIZE_MAX) {
        return -1;
    }

    *size = (size_t) n;
    return 0;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    char              *s;
    size_t             got, want;
    int                rc;
    mrb_cache_policy   policy;

    s = malloc(len + 1);
    if (s == NULL) {
        return 0;
    }

    memcpy(s, data, len);
    s[len] = '\0';

    rc = mrb_shdict_parse_size(s, &got);
    expect(rc == oracle_size(s, &want));
    expect(rc != 0 || got == want);

    rc = mrb_cache_policy_parse(s, &policy);
    expect((rc == 0) == (strcmp(s, "stat") == 0 || strcmp(s, "forever") == 0
                         || strcmp(s, "never") == 0));
    expect(rc != 0 || strcmp(mrb_cache_policy_name(policy), s) == 0);

    free(s);
    return 0;
}
