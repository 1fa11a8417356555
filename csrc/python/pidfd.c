/*
 * The pidfd hand-over. fork_exec must return a bare pid, as CPython's does;
 * rdmaspawn.Popen gets the child's pidfd beside it, per thread (a Python
 * thread is one OS thread): it requests one, fork_exec.c (or posix_spawn.c,
 * for _posix_spawn's plain call) sees the request and hands the spawn's
 * pidfd over, and Popen takes it. Python calls these through functions.c's
 * builtins, or through the cffi cdef where ctypes cannot load the module. A
 * file of its own, as fork_exec.c, posix_spawn.c and functions.c use it,
 * and none of them another's part.
 */
#include "binding.h"

static __thread int pidfd_wanted;
static __thread int pidfd_handed = -1;

void rs_pidfd_request(void)
{
    pidfd_wanted = 1;
    pidfd_handed = -1;
}

int rs_pidfd_requested(void)
{
    return pidfd_wanted;
}

void rs_pidfd_hand(int pidfd)
{
    pidfd_handed = pidfd;
}

int rs_pidfd_take(void)
{
    int fd = pidfd_handed;
    pidfd_wanted = 0;
    pidfd_handed = -1;
    return fd;
}
