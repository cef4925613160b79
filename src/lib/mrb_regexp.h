/*
 * Regexp and MatchData on Oniguruma (Ruby syntax, UTF-8), shared by
 * mrb_regexp.c (patterns, matching, the match globals) and mrb_matchdata.c.
 *
 * Strings are bytes in Debian's mruby (no MRB_UTF8_STRING), so every
 * position here is a byte offset, as String#index counts them.
 */

#ifndef MRB_REGEXP_H
#define MRB_REGEXP_H

#include <oniguruma.h>
#include <mruby.h>
#include <mruby/data.h>

#include "mrb_part.h"

/* Ruby's option bits (Regexp::IGNORECASE ...). */
#define MRB_REGEXP_IGNORECASE  1
#define MRB_REGEXP_EXTENDED    2
#define MRB_REGEXP_MULTILINE   4
#define MRB_REGEXP_NOENCODING  32

typedef struct {
    regex_t    *re;
    mrb_int     flags;      /* the MRB_REGEXP_* bits it was compiled with */
    char       *src;        /* the source, NUL-terminated */
    mrb_int     srclen;
} mrb_regexp;

/* A match: group i spans [beg[i], end[i]), -1 when it did not take part.
 * beg and end point into pos, as an OnigRegion's do, so that a region can
 * be lent to Oniguruma without a copy.  One allocation, owned by the
 * MatchData object. */
typedef struct {
    int         ngroups;    /* 1 + the number of capture groups */
    int        *beg;        /* pos */
    int        *end;        /* pos + ngroups */
    int         pos[];
} mrb_match;

extern const struct mrb_data_type  mrb_regexp_type;
extern const struct mrb_data_type  mrb_match_type;

/* The pattern of a Regexp, or raises TypeError. */
mrb_regexp *mrb_regexp_check(mrb_state *mrb, mrb_value self);

/* A MatchData of str for the groups in region (as onig_search left it). */
mrb_value mrb_matchdata_new(mrb_state *mrb, mrb_value regexp, mrb_value str,
    const OnigRegion *region);

/* The group number of name in rx (with region: the last one of a name used
 * twice that took part), or -1. */
int mrb_regexp_name_to_group(mrb_regexp *rx, const char *name, mrb_int len,
    OnigRegion *region);

/*
 * Searches str for re from byte pos (backward towards 0 when backward);
 * returns where the match starts, or -1.  *region: the groups, valid until
 * the next search in the interpreter.  check: first make sure str is
 * UTF-8 (ArgumentError if not; a loop over one String checks it once).
 */
mrb_int mrb_regexp_search(mrb_state *mrb, mrb_value re, mrb_value str,
    mrb_int pos, int backward, int check, const OnigRegion **region);

/* re =~ str for a String str: where the match starts or nil, recorded as
 * the last match. */
mrb_value mrb_regexp_match_index(mrb_state *mrb, mrb_value re, mrb_value str);

/* Records the outcome of the last mrb_regexp_search as the last match:
 * str nil when it failed; md its MatchData if the caller made one. */
void mrb_regexp_record(mrb_state *mrb, mrb_value re, mrb_value str,
    mrb_value md);

/* Makes md (a MatchData or nil) the last match: Regexp.last_match, and $~
 * and the globals derived from it ($1..$9, $&, $`, $', $+) that some
 * script of the interpreter names. */
void mrb_regexp_set_last_match(mrb_state *mrb, mrb_value md);

/* Group n of md as a new String, or nil when it did not take part. */
mrb_value mrb_matchdata_group(mrb_state *mrb, mrb_value md, mrb_int n);

/* The byte length of the character at p (UTF-8 unless re is /n). */
mrb_int mrb_regexp_char_len(mrb_value re, const char *p, const char *end);

/* Forgets the last match (when a run ends): returns 0 (mrb_part.h). */
int mrb_regexp_run_end(mrb_state *mrb, const mrb_run_rec *run);

/* The last match as a MatchData (made now if none was: may raise), or
 * nil; mrb_regexp_put_back makes such a value the last match again
 * (allocates nothing, sets no global). */
mrb_value mrb_regexp_take(mrb_state *mrb);
void mrb_regexp_put_back(mrb_state *mrb, mrb_value md);

void mrb_regexp_define(mrb_state *mrb);
void mrb_matchdata_define(mrb_state *mrb);
void mrb_regexp_string_define(mrb_state *mrb);

/* The last match as a part (mrb_part.h): dirty while a run's last match
 * is kept.  Regexp, MatchData and String's pattern methods are defined
 * with the library (mrb_lib_part). */
extern const mrb_part  mrb_regexp_part;

#endif /* MRB_REGEXP_H */
