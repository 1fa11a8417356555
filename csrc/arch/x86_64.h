/*
 * x86-64: raw system calls and the clone3() child entry.
 *
 * The child of a CLONE_VM clone shares the parent thread's TLS, so it must not
 * go through glibc's syscall() (which writes errno). These return the kernel's
 * value as is: a negative errno on failure.
 */
#ifndef RS_ARCH_X86_64_H
#define RS_ARCH_X86_64_H

static inline long rs_sys1(long n, long a)
{
    long ret;
    __asm__ volatile ("syscall" : "=a"(ret) : "a"(n), "D"(a)
                      : "rcx", "r11", "memory");
    return ret;
}

static inline long rs_sys2(long n, long a, long b)
{
    long ret;
    __asm__ volatile ("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b)
                      : "rcx", "r11", "memory");
    return ret;
}

static inline long rs_sys3(long n, long a, long b, long c)
{
    long ret;
    __asm__ volatile ("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c)
                      : "rcx", "r11", "memory");
    return ret;
}

static inline long rs_sys4(long n, long a, long b, long c, long d)
{
    long ret;
    register long r10 __asm__("r10") = d;
    __asm__ volatile ("syscall" : "=a"(ret)
                      : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
                      : "rcx", "r11", "memory");
    return ret;
}

static inline long rs_sys5(long n, long a, long b, long c, long d, long e)
{
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    __asm__ volatile ("syscall" : "=a"(ret)
                      : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                      : "rcx", "r11", "memory");
    return ret;
}

#ifdef RS_DEFINE_CLONE3_ENTRY
/*
 * long rs_clone3_entry(struct clone_args *args, size_t size,
 *                      int (*fn)(void *), void *arg);
 *
 * clone3() starts the child on the new stack with every register as the
 * parent had it but rax (0) and rsp, so a C function cannot simply return in
 * the child: there is no frame to return to. The child keeps fn and arg in
 * r8/r9 (the syscall preserves them), calls fn(arg) and exits with its value.
 * The parent gets the pid or a negative errno.
 */
__asm__(
    ".text\n"
    ".globl rs_clone3_entry\n"
    ".hidden rs_clone3_entry\n"
    ".p2align 4\n"
    ".type rs_clone3_entry,@function\n"
    "rs_clone3_entry:\n"
    "    mov %rdx, %r8\n"
    "    mov %rcx, %r9\n"
    "    mov $435, %eax\n"          /* __NR_clone3 */
    "    syscall\n"
    "    test %rax, %rax\n"
    "    jz 1f\n"
    "    ret\n"
    "1:  xor %ebp, %ebp\n"          /* outermost frame for unwinders */
    "    and $-16, %rsp\n"
    "    mov %r9, %rdi\n"
    "    call *%r8\n"
    "    mov %eax, %edi\n"
    "    mov $60, %eax\n"           /* __NR_exit */
    "    syscall\n"
    "    hlt\n"
    ".size rs_clone3_entry, .-rs_clone3_entry\n"
);
#endif

#endif
