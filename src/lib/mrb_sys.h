/*
 * The library's classes over the operating system: ENV, Process, Dir,
 * Uname, and Kernel's sleep and exit.
 */

#ifndef MRB_SYS_H
#define MRB_SYS_H

#include <mruby.h>

/* Raises SystemCallError "what: strerror(errno)". */
void mrb_lib_sys_fail(mrb_state *mrb, const char *what);

/*
 * Kernel#sleep and #usleep end here: blocks the calling thread for now.
 * The one function a coroutine-aware server replaces to suspend the
 * request instead.
 */
void mrb_lib_sleep(mrb_state *mrb, double seconds);

void mrb_env_define(mrb_state *mrb);
void mrb_process_define(mrb_state *mrb);
void mrb_dir_define(mrb_state *mrb);
void mrb_uname_define(mrb_state *mrb);
void mrb_kernel_ext_define(mrb_state *mrb);

#endif /* MRB_SYS_H */
