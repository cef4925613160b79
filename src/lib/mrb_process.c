/*
 * Process: pid, ppid, kill (iij/mruby-process's names).  A script cannot
 * fork, wait or exit a server's worker: those are left out on purpose.
 */

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <mruby.h>
#include <mruby/array.h>
#include <mruby/class.h>
#include <mruby/string.h>

#include "mrb_api.h"
#include "mrb_sys.h"

static const struct {
    const char  *name;
    int          signo;
} process_signals[] = {
    { "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT },
    { "KILL", SIGKILL }, { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 },
    { "PIPE", SIGPIPE }, { "ALRM", SIGALRM }, { "TERM", SIGTERM },
    { "CHLD", SIGCHLD }, { "CONT", SIGCONT }, { "STOP", SIGSTOP },
    { "TSTP", SIGTSTP }, { "WINCH", SIGWINCH }, { "EXIT", 0 },
};


void
mrb_lib_sys_fail(mrb_state *mrb, const char *what)
{
    int  err = errno;

    mrb_raisef(mrb, mrb_class_get(mrb, "SystemCallError"), "%s: %s", what,
               strerror(err));
}


/*
 * SystemCallError._sys_fail(errno[, what]): mruby's mrb_sys_fail (File,
 * IO, Socket) calls it whenever SystemCallError is defined, so defining
 * the class without it turned every failed File.open into a NoMethodError.
 */
static mrb_value
sys_fail_m(mrb_state *mrb, mrb_value self)
{
    mrb_int      no;
    const char  *what = NULL;

    mrb_get_args(mrb, "i|z!", &no, &what);

    if (what != NULL) {
        mrb_raisef(mrb, mrb_class_ptr(self), "%s: %s", what,
                   strerror((int) no));
    }

    mrb_raise(mrb, mrb_class_ptr(self), strerror((int) no));
    return mrb_nil_value();
}


static const mrb_api_method  sys_fail_methods[] = {
    { "_sys_fail", sys_fail_m, MRB_ARGS_ARG(1, 1) },
    MRB_API_METHOD_END
};


static int
process_signo(mrb_state *mrb, mrb_value sig)
{
    const char  *name;
    size_t       i;

    if (mrb_integer_p(sig)) {
        return (int) mrb_integer(sig);
    }

    if (mrb_symbol_p(sig)) {
        sig = mrb_sym_str(mrb, mrb_symbol(sig));
    }
    name = mrb_str_to_cstr(mrb, mrb_str_to_str(mrb, sig));
    if (strncmp(name, "SIG", 3) == 0) {
        name += 3;
    }

    for (i = 0; i < sizeof(process_signals) / sizeof(process_signals[0]); i++) {
        if (strcmp(name, process_signals[i].name) == 0) {
            return process_signals[i].signo;
        }
    }

    mrb_raisef(mrb, E_ARGUMENT_ERROR, "unsupported signal 'SIG%s'", name);
    return -1;
}


static mrb_value
process_pid(mrb_state *mrb, mrb_value self)
{
    return mrb_fixnum_value((mrb_int) getpid());
}


static mrb_value
process_ppid(mrb_state *mrb, mrb_value self)
{
    return mrb_fixnum_value((mrb_int) getppid());
}


/* Process.kill(signal, pid, ...): the number of processes signalled. */
static mrb_value
process_kill(mrb_state *mrb, mrb_value self)
{
    mrb_value  sig, *pids;
    mrb_int    n, i;
    int        signo;

    mrb_get_args(mrb, "o*", &sig, &pids, &n);
    signo = process_signo(mrb, sig);

    for (i = 0; i < n; i++) {
        if (kill((pid_t) mrb_as_int(mrb, pids[i]), signo) != 0) {
            mrb_lib_sys_fail(mrb, "kill");
        }
    }
    return mrb_fixnum_value(n);
}


static const mrb_api_method  process_functions[] = {
    { "pid",   process_pid,   MRB_ARGS_NONE() },
    { "ppid",  process_ppid,  MRB_ARGS_NONE() },
    { "kill",  process_kill,  MRB_ARGS_ARG(1, 0) | MRB_ARGS_REST() },
    MRB_API_METHOD_END
};


void
mrb_process_define(mrb_state *mrb)
{
    struct RClass  *sce;

    mrb_api_define_module(mrb, NULL, "Process", process_functions);
    sce = mrb_class_defined(mrb, "SystemCallError")
          ? mrb_class_get(mrb, "SystemCallError")
          : mrb_api_define_class(mrb, NULL, "SystemCallError",
                                 mrb->eStandardError_class, NULL);
    mrb_api_define_class_methods(mrb, sce, sys_fail_methods);
}
