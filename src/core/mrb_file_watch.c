/*
 * Change notification for `stat` scripts (see mrb_file_watch.h).
 *
 * Why every directory on the way: editors save by writing a new file and
 * renaming it over the old one, and deployments switch a symbolic link
 * ("current" -> releases/N).  Neither touches the old file; both change a
 * name in a directory the path resolves through.
 *
 * Why a change waits for the writer: `cp`, `cat >` and config management
 * truncate the file and write it in pieces; a run that compiled it between
 * two writes would compile half a script.  The file's own watch reports
 * the writes (IN_MODIFY) and the close that ends them (IN_CLOSE_WRITE);
 * its directory's watch reports the close too, for a file created while
 * the file's watch did not exist yet.  Runs keep trusting the version they
 * have until the close, or until MRB_FILE_WATCH_QUIET_MS without a write.
 *
 * Why the cost of an event does not grow with the number of paths: an
 * event is looked up by (watch descriptor, name) in a hash, reaches only
 * the paths that looked that name up there, and only those paths are
 * watched again and see their epoch move.  A watch (an inotify descriptor)
 * is shared by every path that goes through its directory and is removed
 * when the last one leaves.
 *
 * Why a path's directories are not always walked: scripts share their
 * directories, and a walk costs three system calls a directory (statfs,
 * inotify_add_watch, lstat).  The names the last walk needed are kept with
 * the length of each directory it went through; the next path that starts
 * with the same directories takes their names and walks only the rest.
 * They are what a walk would find as long as no event about any of them
 * was read and none was freed since (watch.walks counts both): an event
 * that is queued but not read yet reaches the new path too, as it holds
 * the same names, and it is watched again when the event is read.
 *
 * Why every epoch carries the pid: no value trusted in one process can be
 * trusted in a process forked from it.
 */

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <linux/magic.h>

#include "mrb_errbuf.h"
#include "mrb_file_watch.h"


/* A directory is watched for the names looked up in it (a close after a
 * write included: see above) ... */
#define WATCH_DIR_MASK   (IN_ATTRIB | IN_CREATE | IN_DELETE | IN_MOVED_FROM \
                          | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF     \
                          | IN_CLOSE_WRITE | IN_ONLYDIR)
/* ... and the file for its content.  Appends to other files in the same
 * directory (a log) wake nobody. */
#define WATCH_FILE_MASK  (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE             \
                          | IN_DELETE_SELF | IN_MOVE_SELF)

/* Symbolic links followed within one path (each costs a stack frame of
 * two PATH_MAX buffers); a longer chain is stat()ed instead. */
#define WATCH_MAX_LINKS  8

/* Names one path may need watched (each directory on the way, those of
 * its links' targets, the file); a path needing more is stat()ed. */
#define WATCH_MAX_STEPS  128

/* One read of the queue: about 150 events of a short name.  A batch is
 * what one call of mrb_file_watch_process does before it lets the event
 * loop serve requests again. */
#define WATCH_BATCH_BYTES  8192

/* Paths watched again in one call after the queue overflowed (each a
 * statfs, an inotify_add_watch and an lstat per directory). */
#define WATCH_RESYNC_SLICE  128

#ifndef ZFS_SUPER_MAGIC
#define ZFS_SUPER_MAGIC  0x2fc12fc1
#endif


typedef struct watch_node_s      watch_node;
typedef struct watch_name_s      watch_name;
typedef struct watch_interest_s  watch_interest;
typedef struct watch_interests_s watch_interests;
typedef mrb_file_watch_path      watch_path;

/* One inotify watch, shared by every path that needs it. */
struct watch_node_s {
    watch_node      *hash_next;
    int              wd;
    unsigned         is_dir:1;
    watch_name      *names;        /* doubly linked: node_prev/node_next */
    char             dir[];        /* a directory's path, for lstat() */
};

/* A name looked up in a watched directory, or "" (the file itself),
 * shared by every path that looks it up there. */
struct watch_name_s {
    watch_name      *hash_next;    /* by (wd, name) */
    uint32_t         hash;
    watch_node      *node;
    watch_name      *node_prev, *node_next;
    watch_interest  *interests;    /* doubly linked: prev/next */
    char             name[];
};

/* One path's need of one name. */
struct watch_interest_s {
    watch_name      *name;
    watch_interest  *prev, *next;
    watch_path      *path;
};

/* All the needs of one path, in one allocation: a path in a directory
 * five levels down needs six names (a list of separate allocations cost
 * 48 bytes a name, this 32). */
struct watch_interests_s {
    size_t           count;
    watch_interest   item[];
};

/* The names a walk of a path's lookup found, before they become its
 * interests. */
typedef struct {
    size_t           count;
    watch_name      *name[WATCH_MAX_STEPS];
} watch_steps;

/* The last walk of a path (not of a link's target): for each directory it
 * looked a name up in, the length of that directory's prefix of the path
 * ("/a/b/") and how many of the names came before.  Each directory costs
 * a name, so there are at most WATCH_MAX_STEPS. */
typedef struct {
    uint64_t         walks;        /* watch.walks when it was made */
    size_t           dirs;
    size_t           prefix[WATCH_MAX_STEPS];
    size_t           before[WATCH_MAX_STEPS];
    watch_steps      steps;
    char             path[PATH_MAX];
} watch_walk;

struct mrb_file_watch_path_s {
    mrb_file_watch_path_head  head;        /* first: the inline epoch */
    watch_path               *hash_next;
    uint32_t                  hash;
    unsigned                  watched:1;   /* its watches are in place */
    unsigned                  touched:1;   /* in this batch's list */
    unsigned                  changed:1;   /* a change counts */
    unsigned                  rewatch:1;   /* lookups to watch again */
    unsigned                  writing:1;   /* in the writing list */
    unsigned                  resync:1;    /* events lost: watch again */
    watch_interests          *interests;   /* NULL when not watched */
    watch_path               *touched_next;
    watch_path               *writing_prev, *writing_next;
    uint64_t                  write_first_ms, write_last_ms;
    char                      name[];
};

