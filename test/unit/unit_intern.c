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
static unsigned     count;


static void
intern_seen(mrb_state *mrb, const char *name, size_t len)
{
    if (watched != NULL && mrb == watched_mrb && len == strlen(watched)
        && memcmp(name, watched, len) == 0)
    {
        count++;
    }
}


void
unit_intern_watch(mrb_state *mrb, const char *name)
{
    watched_mrb = mrb;
    watched = name;
    count = 0;
}


unsigned
unit_intern_count(void)
{
    return count;
}


mrb_sym
__wrap_mrb_intern(mrb_state *mrb, const char *name, size_t len)
{
    intern_seen(mrb, name, len);
    return __real_mrb_intern(mrb, name, len);
}


mrb_sym
__wrap_mrb_intern_static(mrb_state *mrb, const char *name, size_t len)
{
    intern_seen(mrb, name, len);
    return __real_mrb_intern_static(mrb, name, len);
}


mrb_sym
__wrap_mrb_intern_cstr(mrb_state *mrb, const char *name)
{
    intern_seen(mrb, name, strlen(name));
    return __real_mrb_intern_cstr(mrb, name);
}
