/*
 * Shared dictionaries: named key/value stores in shared memory, visible to
 * every worker process of a server, every operation atomic across them.
 *
 * Zones are declared while the configuration is read, in the parent (Apache)
 * or master (nginx) process, and mapped before workers fork.  A zone whose
 * name and size are unchanged across a configuration reload (apachectl
 * graceful, nginx -s reload) keeps its contents, also when the reload
 * loads a newer build of the module (Apache) whose zone layout is the same.
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

/*
 * Where the registry of zones lives: by default in the module's own
 * memory, enough for a server that keeps the module loaded across its
 * reloads (nginx).  Apache unloads its modules on every restart and loads
 * them again, maybe a newer build after a package upgrade: before
 * mrb_shdict_config_begin it hands in a block of mrb_shdict_keep_size()
 * bytes that outlives the module, zeroed when new, kept under the name
 * MRB_SHDICT_KEEP_NAME, so that the next load finds the zones in use and
 * keeps their contents (NULL: the module's own memory again).  The name
 * changes with the block's layout: a build of another layout starts a
 * registry of its own (the zones of the old one stay mapped in that
 * process, unused).  A zone of another layout (mrb_shdict_zone_attach) is
 * not kept: the configuration that declares it again gets an empty one.
 */
#define MRB_SHDICT_KEEP_NAME  "mruby shared dictionaries, layout 1"

typedef struct mrb_shdict_keep_s  mrb_shdict_keep;

size_t mrb_shdict_keep_size(void);
void mrb_shdict_keep_in(mrb_shdict_keep *keep);

/* Parses a size such as "1m", "512k", "65536"; returns 0 or -1. */
int mrb_shdict_parse_size(const char *s, size_t *size);

/* Defines Server::SharedDict under server_class. */
void mrb_shdict_define(mrb_state *mrb, struct RClass *server_class);

#endif /* MRB_SHDICT_H */