/* A table of items singly chained through the pointer at next_at. */
typedef struct {
    void    **bucket;
    size_t    size;                 /* a power of two */
    size_t    count;
    size_t    next_at;              /* offsetof(item, hash_next) */
} watch_table;

#define WATCH_NEXT(t, item)  (*(void **) ((char *) (item) + (t)->next_at))

typedef struct {
    pthread_mutex_t   lock;
    _Atomic int       fd;          /* -1: no watch in this process */
    _Atomic unsigned  instance;    /* which fd: bumps at each start */
    _Atomic int       driven;      /* an event loop reads fd */
    _Atomic unsigned  nwriting;    /* paths in the writing list */
    _Atomic int       applying;    /* a batch read, not applied yet */
    _Atomic int       resyncing;   /* paths marked resync are left */
    size_t            resync_bucket; /* where the next slice starts */
    unsigned          failed:1;    /* it could not start, or stopped */
    uint32_t          changes;     /* the low half of every epoch */
    uint64_t          walks;       /* bumps when the last walk may be
                                      stale (see the opening comment) */

    watch_table       paths;       /* by name */
    watch_table       nodes;       /* by wd */
    watch_table       names;       /* by (wd, name) */
    watch_path       *writing;     /* written, not closed nor quiet yet */
} mrb_file_watch;


static mrb_file_watch  watch = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .fd = -1,
    .paths = { .next_at = offsetof(mrb_file_watch_path, hash_next) },
    .nodes = { .next_at = offsetof(watch_node, hash_next) },
    .names = { .next_at = offsetof(watch_name, hash_next) }
};

static pthread_once_t  watch_atfork_once = PTHREAD_ONCE_INIT;

/* Guarded by watch.lock. */
static watch_walk      watch_last_walk;

/* Why the last path could not be watched, and why this process has no
 * watch if so; guarded by watch.lock. */
static char            watch_why[MRB_ERR_REASON_LEN];
static char            watch_failure[MRB_ERR_REASON_LEN];


/* ------------------------------------------------------------------ */
/* Tables                                                              */
/* ------------------------------------------------------------------ */

static uint32_t
watch_hash(int wd, const char *s)
{
    uint32_t  h = 2166136261u ^ (uint32_t) wd * 2654435761u;

    while (*s) {
        h = (h ^ (unsigned char) *s++) * 16777619u;
    }

    return h;
}


/* The chain of hash h; NULL when the table is empty. */
static void **
watch_table_chain(watch_table *t, uint32_t h)
{
    return t->size ? &t->bucket[h & (t->size - 1)] : NULL;
}


typedef uint32_t (*watch_rehash_pt)(void *item);

/* Makes room for one more item; returns 0, or -1 out of memory.  Two
 * items a bucket on average: tables are searched per event, not per run,
 * and every path has an entry in three of them. */
static int
watch_table_reserve(watch_table *t, watch_rehash_pt rehash)
{
    void    **grown, *item, *next;
    size_t    size, i;

    if (t->count < t->size * 2) {
        return 0;
    }

    size = t->size ? t->size * 2 : 64;
    grown = calloc(size, sizeof(void *));
    if (grown == NULL) {
        return -1;
    }

    for (i = 0; i < t->size; i++) {
        for (item = t->bucket[i]; item != NULL; item = next) {
            next = WATCH_NEXT(t, item);
            WATCH_NEXT(t, item) = grown[rehash(item) & (size - 1)];
            grown[rehash(item) & (size - 1)] = item;
        }
    }

    free(t->bucket);
    t->bucket = grown;
    t->size = size;
    return 0;
}


static void
watch_table_unlink(watch_table *t, void *item, uint32_t h)
{
    void  **p;

    for (p = watch_table_chain(t, h); *p != NULL; p = &WATCH_NEXT(t, *p)) {
        if (*p == item) {
            *p = WATCH_NEXT(t, item);
            t->count--;
            return;
        }
    }
}


static uint32_t
watch_path_rehash(void *item)
{
    return ((watch_path *) item)->hash;
}


static uint32_t
watch_node_rehash(void *item)
{
    return (uint32_t) ((watch_node *) item)->wd * 2654435761u;
}


static uint32_t
watch_name_rehash(void *item)
{
    return ((watch_name *) item)->hash;
}


static watch_node *
watch_node_find_locked(int wd)
{
    void        **chain = watch_table_chain(&watch.nodes,
                                            (uint32_t) wd * 2654435761u);
    watch_node   *n;

    for (n = chain ? *chain : NULL; n != NULL; n = n->hash_next) {
        if (n->wd == wd) {
            return n;
        }
    }

    return NULL;
}


/* ------------------------------------------------------------------ */
/* Epochs                                                              */
/* ------------------------------------------------------------------ */

static uint64_t
watch_epoch_next_locked(void)
{
    watch.changes++;
    return (uint64_t) getpid() << 32 | watch.changes;
}


/* A path whose events were lost keeps epoch 0 until watched again. */
static void
watch_bump_locked(watch_path *p)
{
    atomic_store_explicit(&p->head.epoch,
                          p->watched && !p->resync
                          ? watch_epoch_next_locked() : 0,
                          memory_order_release);
}


static uint64_t
watch_now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


static int
watch_fail_locked(const char *fmt, ...)
{
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(watch_why, sizeof(watch_why), fmt, ap);
    va_end(ap);

    return -1;
}


/* ------------------------------------------------------------------ */
/* Watches of one path                                                 */
/* ------------------------------------------------------------------ */

/* inotify does not see changes made by other machines or by FUSE daemons. */
static int
watch_fs_is_local(const char *path)
{
    struct statfs  fs;

    if (statfs(path, &fs) != 0) {
        return 0;
    }

    switch ((unsigned long) fs.f_type) {
    case EXT4_SUPER_MAGIC:
    case XFS_SUPER_MAGIC:
    case BTRFS_SUPER_MAGIC:
    case TMPFS_MAGIC:
    case RAMFS_MAGIC:
    case F2FS_SUPER_MAGIC:
    case OVERLAYFS_SUPER_MAGIC:
    case ZFS_SUPER_MAGIC:
        return 1;
    default:
        return 0;
    }
}


