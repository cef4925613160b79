/*
 * Shared dictionaries in files (Cache.new): a zone in a file that every
 * process maps with MAP_SHARED, so that any worker can make a store or
 * find one another made, at any time, with no declaration and no parent.
 *
 * A store is made whole before anyone can open it: the zone is formatted
 * in a temporary file of the same directory (mkstemp, so O_EXCL), which is
 * then linked to the store's name.  link() fails when the name exists, so
 * of two processes making the same store at once one wins and the other
 * drops its file and opens the winner's; a process that opens a name
 * always finds a formatted zone, and no lock is needed to decide who makes
 * it.  A process killed while making one leaves only a temporary file.
 *
 * Each process keeps the stores it opened (a list under a mutex, as Apache
 * runs scripts on several threads) and does not unmap them while it may run
 * scripts, so that opening the same store on every request costs a string
 * comparison, and a Ruby object may keep a reference as long as it likes.
 * Children forked after an open share the mapping and the list.  Only a
 * process that unloads the module (Apache's parent on a restart) unmaps
 * them, first (mrb_shdict_file_close_all).
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "mrb_shdict_file.h"

#define SHD_FILE_SUFFIX  ".cache"

typedef struct shd_file_s  shd_file;

struct shd_file_s {
    shd_file        *next;
    mrb_shdict_ref  *ref;
    char             path[];
};

static pthread_mutex_t   shd_file_mutex = PTHREAD_MUTEX_INITIALIZER;
static shd_file         *shd_files;
static char             *shd_file_dir;
static long              shd_file_uid = -1;
static long              shd_file_gid = -1;


int
mrb_shdict_file_set_dir(const char *dir, long uid, long gid, char *err,
    size_t errlen)
{
    int    made;
    char  *copy;

    if (dir[0] != '/') {
        snprintf(err, errlen, "the Cache directory \"%s\" is not an "
                 "absolute path", dir);
        return -1;
    }

    copy = strdup(dir);
    if (copy == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }

    pthread_mutex_lock(&shd_file_mutex);
    free(shd_file_dir);
    shd_file_dir = copy;
    shd_file_uid = uid;
    shd_file_gid = gid;
    pthread_mutex_unlock(&shd_file_mutex);

    made = mkdir(dir, 0700) == 0;

    if (!made && errno != EEXIST) {
        snprintf(err, errlen, "cannot make the Cache directory \"%s\": %s",
                 dir, strerror(errno));
        return -1;
    }

    if (made && geteuid() == 0 && uid != -1
        && chown(dir, (uid_t) uid, (gid_t) gid) != 0)
    {
        snprintf(err, errlen, "cannot give the Cache directory \"%s\" to "
                 "the workers' user: %s", dir, strerror(errno));
        return -1;
    }

    return 0;
}


static int
shd_file_name_valid(const char *name, size_t len)
{
    size_t  i;

    if (len == 0 || len > MRB_SHDICT_FILE_NAME_MAX || name[0] == '.') {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if (!((name[i] >= 'a' && name[i] <= 'z')
              || (name[i] >= 'A' && name[i] <= 'Z')
              || (name[i] >= '0' && name[i] <= '9')
              || name[i] == '_' || name[i] == '-' || name[i] == '.'))
        {
            return 0;
        }
    }

    return 1;
}


/* Maps the zone in fd, a file of size bytes. */
static mrb_shdict_zone *
shd_file_map(int fd, size_t size, const char *path, char *err, size_t errlen)
{
    void             *mem;
    mrb_shdict_zone  *z;

    mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

    if (mem == MAP_FAILED) {
        snprintf(err, errlen, "cannot map \"%s\" (%zu bytes): %s", path,
                 size, strerror(errno));
        return NULL;
    }

    z = mrb_shdict_zone_attach(mem, size);

    if (z == NULL) {
        snprintf(err, errlen, "\"%s\" is not a Cache store of this version "
                 "of the module: remove it, or name another file", path);
        munmap(mem, size);
    }

    return z;
}


/*
 * Makes the store at path, of size bytes: formatted in a temporary file
 * that is then linked to path.  1 when made, 0 when path exists (someone
 * else made it first), -1 on failure.
 */
