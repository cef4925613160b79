/*
 * Shared dictionaries in files: the store behind Cache.new (the originals'
 * localmemcache).  Any process, at any time, opens a store by its file and
 * makes it when it is not there; every process that opens the same file
 * shares it, through a MAP_SHARED mapping of the file.  The zone inside is
 * the one declared dictionaries use (mrb_shdict_zone.c), with its robust
 * lock, its eviction and its recovery from a holder killed mid-update.
 */

#ifndef MRB_SHDICT_FILE_H
#define MRB_SHDICT_FILE_H

#include <stddef.h>
#include "mrb_shdict_zone.h"

typedef enum {
    MRB_SHDICT_FILE_OK = 0,
    MRB_SHDICT_FILE_BAD_ARGUMENT,   /* a bad namespace, path or size */
    MRB_SHDICT_FILE_FAILED          /* the file cannot be made or used */
} mrb_shdict_file_rc;

/* The longest namespace: the file is <directory>/<namespace>.cache */
#define MRB_SHDICT_FILE_NAME_MAX  63

/* The size of a store when the script gives none. */
#define MRB_SHDICT_FILE_DEFAULT_SIZE  (1024 * 1024)

/*
 * Sets the directory of namespace stores, making it (mode 0700) when it is
 * not there.  A directory it makes while the process runs as root is given
 * to uid:gid, the worker processes' user (uid (long) -1: keep root's); an
 * existing one is left as it is.  Stores made later by this process while
 * it is root are given to that user too.  Returns 0, or -1 with a message
 * in err; the directory is set all the same (unless memory ran out), so
 * that opening a store there says what is wrong with it.
 */
int mrb_shdict_file_set_dir(const char *dir, long uid, long gid, char *err,
    size_t errlen);

/*
 * Opens the store of a namespace (1 to MRB_SHDICT_FILE_NAME_MAX letters,
 * digits, '_', '-' or '.', not starting with '.') in the directory set
 * above, or of the file at path (absolute; its directory must exist).  A
 * store that is not there is made with size bytes; an existing one keeps
 * the size it was made with.  The reference lives as long as the process,
 * and opening the same store again finds it without a system call.
 * *ref is set on MRB_SHDICT_FILE_OK; otherwise err says what went wrong.
 */
mrb_shdict_file_rc mrb_shdict_file_open_namespace(const char *name,
    size_t len, size_t size, mrb_shdict_ref **ref, char *err, size_t errlen);
mrb_shdict_file_rc mrb_shdict_file_open_path(const char *path, size_t len,
    size_t size, mrb_shdict_ref **ref, char *err, size_t errlen);

/*
 * Unmaps every store this process opened and forgets them and the
 * directory: for a process about to unload the module (Apache's parent on
 * a restart), once no interpreter of it holds a Cache.  The files stay, and
 * the next load opens them again.
 */
void mrb_shdict_file_close_all(void);

#endif /* MRB_SHDICT_FILE_H */