/* The node of an inotify_add_watch result, made if new. */
static watch_node *
watch_node_get_locked(int wd, const char *dir)
{
    watch_node  *n = watch_node_find_locked(wd);
    size_t       len = dir ? strlen(dir) : 0;
    void       **chain;

    if (n != NULL) {
        return n;
    }

    if (watch_table_reserve(&watch.nodes, watch_node_rehash) != 0) {
        return NULL;
    }

    n = calloc(1, sizeof(watch_node) + len + 1);
    if (n == NULL) {
        return NULL;
    }

    n->wd = wd;
    n->is_dir = dir != NULL;
    if (dir != NULL) {
        memcpy(n->dir, dir, len + 1);
    }

    chain = watch_table_chain(&watch.nodes, watch_node_rehash(n));
    n->hash_next = *chain;
    *chain = n;
    watch.nodes.count++;
    return n;
}


/* The (wd, name) entry, made if new; NULL out of memory. */
static watch_name *
watch_name_get_locked(watch_node *n, const char *name)
{
    uint32_t      h = watch_hash(n->wd, name);
    void        **chain = watch_table_chain(&watch.names, h);
    watch_name   *k;
    size_t        len = strlen(name);

    for (k = chain ? *chain : NULL; k != NULL; k = k->hash_next) {
        if (k->hash == h && k->node == n && strcmp(k->name, name) == 0) {
            return k;
        }
    }

    if (watch_table_reserve(&watch.names, watch_name_rehash) != 0
        || (k = malloc(sizeof(watch_name) + len + 1)) == NULL)
    {
        return NULL;
    }

    memcpy(k->name, name, len + 1);
    k->hash = h;
    k->node = n;
    k->interests = NULL;
    k->node_prev = NULL;
    k->node_next = n->names;
    if (n->names != NULL) {
        n->names->node_prev = k;
    }
    n->names = k;

    chain = watch_table_chain(&watch.names, h);
    k->hash_next = *chain;
    *chain = k;
    watch.names.count++;
    return k;
}


/* Frees k if no path needs it, and its watch if no name is left. */
static void
watch_name_release_locked(watch_name *k)
{
    watch_node  *n = k->node;

    if (k->interests != NULL) {
        return;
    }

    watch_table_unlink(&watch.names, k, k->hash);
    watch.walks++;
    if (k->node_prev != NULL) {
        k->node_prev->node_next = k->node_next;
    } else {
        n->names = k->node_next;
    }
    if (k->node_next != NULL) {
        k->node_next->node_prev = k->node_prev;
    }
    free(k);

    if (n->names == NULL) {
        watch_table_unlink(&watch.nodes, n, watch_node_rehash(n));
        if (watch.fd >= 0) {
            /* its IN_IGNORED then finds no node */
            inotify_rm_watch(watch.fd, n->wd);
        }
        free(n);
    }
}


/* Records that the lookup needs the watch wd for name ("" for the file
 * itself).  Nothing is made when steps is full. */
static int
watch_step_add_locked(watch_steps *steps, int wd, const char *dir,
    const char *name)
{
    watch_name  *k = NULL;
    watch_node  *n;

    if (steps->count == WATCH_MAX_STEPS) {
        if (watch_node_find_locked(wd) == NULL) {
            inotify_rm_watch(watch.fd, wd);
        }
        return watch_fail_locked("more than %d names to watch on the way",
                                 WATCH_MAX_STEPS);
    }

    n = watch_node_get_locked(wd, dir);
    if (n == NULL || (k = watch_name_get_locked(n, name)) == NULL) {
        if (n != NULL && n->names == NULL) {
            watch_table_unlink(&watch.nodes, n, watch_node_rehash(n));
            inotify_rm_watch(watch.fd, n->wd);
            free(n);
        }
        return watch_fail_locked("out of memory");
    }

    steps->name[steps->count++] = k;
    return 0;
}


/* Frees the names of steps that nothing needs (a name may be found twice
 * in one lookup: released at its last). */
static void
watch_steps_release_locked(watch_steps *steps)
{
    size_t  i, j;

    for (i = 0; i < steps->count; i++) {
        for (j = i + 1; j < steps->count; j++) {
            if (steps->name[j] == steps->name[i]) {
                break;
            }
        }
        if (j == steps->count) {
            watch_name_release_locked(steps->name[i]);
        }
    }
    steps->count = 0;
}


/* Makes steps p's interests; returns 0, or -1 out of memory (steps are
 * left as they are). */
static int
watch_interests_link_locked(watch_path *p, watch_steps *steps)
{
    watch_interests  *a;
    watch_interest   *i;
    watch_name       *k;
    size_t            n;

    a = malloc(sizeof(watch_interests) + steps->count * sizeof(*i));
    if (a == NULL) {
        return watch_fail_locked("out of memory");
    }

    a->count = steps->count;
    for (n = 0; n < a->count; n++) {
        i = &a->item[n];
        k = steps->name[n];
        i->name = k;
        i->path = p;
        i->prev = NULL;
        i->next = k->interests;
        if (k->interests != NULL) {
            k->interests->prev = i;
        }
        k->interests = i;
    }

    p->interests = a;
    steps->count = 0;
    return 0;
}


/* Drops a path's interests; what no path needs any more goes. */
static void
watch_interests_drop_locked(watch_interests *a)
{
    watch_interest  *i;
    watch_name      *k;
    size_t           n;

    if (a == NULL) {
        return;
    }

    for (n = 0; n < a->count; n++) {
        i = &a->item[n];
        k = i->name;

        if (i->prev != NULL) {
            i->prev->next = i->next;
        } else {
            k->interests = i->next;
        }
        if (i->next != NULL) {
            i->next->prev = i->prev;
        }

        watch_name_release_locked(k);
    }

    free(a);
}


