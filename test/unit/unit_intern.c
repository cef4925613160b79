/* See unit_intern.h. */

#include <string.h>
#include <mruby.h>
#include "unit_intern.h"

mrb_sym __real_mrb_intern(mrb_state *mrb, const char *name, size_t len);
mrb_sym __real_mrb_intern_static(mrb_state *mrb, const char *name,
    size_t len);
mrb_sym __real_mrb_intern_cstr(mrb_state *mrb, const char *name);

mrb_sym __wrap_mrb_intern(mrb_state *mrb, const char *name, size_t len);
mrb_sym __wrap_mrb_intern_static(mrb_state *mrb, const char *name,
    size_t len);
mrb_sym __wrap_mrb_intern_cstr(mrb_state *mrb, const char *name);

static mrb_state   *watched_mrb;
static const char  *watched;
static unsigned     count, misses;


/* Whether name is the watched one; counts its lookup. */
static int
intern_seen(mrb_state *mrb, const char *name, size_t len)
{
    if (watched != NULL && mrb == watched_mrb && len == strlen(watched)
        && memcmp(name, watched, len) == 0)
    {
        count++;
        return 1;
    }

    return 0;
}


/* The lookup added a name: it did not find it, after a scan. */
static mrb_sym
intern_done(mrb_state *mrb, int seen, mrb_sym before, mrb_sym sym)
{
    if (seen && mrb->symidx != before) {
        misses++;
    }

    return sym;
}


void
unit_intern_watch(mrb_state *mrb, const char *name)
{
    watched_mrb = mrb;
    watched = name;
    count = 0;
    misses = 0;
}


unsigned
unit_intern_count(void)
{
    return count;
}


unsigned
unit_intern_misses(void)
{
    return misses;
}


mrb_sym
__wrap_mrb_intern(mrb_state *mrb, const char *name, size_t len)
{
    mrb_sym  before = mrb->symidx;
    int      seen = intern_seen(mrb, name, len);

    return intern_done(mrb, seen, before, __real_mrb_intern(mrb, name, len));
}


mrb_sym
__wrap_mrb_intern_static(mrb_state *mrb, const char *name, size_t len)
{
    mrb_sym  before = mrb->symidx;
    int      seen = intern_seen(mrb, name, len);

    return intern_done(mrb, seen, before,
                       __real_mrb_intern_static(mrb, name, len));
}


mrb_sym
__wrap_mrb_intern_cstr(mrb_state *mrb, const char *name)
{
    mrb_sym  before = mrb->symidx;
    int      seen = intern_seen(mrb, name, strlen(name));

    return intern_done(mrb, seen, before, __real_mrb_intern_cstr(mrb, name));
}
