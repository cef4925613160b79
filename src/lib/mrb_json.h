/*
 * JSON (parse and generate as CRuby's json does).
 */

#ifndef MRB_JSON_H
#define MRB_JSON_H

#include <mruby.h>

void mrb_json_define(mrb_state *mrb);

#endif /* MRB_JSON_H */