/*
 * The directories path shares with the last walk (see the opening
 * comment): the names looked up on the way to the deepest of them go in
 * steps, its node in *known.  Returns the length of its prefix of path
 * ("/a/b/"), or 1 (only "/" is known, and not its node) when there is none.
 */
static size_t
watch_walk_reuse_locked(watch_walk *walk, watch_steps *steps,
    const char *path, watch_node **known)
{
    size_t  i, len;

    if (walk->walks != watch.walks) {
        return 1;
    }

    for (i = walk->dirs; i-- > 0; ) {
        len = walk->prefix[i];
        if (strncmp(path, walk->path, len) == 0 && path[len] != '\0'
            && path[len] != '/')
        {
            memcpy(steps->name, walk->steps.name,
                   walk->before[i] * sizeof(watch_name *));
            steps->count = walk->before[i];
            *known = walk->steps.name[walk->before[i]]->node;
            walk->dirs = i;
            return len;
        }
    }

    return 1;
}


/*
 * Watches each directory the lookup of path goes through from its offset
 * `from`, for the name it looks up there, and what the symbolic links met
 * on the way point to.  The directory that ends at `from` is known's when
 * known is not NULL.  A missing component ends the walk: its directory,
 * watched for its name, tells when it appears.  walk (NULL within a link's
 * target) records the directories.  Returns 0, or -1 if a change could go
 * unseen.
 */
static int
watch_lookup_locked(watch_steps *steps, const char *path, size_t from,
    watch_node *known, watch_walk *walk, int links)
{
    char         dir[PATH_MAX], target[PATH_MAX];
    const char  *name, *end;
    size_t       dirlen;
    ssize_t      n;
    struct stat  st;
    int          wd;

    if (path[0] != '/' || strlen(path) >= PATH_MAX) {
        return watch_fail_locked("not an absolute path: %s", path);
    }

    for (name = path + from; *name != '\0'; name = end + (*end == '/')) {
        end = strchr(name, '/');
        if (end == NULL) {
            end = name + strlen(name);
        }
        if (end == name) {
            continue;
        }

        dirlen = name - path;
        memcpy(dir, path, dirlen);
        dir[dirlen > 1 ? dirlen - 1 : 1] = '\0';

        if (known != NULL) {
            wd = known->wd;
            known = NULL;

        } else {
            if (!watch_fs_is_local(dir)) {
                return watch_fail_locked("%s is not on a local file system",
                                         dir);
            }

            wd = inotify_add_watch(watch.fd, dir, WATCH_DIR_MASK);
            if (wd < 0) {
                return (errno == ENOENT || errno == ENOTDIR)
                       ? 0 : watch_fail_locked("inotify_add_watch %s: %s%s",
                                               dir, strerror(errno),
                                               errno == ENOSPC
                                               ? " (fs.inotify."
                                                 "max_user_watches)"
                                               : "");
            }
        }

        memcpy(target, name, end - name);
        target[end - name] = '\0';
        if (watch_step_add_locked(steps, wd, dir, target) != 0) {
            return -1;
        }
        if (walk != NULL) {
            walk->prefix[walk->dirs] = dirlen;
            walk->before[walk->dirs] = steps->count - 1;
            walk->dirs++;
        }

        memcpy(dir, path, end - path);
        dir[end - path] = '\0';
        if (lstat(dir, &st) != 0) {
            return (errno == ENOENT || errno == ENOTDIR)
                   ? 0 : watch_fail_locked("lstat %s: %s", dir,
                                           strerror(errno));
        }
        if (!S_ISLNK(st.st_mode)) {
            continue;
        }

        if (links >= WATCH_MAX_LINKS) {
            return watch_fail_locked("more than %d symbolic links",
                                     WATCH_MAX_LINKS);
        }
        n = readlink(dir, target, sizeof(target) - 1);
        if (n < 0) {
            return watch_fail_locked("readlink %s: %s", dir,
                                     strerror(errno));
        }
        target[n] = '\0';

        if (target[0] != '/') {
            /* relative to the link's directory */
            if (dirlen + n >= sizeof(target)) {
                return watch_fail_locked("%s: target too long", dir);
            }
            memmove(target + dirlen, target, n + 1);
            memcpy(target, path, dirlen);
        }

        if (watch_lookup_locked(steps, target, 1, NULL, NULL, links + 1)
            != 0)
        {
            return -1;
        }
    }

    return 0;
}


/* Walks path's lookup into steps (empty), from the directories it shares
 * with the last walk, which it then replaces.  Returns 0, or -1. */
static int
watch_walk_locked(watch_steps *steps, const char *path)
{
    watch_walk  *walk = &watch_last_walk;
    watch_node  *known = NULL;
    size_t       from;

    if (strlen(path) >= sizeof(walk->path)) {
        return watch_fail_locked("not an absolute path: %s", path);
    }

    from = watch_walk_reuse_locked(walk, steps, path, &known);
    if (from == 1) {
        walk->dirs = 0;
    }

    if (watch_lookup_locked(steps, path, from, known, walk, 0) != 0) {
        walk->dirs = 0;
        return -1;
    }

    memcpy(walk->steps.name, steps->name,
           steps->count * sizeof(watch_name *));
    walk->steps.count = steps->count;
    strcpy(walk->path, path);
    walk->walks = watch.walks;
    return 0;
}


/*
 * Watches p's lookup and, if it exists, the file itself.  The watches it
 * had are dropped after the new ones are in place, so that a directory
 * both need keeps its watch (and queues no IN_IGNORED).  On failure p is
 * left unwatched: its epoch stays 0 and its runs stat().
 */
