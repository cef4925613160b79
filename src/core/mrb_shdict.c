/*
 * The registry of shared dictionaries: zones declared by the configuration
 * and mapped in the parent (Apache) or master (nginx) process before the
 * workers fork, so that every worker shares them.
 *
 * The registry is process-global and outlives configuration reloads: a zone
 * declared again with the same name and size keeps its mapping, so its
 * contents survive `apachectl graceful` and `nginx -s reload`.
 *
 * A reload is read into the registry's "next" side and committed only when
 * the server puts the new configuration in use (mrb_shdict_config_end).
 * nginx reads a configuration and may still refuse it afterwards (a listen
 * address in use): the master then goes on with the old one and forks its
 * replacement workers from it, so the zones they find must be the old
 * ones.  What a refused reload mapped is unmapped by the next one.
 *
 * Apache unloads its modules on every restart and loads them again, maybe
 * a newer build after a package upgrade: the registry's root is then in a
 * block Apache keeps across that (mrb_shdict_keep_in), where the next load
 * finds the zones in use.  The zones hold no pointer, into the module or
 * elsewhere (mrb_shdict_layout.h), so the next build keeps one whose
 * layout it checks to be its own.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "mrb_shdict.h"
#include "mrb_shdict_zone.h"

#define SHD_NAME_MAX  63

/* Read by the next build of the module too: see mrb_shdict_keep_s. */
struct mrb_shdict_ref_s {
    mrb_shdict_ref   *next;
    char              name[SHD_NAME_MAX + 1];

    /* in use: what scripts find */
    size_t            size;
    mrb_shdict_zone  *zone;       /* NULL: not declared (yet, or any more) */

    /* declared by the configuration being read */
    size_t            next_size;
    mrb_shdict_zone  *next_zone;  /* zone itself when the size is kept */
    unsigned          declared:1;
    unsigned          by_default:1; /* made by a startup script, not declared */
};

/*
 * The registry's root.  Another build of the module loaded into the same
 * process reads it and the mrb_shdict_refs it leads to (an Apache restart
 * after an upgrade): a change to either layout goes with a new
 * MRB_SHDICT_KEEP_NAME, so that a build never reads another's.
 */
struct mrb_shdict_keep_s {
    mrb_shdict_ref  *registry;
    pid_t            config_pid;  /* the process that read the configuration */
};

static mrb_shdict_keep   shd_own_keep;
static mrb_shdict_keep  *shd_keep = &shd_own_keep;


size_t
mrb_shdict_keep_size(void)
{
    return sizeof(mrb_shdict_keep);
}


void
mrb_shdict_keep_in(mrb_shdict_keep *keep)
{
    shd_keep = keep != NULL ? keep : &shd_own_keep;
}


/* Whether the next configuration can go on with r's zone: it is mapped
 * and, when a build before this one made it, laid out as this build does. */
static int
shd_zone_kept(const mrb_shdict_ref *r)
{
    return r->zone != NULL && mrb_shdict_zone_attach(r->zone, r->size) != NULL;
}


static mrb_shdict_zone *
shd_map(size_t size, char *err, size_t errlen)
{
    void             *mem;
    mrb_shdict_zone  *z;

    mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
               -1, 0);

    if (mem == MAP_FAILED) {
        snprintf(err, errlen, "mmap(%zu bytes) failed: %s", size,
                 strerror(errno));
        return NULL;
    }

    z = mrb_shdict_zone_init(mem, size);

    if (z == NULL) {
        snprintf(err, errlen, "cannot create a process-shared mutex");
        munmap(mem, size);
        return NULL;
    }

    return z;
}


static int
shd_name_valid(const char *name)
{
    size_t  i;

    for (i = 0; name[i] != '\0'; i++) {
        if (i == SHD_NAME_MAX
            || !(isalnum((unsigned char) name[i]) || name[i] == '_'
                 || name[i] == '-' || name[i] == '.'))
        {
            return 0;
        }
    }

    return i != 0;
}


/* Unmaps what the configuration being read mapped, if it is not in use. */
static void
shd_next_drop(mrb_shdict_ref *r)
{
    if (r->next_zone != NULL && r->next_zone != r->zone) {
        munmap(r->next_zone, r->next_size);
    }

    r->next_zone = NULL;
    r->next_size = 0;
    r->declared = 0;
}


void
mrb_shdict_config_begin(void)
{
    mrb_shdict_ref  *r;

    /* a configuration read before and never put in use (a refused reload)
     * leaves its zones here */
    for (r = shd_keep->registry; r != NULL; r = r->next) {
        shd_next_drop(r);

        /* what a startup script made stays, contents and all, as if the
         * configuration declared it */
        if (r->by_default && shd_zone_kept(r)) {
            r->next_zone = r->zone;
            r->next_size = r->size;
            r->declared = 1;
        }
    }
}


