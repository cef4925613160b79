/*
 * The watch of unit_secret.h.
 */

#define _GNU_SOURCE  /* memmem, RTLD_NEXT */

#include <dlfcn.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include "unit_secret.h"

static const char  *secret;
static size_t       secret_len;
static int          secret_freed;


void
unit_secret_watch(const char *s)
{
    secret = s;
    secret_len = strlen(s);
    secret_freed = 0;
}


int
unit_secret_end(void)
{
    secret = NULL;
    return secret_freed;
}


static void
secret_look(const void *p, size_t len)
{
    if (secret != NULL && p != NULL
        && memmem(p, len, secret, secret_len) != NULL)
    {
        secret_freed++;
    }
}


void __real_free(void *p);
void *__real_realloc(void *p, size_t size);
void __real_redisFreeCommand(char *cmd);


void
__wrap_free(void *p)
{
    if (secret != NULL && p != NULL) {
        secret_look(p, malloc_usable_size(p));
    }

    __real_free(p);
}


void *
__wrap_realloc(void *p, size_t size)
{
    if (secret != NULL && p != NULL) {
        secret_look(p, malloc_usable_size(p));
    }

    return __real_realloc(p, size);
}


void
__wrap_redisFreeCommand(char *cmd)
{
    if (secret != NULL && cmd != NULL) {
        secret_look(cmd, malloc_usable_size(cmd));
    }

    __real_redisFreeCommand(cmd);
}


/* hiredis' own, interposed: calls from inside libhiredis come here too */
void
sdsfree(sds s)
{
    void  (*next)(sds);

    if (s != NULL) {
        secret_look(s, sdslen(s));
    }

    next = (void (*)(sds)) dlsym(RTLD_NEXT, "sdsfree");
    next(s);
}
