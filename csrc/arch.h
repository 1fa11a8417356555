/*
 * Per architecture (arch/): raw system calls (rs_sys1..rs_sys5, which return
 * -errno and never touch errno) and the clone3() entry (rs_clone3_entry, with
 * RS_DEFINE_CLONE3_ENTRY). No generic fallback: the child cannot make a
 * system call without them, so any other architecture stops here.
 */
#ifndef RS_ARCH_H
#define RS_ARCH_H

#include <sys/syscall.h>

#if defined(__x86_64__)
#  include "arch/x86_64.h"
#elif defined(__aarch64__)
#  include "arch/aarch64.h"
#else
#  error "rdmaspawn supports x86-64 and aarch64 Linux"
#endif

/* Numbers newer than some kernel headers; identical on both architectures. */
#ifndef SYS_clone3
#  define SYS_clone3 435
#endif
#ifndef SYS_close_range
#  define SYS_close_range 436
#endif

#endif