static int
shd_file_make(const char *path, size_t size, char *err, size_t errlen)
{
    int               fd, rc, e;
    char             *tmp;
    void             *mem;
    size_t            len;
    const char       *slash;

    /* ".<name>.XXXXXX" beside path (absolute): the same file system, so
     * that link works */
    len = strlen(path);
    tmp = malloc(len + sizeof("..XXXXXX"));
    if (tmp == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }

    slash = strrchr(path, '/');
    sprintf(tmp, "%.*s/.%s.XXXXXX", (int) (slash - path), path, slash + 1);

    rc = -1;
    mem = MAP_FAILED;

    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd == -1) {
        snprintf(err, errlen, "cannot make a Cache store beside \"%s\": %s",
                 path, strerror(errno));
        free(tmp);
        return -1;
    }

    if (geteuid() == 0 && shd_file_uid != -1
        && fchown(fd, (uid_t) shd_file_uid, (gid_t) shd_file_gid) != 0)
    {
        snprintf(err, errlen, "cannot give \"%s\" to the workers' user: %s",
                 tmp, strerror(errno));
        goto done;
    }

    /* the blocks are taken now, not at the first write to each page: a
     * file system too small for the store (a tmpfs) is this error, where a
     * sparse file would kill the process that wrote to it (SIGBUS) */
    e = posix_fallocate(fd, 0, (off_t) size);
    if (e != 0) {
        snprintf(err, errlen, "cannot make the Cache store \"%s\" of %zu "
                 "bytes: %s", path, size, strerror(e));
        goto done;
    }

    mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED) {
        snprintf(err, errlen, "cannot map \"%s\" (%zu bytes): %s", tmp,
                 size, strerror(errno));
        goto done;
    }

    if (mrb_shdict_zone_init(mem, size) == NULL) {
        snprintf(err, errlen, "cannot create a process-shared mutex");
        goto done;
    }

    if (link(tmp, path) == 0) {
        rc = 1;

    } else if (errno == EEXIST) {
        rc = 0;

    } else {
        snprintf(err, errlen, "cannot make the Cache store \"%s\": %s", path,
                 strerror(errno));
    }

done:

    if (mem != MAP_FAILED) {
        munmap(mem, size);
    }

    close(fd);
    unlink(tmp);
    free(tmp);
    return rc;
}


/* Opens the store at path, making it if it is not there; with the lock. */
static mrb_shdict_file_rc
shd_file_open_locked(const char *path, const char *name, size_t size,
    mrb_shdict_ref **ref, char *err, size_t errlen)
{
    int                fd, tries;
    size_t             len;
    shd_file          *f;
    struct stat        st;
    mrb_shdict_zone   *z;

    for (f = shd_files; f != NULL; f = f->next) {
        if (strcmp(f->path, path) == 0) {
            *ref = f->ref;
            return MRB_SHDICT_FILE_OK;
        }
    }

    /* a second try covers a store made by another process between our
     * open and our link */
    for (tries = 0; ; tries++) {
        fd = open(path, O_RDWR | O_CLOEXEC);

        if (fd != -1 || errno != ENOENT || tries == 2) {
            break;
        }

        if (shd_file_make(path, size, err, errlen) == -1) {
            return MRB_SHDICT_FILE_FAILED;
        }
    }

    if (fd == -1) {
        snprintf(err, errlen, "cannot open the Cache store \"%s\": %s", path,
                 strerror(errno));
        return MRB_SHDICT_FILE_FAILED;
    }

    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "\"%s\" is not a regular file", path);
        close(fd);
        return MRB_SHDICT_FILE_FAILED;
    }

    z = NULL;
    if ((uint64_t) st.st_size < MRB_SHDICT_MIN_SIZE
        || (uint64_t) st.st_size > MRB_SHDICT_MAX_SIZE)
    {
        snprintf(err, errlen, "\"%s\" is not a Cache store of this version "
                 "of the module: remove it, or name another file", path);
    } else {
        z = shd_file_map(fd, (size_t) st.st_size, path, err, errlen);
    }

    /* the mapping keeps the file */
    close(fd);

    if (z == NULL) {
        return MRB_SHDICT_FILE_FAILED;
    }

    len = strlen(path);
    f = malloc(sizeof(shd_file) + len + 1);
    *ref = mrb_shdict_ref_new(name, z, (size_t) st.st_size);

    if (f == NULL || *ref == NULL) {
        free(f);
        free(*ref);
        munmap(z, (size_t) st.st_size);
        snprintf(err, errlen, "out of memory");
        return MRB_SHDICT_FILE_FAILED;
    }

    memcpy(f->path, path, len + 1);
    f->ref = *ref;
    f->next = shd_files;
    shd_files = f;

    return MRB_SHDICT_FILE_OK;
}