static int
watch_path_locked(watch_path *p)
{
    watch_interests  *old = p->interests;
    watch_steps       steps;
    int               wd;

    steps.count = 0;
    p->interests = NULL;
    p->resync = 0;

    if (watch_walk_locked(&steps, p->name) != 0) {
        goto failed;
    }

    wd = inotify_add_watch(watch.fd, p->name, WATCH_FILE_MASK);
    if (wd < 0) {
        if (errno == ENOENT || errno == ENOTDIR) {
            goto done;
        }
        watch_fail_locked("inotify_add_watch %s: %s%s", p->name,
                          strerror(errno),
                          errno == ENOSPC ? " (fs.inotify.max_user_watches)"
                                          : "");
        goto failed;
    }

    if (!watch_fs_is_local(p->name)) {
        watch_fail_locked("%s is not on a local file system", p->name);
        goto failed;
    }

    if (watch_step_add_locked(&steps, wd, NULL, "") != 0) {
        goto failed;
    }

done:
    if (watch_interests_link_locked(p, &steps) != 0) {
        goto failed;
    }
    watch_interests_drop_locked(old);
    p->watched = 1;
    return 0;

failed:
    watch_steps_release_locked(&steps);
    watch_interests_drop_locked(old);
    p->watched = 0;
    atomic_store_explicit(&p->head.epoch, 0, memory_order_release);
    return -1;
}


/* ------------------------------------------------------------------ */
/* Events                                                              */
/* ------------------------------------------------------------------ */

enum {
    WATCH_WRITE = 1,     /* a write: counts after a close or quiet */
    WATCH_CHANGE,        /* counts now */
    WATCH_MOVED          /* counts now, and the lookup changed */
};


/* What an event on the file itself means. */
static int
watch_file_event(uint32_t mask)
{
    if (mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
        return WATCH_MOVED;
    }
    if (mask & (IN_CLOSE_WRITE | IN_ATTRIB)) {
        return WATCH_CHANGE;
    }
    return (mask & IN_MODIFY) ? WATCH_WRITE : 0;
}


/*
 * What an event about a name in a directory means.  A regular file
 * created there is being written: it counts when it is closed (or quiet);
 * a link or a directory is complete when it appears.
 */
static int
watch_name_event(watch_node *n, const struct inotify_event *ev)
{
    char         entry[PATH_MAX];
    struct stat  st;

    if (ev->mask & IN_CLOSE_WRITE) {
        return WATCH_MOVED;    /* a file this path's watch may not know */
    }

    if ((ev->mask & IN_CREATE) && !(ev->mask & IN_ISDIR)) {
        snprintf(entry, sizeof(entry), "%s/%s",
                 strcmp(n->dir, "/") == 0 ? "" : n->dir, ev->name);
        if (lstat(entry, &st) != 0 || S_ISREG(st.st_mode)) {
            return -WATCH_MOVED;    /* watch it again, wait for the writer */
        }
    }

    return WATCH_MOVED;
}


static void
watch_writing_unlink_locked(watch_path *p)
{
    if (!p->writing) {
        return;
    }

    if (p->writing_prev != NULL) {
        p->writing_prev->writing_next = p->writing_next;
    } else {
        watch.writing = p->writing_next;
    }
    if (p->writing_next != NULL) {
        p->writing_next->writing_prev = p->writing_prev;
    }

    p->writing = 0;
    atomic_fetch_sub_explicit(&watch.nwriting, 1, memory_order_relaxed);
}


/*
 * Notes what an event means for p; the last event of a batch wins, so
 * that a file rewritten again after a close waits for the new writer.
 */
static void
watch_note_locked(watch_path *p, int what, uint64_t now,
    watch_path **touched)
{
    watch.walks++;

    if (!p->touched) {
        p->touched = 1;
        p->touched_next = *touched;
        *touched = p;
    }

    if (what < 0) {          /* the lookup changed, and a writer began */
        p->rewatch = 1;
        what = WATCH_WRITE;
    }

    if (what == WATCH_WRITE) {
        p->changed = 0;
        if (!p->writing) {
            p->writing = 1;
            p->write_first_ms = now;
            p->writing_prev = NULL;
            p->writing_next = watch.writing;
            if (watch.writing != NULL) {
                watch.writing->writing_prev = p;
            }
            watch.writing = p;
            atomic_fetch_add_explicit(&watch.nwriting, 1,
                                      memory_order_relaxed);
        }
        p->write_last_ms = now;
        return;
    }

    p->changed = 1;
    p->rewatch |= what == WATCH_MOVED;
    watch_writing_unlink_locked(p);
}


static void
watch_event_locked(const struct inotify_event *ev, uint64_t now,
    watch_path **touched)
{
    watch_interest  *i;
    watch_name      *k;
    watch_node      *n;
    void           **chain;
    uint32_t         h;
    int              what;

    n = watch_node_find_locked(ev->wd);
    if (n == NULL) {
        return;          /* a watch removed since, or never ours */
    }

    if (ev->len == 0) {  /* about the watched inode itself */
        what = n->is_dir ? WATCH_MOVED : watch_file_event(ev->mask);
        if (what == 0) {
            return;
        }
        for (k = n->names; k != NULL; k = k->node_next) {
            for (i = k->interests; i != NULL; i = i->next) {
                watch_note_locked(i->path, what, now, touched);
            }
        }
        return;
    }

    h = watch_hash(ev->wd, ev->name);
    chain = watch_table_chain(&watch.names, h);

    for (k = chain ? *chain : NULL; k != NULL; k = k->hash_next) {
        if (k->hash == h && k->node == n && strcmp(k->name, ev->name) == 0) {
            what = watch_name_event(n, ev);
            for (i = k->interests; i != NULL; i = i->next) {
                watch_note_locked(i->path, what, now, touched);
            }
            return;
        }
    }
}


/*
 * Applies a batch's notes.  A change bumps the path's epoch before it is
 * watched again, so that runs stop trusting at once, and after, so that a
 * run that stat()ed while the new inodes were not yet watched does not
 * keep trusting what it saw.  A path still being written is watched again
 * now (a new inode) and counts later.
 */
