/*
 * Shared dictionaries (being written: declarations fail for now, the class
 * is defined empty so that the core links).
 */

#include <stdio.h>
#include "mrb_shdict.h"


void
mrb_shdict_config_begin(void)
{
}


int
mrb_shdict_zone_add(const char *name, size_t size, char *err, size_t errlen)
{
    snprintf(err, errlen, "shared dictionaries are not implemented yet");
    return -1;
}


void
mrb_shdict_config_end(void)
{
}


int
mrb_shdict_parse_size(const char *s, size_t *size)
{
    return -1;
}


void
mrb_shdict_define(mrb_state *mrb, struct RClass *server_class)
{
    mrb_define_class_under(mrb, server_class, "SharedDict", mrb->object_class);
}