static mrb_shdict_file_rc
shd_file_check_size(size_t size, char *err, size_t errlen)
{
    if (size < MRB_SHDICT_MIN_SIZE || size > MRB_SHDICT_MAX_SIZE) {
        snprintf(err, errlen, "a Cache store's size is 32k to 4095m, not "
                 "%zu bytes", size);
        return MRB_SHDICT_FILE_BAD_ARGUMENT;
    }

    return MRB_SHDICT_FILE_OK;
}


mrb_shdict_file_rc
mrb_shdict_file_open_namespace(const char *name, size_t len, size_t size,
    mrb_shdict_ref **ref, char *err, size_t errlen)
{
    char                *path, label[MRB_SHDICT_FILE_NAME_MAX + 1];
    mrb_shdict_file_rc   rc;

    if (!shd_file_name_valid(name, len)) {
        snprintf(err, errlen, "invalid Cache namespace \"%.*s\" (1 to %d "
                 "letters, digits, '_', '-' or '.', not starting with '.')",
                 (int) (len > 128 ? 128 : len), name,
                 MRB_SHDICT_FILE_NAME_MAX);
        return MRB_SHDICT_FILE_BAD_ARGUMENT;
    }

    rc = shd_file_check_size(size, err, errlen);
    if (rc != MRB_SHDICT_FILE_OK) {
        return rc;
    }

    pthread_mutex_lock(&shd_file_mutex);

    if (shd_file_dir == NULL) {
        snprintf(err, errlen, "no directory for Cache namespaces is set "
                 "in this process");
        rc = MRB_SHDICT_FILE_FAILED;
        goto done;
    }

    path = malloc(strlen(shd_file_dir) + len + sizeof("/" SHD_FILE_SUFFIX));
    if (path == NULL) {
        snprintf(err, errlen, "out of memory");
        rc = MRB_SHDICT_FILE_FAILED;
        goto done;
    }

    sprintf(path, "%s/%.*s" SHD_FILE_SUFFIX, shd_file_dir, (int) len, name);
    snprintf(label, sizeof(label), "%.*s", (int) len, name);

    rc = shd_file_open_locked(path, label, size, ref, err, errlen);
    free(path);

done:

    pthread_mutex_unlock(&shd_file_mutex);
    return rc;
}


mrb_shdict_file_rc
mrb_shdict_file_open_path(const char *path, size_t len, size_t size,
    mrb_shdict_ref **ref, char *err, size_t errlen)
{
    char                *p;
    const char          *base;
    mrb_shdict_file_rc   rc;

    if (len < 2 || path[0] != '/' || path[len - 1] == '/'
        || memchr(path, '\0', len) != NULL)
    {
        snprintf(err, errlen, "invalid Cache file name \"%.*s\" (an "
                 "absolute path of a file)", (int) (len > 128 ? 128 : len),
                 path);
        return MRB_SHDICT_FILE_BAD_ARGUMENT;
    }

    rc = shd_file_check_size(size, err, errlen);
    if (rc != MRB_SHDICT_FILE_OK) {
        return rc;
    }

    p = strndup(path, len);
    if (p == NULL) {
        snprintf(err, errlen, "out of memory");
        return MRB_SHDICT_FILE_FAILED;
    }

    base = strrchr(p, '/') + 1;

    pthread_mutex_lock(&shd_file_mutex);
    rc = shd_file_open_locked(p, base, size, ref, err, errlen);
    pthread_mutex_unlock(&shd_file_mutex);

    free(p);
    return rc;
}


void
mrb_shdict_file_close_all(void)
{
    shd_file  *f, *next;

    pthread_mutex_lock(&shd_file_mutex);

    for (f = shd_files; f != NULL; f = next) {
        next = f->next;
        munmap(mrb_shdict_ref_zone(f->ref), mrb_shdict_ref_size(f->ref));
        free(f->ref);
        free(f);
    }

    shd_files = NULL;
    free(shd_file_dir);
    shd_file_dir = NULL;

    pthread_mutex_unlock(&shd_file_mutex);
}
