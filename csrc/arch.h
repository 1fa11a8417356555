/*
 * What the platform has: raw system calls for the child, and whether the
 * clone3() entry exists. Other architectures build with the glibc clone()
 * path only (and still no errno writes where the wrappers below are used).
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
