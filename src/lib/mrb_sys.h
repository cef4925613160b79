/*
 * The library's classes over the operating system: ENV, Process, Dir,
 * Uname, and Kernel's usleep and exit.
 */

#ifndef MRB_SYS_H
#define MRB_SYS_H

#include <mruby.h>

/* Raises SystemCallError "what: strerror(errno)". */
void mrb_lib_sys_fail(mrb_state *mrb, const char *what);

void mrb_env_define(mrb_state *mrb);
void mrb_process_define(mrb_state *mrb);
void mrb_dir_define(mrb_state *mrb);
void mrb_uname_define(mrb_state *mrb);
void mrb_kernel_ext_define(mrb_state *mrb);

#endif /* MRB_SYS_H */
