/*
 * The standard library scripts get (Regexp, JSON, Digest, ...): what the
 * originals built in as mruby gems, server-neutral, one class a file,
 * given to the core as parts (mrb_part.h): mrb_lib_part (every class,
 * then the library's Ruby, which builds on them) and mrb_regexp_part (the
 * last match), in mrb_parts with Redis.  Defined once per interpreter,
 * when it is created.
 */

#ifndef MRB_LIB_H
#define MRB_LIB_H

#include <mruby.h>

#include "mrb_interp.h"
#include "mrb_part.h"

/* The library's state in an interpreter, at mrb_interp_head.part_state. */
typedef struct {
    void           *regexp;         /* mrb_regexp.c's */
    unsigned        run_state:1;    /* the last match of the run is kept:
                                       mrb_regexp_part is dirty */

    /* looked up once: a name costs a symbol-table search each time */
    struct RClass  *regexp_class;
    struct RClass  *matchdata_class;
} mrb_lib;

extern const mrb_part  mrb_lib_part;

/* The parts both servers give every interpreter (mrb_server.parts),
 * NULL-terminated: mrb_parts.c. */
extern const mrb_part *const  mrb_parts[];

/* The library's state of mrb's interpreter. */
static inline mrb_lib *
mrb_lib_get(mrb_state *mrb)
{
    return ((mrb_interp_head *) mrb->ud)->part_state;
}

/*
 * Whether [s, s + len) is UTF-8: no overlong forms, surrogates or values
 * past U+10FFFF (Oniguruma's own check lets stray bytes such as 0xff pass;
 * CRuby's JSON generator refuses them too).
 */
int mrb_lib_utf8_valid(const char *s, size_t len);

/* The length of the UTF-8 character at s (s < end), by the same rules, or
 * 0 if it is not one. */
int mrb_lib_utf8_len(const char *s, const char *end);

#endif /* MRB_LIB_H */
