/*
 * Secrets left in freed memory: while a secret is watched, every block
 * handed back to the allocator is looked into for it, as a core dump or
 * the next owner of the block would find it.  What is watched: free and
 * realloc called by the core (and by mruby, linked in statically: the
 * Makefile's UNIT_WRAP wraps them), the commands hiredis formatted for the
 * core (redisFreeCommand, wrapped too), and the buffers libhiredis frees
 * itself (its sdsfree, interposed by this program's own).
 *
 * A realloc counts the block it is given: whether it grows in place or
 * moves, the caller gave up the old bytes unwiped.
 */

#ifndef UNIT_SECRET_H
#define UNIT_SECRET_H

/* Watches secret (a C string the caller keeps) until unit_secret_end. */
void unit_secret_watch(const char *secret);

/* Stops watching; returns how many freed blocks held the secret. */
int unit_secret_end(void);

#endif /* UNIT_SECRET_H */