int
mrb_shdict_zone_add(const char *name, size_t size, char *err, size_t errlen)
{
    mrb_shdict_ref   *r;
    mrb_shdict_zone  *z;

    if (!shd_name_valid(name)) {
        snprintf(err, errlen, "invalid shared dictionary name \"%s\" "
                 "(1 to %d letters, digits, '_', '-' or '.')", name,
                 SHD_NAME_MAX);
        return -1;
    }

    if (size < MRB_SHDICT_MIN_SIZE || size > MRB_SHDICT_MAX_SIZE) {
        snprintf(err, errlen, "shared dictionary \"%s\": size %zu is out of "
                 "range (32k to 4095m)", name, size);
        return -1;
    }

    r = mrb_shdict_find(name, strlen(name));

    if (r != NULL && r->declared) {
        if (r->next_size != size) {
            snprintf(err, errlen, "shared dictionary \"%s\" is declared "
                     "twice with different sizes (%zu and %zu)", name,
                     r->next_size, size);
            return -1;
        }

        return 0;
    }

    if (r != NULL && r->size == size && shd_zone_kept(r)) {
        /* a reload: same zone, same contents */
        r->next_zone = r->zone;
        r->next_size = size;
        r->declared = 1;
        return 0;
    }

    z = shd_map(size, err, errlen);
    if (z == NULL) {
        return -1;
    }

    if (r == NULL) {
        r = calloc(1, sizeof(mrb_shdict_ref));
        if (r == NULL) {
            munmap(z, size);
            snprintf(err, errlen, "out of memory");
            return -1;
        }

        memcpy(r->name, name, strlen(name) + 1);
        r->next = shd_keep->registry;
        shd_keep->registry = r;
    }

    r->next_zone = z;
    r->next_size = size;
    r->declared = 1;

    return 0;
}


/*
 * The configuration read since mrb_shdict_config_begin is in use.  A zone
 * it resized or dropped is unmapped here: workers of the old configuration
 * keep their own mapping of it until they exit.
 */
void
mrb_shdict_config_end(void)
{
    mrb_shdict_ref  *r;

    for (r = shd_keep->registry; r != NULL; r = r->next) {
        if (r->zone != NULL && r->zone != r->next_zone) {
            munmap(r->zone, r->size);
        }

        r->zone = r->next_zone;
        r->size = r->zone != NULL ? r->next_size : 0;
        r->next_zone = NULL;
        r->next_size = 0;
        r->declared = 0;
    }

    shd_keep->config_pid = getpid();
}


mrb_shdict_ref *
mrb_shdict_open_default(const char *name, size_t len, char *err,
    size_t errlen)
{
    mrb_shdict_ref  *r;
    char             z[SHD_NAME_MAX + 1];

    if (getpid() != shd_keep->config_pid) {
        snprintf(err, errlen, "only a startup script of the server's parent "
                 "or master process (post_config, mruby_init) can make a "
                 "shared dictionary nobody declared");
        return NULL;
    }

    if (len > SHD_NAME_MAX || memchr(name, '\0', len) != NULL) {
        snprintf(err, errlen, "invalid shared dictionary name");
        return NULL;
    }

    memcpy(z, name, len);
    z[len] = '\0';

    if (mrb_shdict_zone_add(z, MRB_SHDICT_DEFAULT_SIZE, err, errlen) != 0) {
        return NULL;
    }

    /* in use now, not at the next mrb_shdict_config_end */
    r = mrb_shdict_find(name, len);
    r->zone = r->next_zone;
    r->size = r->next_size;
    r->next_zone = NULL;
    r->next_size = 0;
    r->declared = 0;
    r->by_default = 1;
    return r;
}


int
mrb_shdict_parse_size(const char *s, size_t *size)
{
    char                *end;
    unsigned long long   n, unit;

    if (!isdigit((unsigned char) *s)) {
        return -1;
    }

    errno = 0;
    n = strtoull(s, &end, 10);

    if (errno != 0) {
        return -1;
    }

    switch (*end) {
    case 'k': case 'K':
        unit = 1024;
        end++;
        break;
    case 'm': case 'M':
        unit = 1024 * 1024;
        end++;
        break;
    case 'g': case 'G':
        unit = 1024 * 1024 * 1024;
        end++;
        break;
    default:
        unit = 1;
        break;
    }

    if (*end != '\0' || n > SIZE_MAX / unit) {
        return -1;
    }

    *size = (size_t) (n * unit);
    return 0;
}


mrb_shdict_ref *
mrb_shdict_find(const char *name, size_t len)
{
    mrb_shdict_ref  *r;

    for (r = shd_keep->registry; r != NULL; r = r->next) {
        if (strlen(r->name) == len && memcmp(r->name, name, len) == 0) {
            return r;
        }
    }

    return NULL;
}


mrb_shdict_ref *
mrb_shdict_ref_next(const mrb_shdict_ref *prev)
{
    return prev != NULL ? prev->next : shd_keep->registry;
}


mrb_shdict_zone *
mrb_shdict_ref_zone(const mrb_shdict_ref *ref)
{
    return ref->zone;
}


const char *
mrb_shdict_ref_name(const mrb_shdict_ref *ref)
{
    return ref->name;
}


size_t
mrb_shdict_ref_size(const mrb_shdict_ref *ref)
{
    return ref->size;
}


mrb_shdict_ref *
mrb_shdict_ref_new(const char *name, mrb_shdict_zone *z, size_t size)
{
    size_t           len;
    mrb_shdict_ref  *r;

    r = calloc(1, sizeof(mrb_shdict_ref));
    if (r == NULL) {
        return NULL;
    }

    len = strlen(name);
    len = len > SHD_NAME_MAX ? SHD_NAME_MAX : len;
    memcpy(r->name, name, len);
    r->zone = z;
    r->size = size;
    return r;
}
