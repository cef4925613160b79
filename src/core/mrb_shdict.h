/*
 * Shared dictionaries: named key/value stores in shared memory, visible to
 * every worker process of a server, every operation atomic across them.
 *
 * Zones are declared while the configuration is read, in the parent (Apache)
 * or master (nginx) process, and mapped before workers fork.  A zone whose
 * name and size are unchanged across a configuration reload (apachectl
 * graceful, nginx -s reload) keeps its contents.
 */

#ifndef MRB_SHDICT_H
#define MRB_SHDICT_H

#include <stddef.h>
#include <mruby.h>

/* Starts reading a configuration: zones not declared again are dropped
 * when it is put in use (mrb_shdict_config_end).  What a configuration
 * read before and never put in use (a refused reload) mapped is unmapped. */
void mrb_shdict_config_begin(void);

/* Declares a zone in the configuration being read (mapped now, in the
 * parent or master, found by scripts once the configuration is in use);
 * returns 0, or -1 with a message in err (bad name or size, name declared
 * twice with different sizes, mapping failed). */
int mrb_shdict_zone_add(const char *name, size_t size, char *err,
    size_t errlen);

/* The configuration read is in use (Apache: post_config; nginx: the new
 * cycle's init_module, after its listening sockets were opened): its zones
 * become the ones scripts find; zones it resized or did not declare are
 * unmapped. */
void mrb_shdict_config_end(void);

/* Pins the module in memory (RTLD_NODELETE), so that what it keeps across
 * configurations in static variables (this registry, the metrics table)
 * survives Apache's unloading it on a restart. */
void mrb_shdict_pin_module(void);

/* Parses a size such as "1m", "512k", "65536"; returns 0 or -1. */
int mrb_shdict_parse_size(const char *s, size_t *size);

/* Defines Server::SharedDict under server_class. */
void mrb_shdict_define(mrb_state *mrb, struct RClass *server_class);

#endif /* MRB_SHDICT_H */
