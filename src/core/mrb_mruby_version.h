/*
 * The mruby release this code is written against, and a build error on any
 * other.  A file that leans on more than mruby's MRB_API (a private struct
 * layout, the VM's top-level protocol, a field of mrb_callinfo) includes
 * this header: another libmruby then fails the build instead of corrupting
 * memory at run time.  Before changing the number, check what
 * docs/architecture.md lists under "The mruby version contract".
 */

#ifndef MRB_MRUBY_VERSION_H
#define MRB_MRUBY_VERSION_H

#include <mruby/version.h>

#define MRB_MRUBY_RELEASE_NO  30100

#if MRUBY_RELEASE_NO != MRB_MRUBY_RELEASE_NO
#error "written against mruby 3.1.0's insides: see docs/architecture.md, \"The mruby version contract\""
#endif

#endif /* MRB_MRUBY_VERSION_H */
