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

/*
 * A MatchData is laid out as mruby's Struct instances are (an Array's
 * values under another class: mrb_matchdata.c), so that the GC marks what
 * it holds without an instance-variable table (two allocations and a hash
 * per object: 889 of a MatchData's 1,391 instructions, bench/notes.md):
 * the String searched, the Regexp, then group i's begin and end as
 * Integers, -1 when it did not take part.
 */
#define MRB_MATCH_STR   0
#define MRB_MATCH_RE    1
#define MRB_MATCH_POS   2

/* Group i's begin and end in a MatchData's values v. */
#define mrb_match_beg(v, i)  mrb_integer((v)[MRB_MATCH_POS + 2 * (i)])
#define mrb_match_end(v, i)  mrb_integer((v)[MRB_MATCH_POS + 2 * (i) + 1])

extern const struct mrb_data_type  mrb_regexp_type;

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

/* The values of md (MRB_MATCH_STR ...) and its number of groups (1 + the
 * capture groups), or raises TypeError for what is not a MatchData or one
 * never matched (MatchData.allocate). */
const mrb_value *mrb_matchdata_check(mrb_state *mrb, mrb_value md,
    mrb_int *ngroups);

/* Group n of md (one the library made) as a new String, or nil when it
 * did not take part. */
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
