/*
 * AArch64: raw system calls and the clone3() child entry.
 *
 * The child of a CLONE_VM clone shares the parent thread's TLS, so it must not
 * go through glibc's syscall() (which writes errno). These return the kernel's
 * value as is: a negative errno on failure.
 */
#ifndef RS_ARCH_AARCH64_H
#define RS_ARCH_AARCH64_H

static inline long rs_sys1(long n, long a)
{
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    __asm__ volatile ("svc 0" : "+r"(x0) : "r"(x8) : "memory", "cc");
    return x0;
}

static inline long rs_sys2(long n, long a, long b)
{
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    __asm__ volatile ("svc 0" : "+r"(x0) : "r"(x8), "r"(x1) : "memory", "cc");
    return x0;
}

static inline long rs_sys3(long n, long a, long b, long c)
{
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    __asm__ volatile ("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2)
                      : "memory", "cc");
    return x0;
}

static inline long rs_sys4(long n, long a, long b, long c, long d)
{
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    __asm__ volatile ("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3)
                      : "memory", "cc");
    return x0;
}

static inline long rs_sys5(long n, long a, long b, long c, long d, long e)
{
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    __asm__ volatile ("svc 0" : "+r"(x0)
                      : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4)
                      : "memory", "cc");
    return x0;
}

#ifdef RS_DEFINE_CLONE3_ENTRY
/*
 * long rs_clone3_entry(struct clone_args *args, size_t size,
 *                      int (*fn)(void *), void *arg);
 *
 * The child starts on the new stack with the parent's registers but x0 (0)
 * and sp; there is no frame to return to, so it calls fn(arg) from here and
 * exits with its value. fn and arg ride in x10/x11, which svc preserves.
 */
__asm__(
    ".text\n"
    ".globl rs_clone3_entry\n"
    ".hidden rs_clone3_entry\n"
    ".p2align 2\n"
    ".type rs_clone3_entry,%function\n"
    "rs_clone3_entry:\n"
    "    mov x10, x2\n"
    "    mov x11, x3\n"
    "    mov x8, #435\n"            /* __NR_clone3 */
    "    svc #0\n"
    "    cbz x0, 1f\n"
    "    ret\n"
    "1:  mov x29, xzr\n"            /* outermost frame for unwinders */
    "    mov x30, xzr\n"
    "    mov x0, x11\n"
    "    blr x10\n"
    "    mov x8, #93\n"             /* __NR_exit */
    "    svc #0\n"
    "    brk #0\n"
    ".size rs_clone3_entry, .-rs_clone3_entry\n"
);
#endif

#endif