static void
watch_apply_locked(watch_path *touched)
{
    watch_path  *p, *next;

    for (p = touched; p != NULL; p = next) {
        next = p->touched_next;
        p->touched = 0;

        if (p->changed && p->watched) {
            watch_bump_locked(p);
        }
        if (p->rewatch && p->watched) {
            watch_path_locked(p);
        }
        if (p->changed && p->watched) {
            watch_bump_locked(p);
        }

        p->changed = 0;
        p->rewatch = 0;
    }
}


/*
 * When the last write to p happened, on the clock of watch_now_ms: its
 * mtime, if it is earlier than the event's reading (a process whose runs
 * ask the queue reads a write's event only at its next run, maybe long
 * after the write).
 */
static uint64_t
watch_last_write_ms(watch_path *p, uint64_t now)
{
    struct timespec  real;
    struct stat      st;
    int64_t          age_ms;

    if (stat(p->name, &st) != 0 || clock_gettime(CLOCK_REALTIME, &real) != 0)
    {
        return p->write_last_ms;
    }

    age_ms = (int64_t) (real.tv_sec - st.st_mtim.tv_sec) * 1000
             + (real.tv_nsec - st.st_mtim.tv_nsec) / 1000000;
    if (age_ms <= 0 || (uint64_t) age_ms > now
        || now - (uint64_t) age_ms >= p->write_last_ms)
    {
        return p->write_last_ms;
    }

    return now - (uint64_t) age_ms;
}


/* The writes quiet for long enough count; returns ms to the next one. */
static long
watch_quiet_locked(uint64_t now)
{
    watch_path  *p, *next;
    uint64_t     due, soonest = UINT64_MAX;

    for (p = watch.writing; p != NULL; p = next) {
        next = p->writing_next;
        due = watch_last_write_ms(p, now) + MRB_FILE_WATCH_QUIET_MS;

        if (due <= now) {
            watch_writing_unlink_locked(p);
            watch_bump_locked(p);
        } else if (due < soonest) {
            soonest = due;
        }
    }

    return soonest == UINT64_MAX ? MRB_FILE_WATCH_IDLE
                                 : (long) (soonest - now);
}


/*
 * After a queue overflow lost events: no path can be trusted, and each
 * must be watched again (its lookup may have changed unseen).  Watching
 * 10,000 paths again took 178 ms of CPU in one call (build/test_core
 * --bench file_watch_bench_10000_paths, 2026-11-24), so it is done in slices
 * (watch_resync_slice_locked), one per call of the loop; meanwhile the
 * paths left have epoch 0 and their runs stat(), and a run that adds its
 * path watches it again at once (watch_add_locked).
 */
static void
watch_resync_all_locked(void)
{
    watch_path  *p;
    size_t       b;

    for (b = 0; b < watch.paths.size; b++) {
        for (p = watch.paths.bucket[b]; p != NULL; p = p->hash_next) {
            if (p->watched) {
                p->resync = 1;
                atomic_store_explicit(&p->head.epoch, 0,
                                      memory_order_release);
            }
        }
    }

    watch.resync_bucket = 0;
    watch.walks++;
    atomic_store_explicit(&watch.resyncing, 1, memory_order_release);
}


/* Watches up to WATCH_RESYNC_SLICE paths again; returns whether some are
 * left. */
static int
watch_resync_slice_locked(void)
{
    watch_path  *p;
    size_t       b;
    int          done = 0;

    for (b = watch.resync_bucket; b < watch.paths.size; b++) {
        for (p = watch.paths.bucket[b]; p != NULL; p = p->hash_next) {
            if (!p->resync) {
                continue;
            }
            if (done == WATCH_RESYNC_SLICE) {
                watch.resync_bucket = b;
                return 1;
            }
            if (watch_path_locked(p) == 0) {
                watch_bump_locked(p);
            }
            done++;
        }
    }

    atomic_store_explicit(&watch.resyncing, 0, memory_order_release);
    return 0;
}


static void watch_stop_locked(void);


/* One read of the queue, applied; returns whether more may be queued. */
static int
watch_batch_locked(void)
{
    char                         buf[WATCH_BATCH_BYTES]
                                 __attribute__((aligned(__alignof__(struct inotify_event))));
    const struct inotify_event  *ev;
    const char                  *q;
    watch_path                  *touched = NULL;
    uint64_t                     now;
    ssize_t                      n;

    /* Set before the read empties the queue: see mrb_file_watch_poll. */
    atomic_store_explicit(&watch.applying, 1, memory_order_seq_cst);

    do {
        n = read(watch.fd, buf, sizeof(buf));
    } while (n < 0 && errno == EINTR);

    if (n < 0 && errno == EAGAIN) {
        atomic_store_explicit(&watch.applying, 0, memory_order_release);
        return 0;
    }
    if (n <= 0) {
        watch_fail_locked("read: %s", n == 0 ? "end of file"
                                             : strerror(errno));
        watch_stop_locked();
        atomic_store_explicit(&watch.applying, 0, memory_order_release);
        return 0;
    }

    now = watch_now_ms();

    for (q = buf; q < buf + n; q += sizeof(*ev) + ev->len) {
        ev = (const struct inotify_event *) q;
        if (ev->mask & IN_Q_OVERFLOW) {
            watch_resync_all_locked();
        } else {
            watch_event_locked(ev, now, &touched);
        }
    }

    watch_apply_locked(touched);
    atomic_store_explicit(&watch.applying, 0, memory_order_release);
    return n > (ssize_t) (sizeof(buf) / 2);
}


/* ------------------------------------------------------------------ */
/* The queue of this process                                           */
/* ------------------------------------------------------------------ */

static void
watch_paths_untrust_locked(void)
{
    watch_path  *p;
    size_t       b;

    for (b = 0; b < watch.paths.size; b++) {
        for (p = watch.paths.bucket[b]; p != NULL; p = p->hash_next) {
            watch_interests_drop_locked(p->interests);
            p->interests = NULL;
            p->watched = 0;
            p->resync = 0;
            watch_writing_unlink_locked(p);
            atomic_store_explicit(&p->head.epoch, 0, memory_order_release);
        }
    }
}


