/*
 * Process identity for held counts: a pid alone is not enough, since a pid
 * freed by a killed worker may be given to a new process within seconds, so
 * an owner is its pid and its start time (clock ticks since boot, from
 * /proc/<pid>/stat).
 */

#ifndef MRB_SHDICT_OWNER_H
#define MRB_SHDICT_OWNER_H

#include <stdint.h>

typedef struct {
    uint32_t  pid;
    uint64_t  start;   /* 0 where /proc cannot tell */
} mrb_shdict_owner;

/* The calling process; computed once per process (again after a fork). */
void mrb_shdict_owner_self(mrb_shdict_owner *o);

/* 1 while the process runs (a zombie counts as dead), 0 once it is gone. */
int mrb_shdict_owner_alive(const mrb_shdict_owner *o);

#endif /* MRB_SHDICT_OWNER_H */
