/*
 * Mutex's owners (mrb_mutex.c): which run holds which lock; the rest of
 * Mutex is in mutex.rb.
 */

#ifndef MRB_MUTEX_H
#define MRB_MUTEX_H

#include "mrb_part.h"

extern const mrb_part  mrb_mutex_part;

#endif /* MRB_MUTEX_H */