/* Every run stats from now on. */
static void
watch_stop_locked(void)
{
    int  fd = watch.fd;

    if (!watch.failed) {
        snprintf(watch_failure, sizeof(watch_failure),
                 "the inotify queue failed: %.200s", watch_why);
    }
    watch.failed = 1;

    atomic_store_explicit(&watch.fd, -1, memory_order_release);
    watch_paths_untrust_locked();
    atomic_store_explicit(&watch.resyncing, 0, memory_order_release);
    if (fd >= 0) {
        close(fd);
    }
}


/*
 * A forked child must not read its parent's queue (they share it), nor
 * trust an epoch it inherited.  It keeps the paths (runs point to them)
 * and may watch them again with a queue of its own.
 */
static void
watch_atfork_prepare(void)
{
    pthread_mutex_lock(&watch.lock);
}


static void
watch_atfork_parent(void)
{
    pthread_mutex_unlock(&watch.lock);
}


static void
watch_atfork_child(void)
{
    int  fd = watch.fd;

    watch.fd = -1;
    watch.failed = 0;
    watch.driven = 0;
    watch.resyncing = 0;
    watch_paths_untrust_locked();
    if (fd >= 0) {
        close(fd);
    }

    pthread_mutex_unlock(&watch.lock);
}


static void
watch_atfork_register(void)
{
    pthread_atfork(watch_atfork_prepare, watch_atfork_parent,
                   watch_atfork_child);
}


static int
watch_start_locked(void)
{
    int  fd;

    if (watch.fd >= 0) {
        return 0;
    }

    if (watch.failed) {
        return -1;
    }

    pthread_once(&watch_atfork_once, watch_atfork_register);

    fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) {
        snprintf(watch_failure, sizeof(watch_failure), "inotify_init1: %s%s",
                 strerror(errno),
                 errno == EMFILE ? " (fs.inotify.max_user_instances)" : "");
        watch.failed = 1;
        return -1;
    }

    atomic_fetch_add_explicit(&watch.instance, 1, memory_order_relaxed);
    atomic_store_explicit(&watch.fd, fd, memory_order_release);
    return 0;
}


static watch_path *
watch_path_get_locked(const char *name)
{
    uint32_t      h = watch_hash(0, name);
    void        **chain = watch_table_chain(&watch.paths, h);
    watch_path   *p;
    size_t        len = strlen(name);

    for (p = chain ? *chain : NULL; p != NULL; p = p->hash_next) {
        if (p->hash == h && strcmp(p->name, name) == 0) {
            return p;
        }
    }

    if (watch_table_reserve(&watch.paths, watch_path_rehash) != 0
        || (p = calloc(1, sizeof(watch_path) + len + 1)) == NULL)
    {
        return NULL;
    }

    memcpy(p->name, name, len + 1);
    p->hash = h;
    watch.resync_bucket = 0;     /* the table may have grown: rescan */
    chain = watch_table_chain(&watch.paths, h);
    p->hash_next = *chain;
    *chain = p;
    watch.paths.count++;
    return p;
}


static watch_path *
watch_add_locked(const char *name)
{
    watch_path  *p;

    if (watch_start_locked() != 0) {
        watch_fail_locked("%s", watch_failure);
        return NULL;
    }

    p = watch_path_get_locked(name);
    if (p == NULL) {
        watch_fail_locked("out of memory");
        return NULL;
    }

    if (!p->watched || p->resync) {
        if (watch_path_locked(p) != 0) {
            return NULL;
        }
        watch_bump_locked(p);
    }

    return p;
}


mrb_file_watch_path *
mrb_file_watch_add(const char *path, char *why, size_t whylen)
{
    watch_path  *p;

    pthread_mutex_lock(&watch.lock);
    p = watch_add_locked(path);
    if (p == NULL) {
        snprintf(why, whylen, "%s", watch_why);
    }
    pthread_mutex_unlock(&watch.lock);

    return p;
}


int
mrb_file_watch_writing(mrb_file_watch_path *path, long *ms)
{
    int  writing;

    pthread_mutex_lock(&watch.lock);
    writing = path->writing;
    if (writing) {
        *ms = (long) (watch_now_ms() - path->write_first_ms);
    }
    pthread_mutex_unlock(&watch.lock);

    return writing;
}


/* ------------------------------------------------------------------ */
/* Asked by each run                                                   */
/* ------------------------------------------------------------------ */

void
mrb_file_watch_poller_close(mrb_file_watch_poller *poller)
{
    if (poller->fd >= 0) {
        close(poller->fd);
        poller->fd = -1;
    }
}


/* poller's epoll on the queue fd, made or remade for the queue of now;
 * -1 if it cannot be made (then the queue is asked). */
static int
watch_poller(mrb_file_watch_poller *poller, int fd)
{
    struct epoll_event  ev;
    unsigned            instance;

    instance = atomic_load_explicit(&watch.instance, memory_order_acquire);
    if (poller->fd >= 0 && poller->instance == instance) {
        return poller->fd;
    }

    mrb_file_watch_poller_close(poller);

    poller->fd = epoll_create1(EPOLL_CLOEXEC);
    if (poller->fd < 0) {
        return -1;
    }

    ev.events = EPOLLIN;
    ev.data.u64 = 0;

    if (epoll_ctl(poller->fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        mrb_file_watch_poller_close(poller);
        return -1;
    }

    poller->instance = instance;
    return poller->fd;
}


/* Whether the queue holds events (or cannot tell). */
static int
watch_pending(mrb_file_watch_poller *poller, int fd)
{
    struct epoll_event  ev;
    int                 epfd = watch_poller(poller, fd);
    int                 n;

    if (epfd >= 0) {
        return epoll_wait(epfd, &ev, 1, 0) != 0;
    }

    return ioctl(fd, FIONREAD, &n) != 0 || n > 0;
}


/*
 * The kernel queues an event before the write or rename that caused it
 * returns, so a run that finds the queue empty knows that nothing changed
 * before it started, unless another thread has just read the event and
 * not yet moved the epoch: then the run waits for that thread's batch
 * (the lock).  The whole queue is read here, however long: a run that
 * waits for it is the one that must see the change.
 */
static void
watch_poll(mrb_file_watch_poller *poller, int driven_too)
{
    int  fd = atomic_load_explicit(&watch.fd, memory_order_acquire);
    int  events, quiet;

    if (fd < 0 || (!driven_too && atomic_load_explicit(&watch.driven,
                                                       memory_order_relaxed)))
    {
        return;
    }

    events = watch_pending(poller, fd);
    quiet = atomic_load_explicit(&watch.nwriting, memory_order_relaxed) != 0
            || atomic_load_explicit(&watch.resyncing, memory_order_relaxed);
    if (!events && !quiet
        && !atomic_load_explicit(&watch.applying, memory_order_acquire))
    {
        return;
    }

    pthread_mutex_lock(&watch.lock);
    if (watch.fd >= 0) {
        while (events && watch_batch_locked()) {
            /* the rest of a long queue */
        }
        if (watch.fd >= 0) {
            watch_quiet_locked(watch_now_ms());
        }
        if (watch.resyncing) {
            watch_resync_slice_locked();
        }
    }
    pthread_mutex_unlock(&watch.lock);
}


void
mrb_file_watch_poll(mrb_file_watch_poller *poller)
{
    watch_poll(poller, 0);
}


/*
 * Asks the queue even when a loop reads it: a run that has just read the
 * file must not wait for the loop to learn of a writer that began
 * meanwhile (an Apache watcher thread scheduled late would let it compile
 * half a file).  A system call on the path that reads a file, not on the
 * path of every run.
 */
int
mrb_file_watch_settled(mrb_file_watch_path *path,
    mrb_file_watch_poller *poller, uint64_t epoch)
{
    int  settled;

    watch_poll(poller, 1);

    pthread_mutex_lock(&watch.lock);
    settled = !path->writing && mrb_file_watch_path_epoch(path) == epoch;
    pthread_mutex_unlock(&watch.lock);

    return settled;
}


/* ------------------------------------------------------------------ */
/* Driven by an event loop                                             */
/* ------------------------------------------------------------------ */

int
mrb_file_watch_start(char *why, size_t whylen)
{
    int  fd;

    pthread_mutex_lock(&watch.lock);
    if (watch_start_locked() == 0) {
        fd = watch.fd;
        atomic_store_explicit(&watch.driven, 1, memory_order_release);
    } else {
        fd = -1;
        snprintf(why, whylen, "%s", watch_failure);
    }
    pthread_mutex_unlock(&watch.lock);

    return fd;
}


void
mrb_file_watch_stop_driving(void)
{
    atomic_store_explicit(&watch.driven, 0, memory_order_release);
}


long
mrb_file_watch_process(void)
{
    long  rc = MRB_FILE_WATCH_GONE;
    int   more = 0;

    pthread_mutex_lock(&watch.lock);
    if (watch.fd >= 0) {
        more = watch_batch_locked();
    }
    if (watch.fd >= 0) {
        rc = watch_quiet_locked(watch_now_ms());
        if (watch.resyncing) {
            more |= watch_resync_slice_locked();
        }
    }
    pthread_mutex_unlock(&watch.lock);

    return more ? MRB_FILE_WATCH_MORE : rc;
}


/* ------------------------------------------------------------------ */
/* Limits                                                              */
/* ------------------------------------------------------------------ */

static long
watch_read_limit(const char *name)
{
    char   path[96];
    long   v = -1;
    FILE  *f;

    snprintf(path, sizeof(path), "/proc/sys/fs/inotify/%s", name);
    f = fopen(path, "re");
    if (f == NULL) {
        return -1;
    }
    if (fscanf(f, "%ld", &v) != 1) {
        v = -1;
    }
    fclose(f);
    return v;
}


int
mrb_file_watch_check_limits(size_t scripts, size_t watches, size_t processes,
    char *msg, size_t msglen)
{
    long    max_watches = watch_read_limit("max_user_watches");
    long    max_instances = watch_read_limit("max_user_instances");
    size_t  total = watches * processes, fit;

    if (max_watches < 0 || max_instances < 0) {
        snprintf(msg, msglen, "%zu stat scripts: cannot read "
                 "/proc/sys/fs/inotify limits", scripts);
        return -1;
    }

    if (total <= (size_t) max_watches && processes <= (size_t) max_instances) {
        snprintf(msg, msglen, "%zu stat scripts need %zu inotify watches "
                 "in each of %zu processes (%zu of fs.inotify."
                 "max_user_watches %ld, shared by the user's programs; "
                 "%zu of max_user_instances %ld)", scripts, watches,
                 processes, total, max_watches, processes, max_instances);
        return 0;
    }

    /* scripts past the limit, in proportion (paths share directories) */
    fit = watches ? (size_t) max_watches / processes * scripts / watches : 0;
    snprintf(msg, msglen, "%zu stat scripts need %zu inotify watches in "
             "each of %zu processes (%zu) and %zu inotify instances, over "
             "fs.inotify.max_user_watches %ld or max_user_instances %ld: "
             "about %zu scripts per process will be stat()ed on every run "
             "(raise with sysctl fs.inotify.max_user_watches=%zu "
             "fs.inotify.max_user_instances=%zu)", scripts, watches,
             processes, total, processes, max_watches, max_instances,
             scripts > fit ? scripts - fit : 0,
             total * 2 > (size_t) max_watches ? total * 2
                                               : (size_t) max_watches,
             processes * 2 > (size_t) max_instances ? processes * 2
                                                     : (size_t) max_instances);
    return 1;
}
