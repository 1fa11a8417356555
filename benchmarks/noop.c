/*
 * The benchmark's child: a process that does nothing and exits 0.
 *
 * Built by spawn_latency.py with `cc -static -O2 -nostdlib -DNOOP_NOSTDLIB`,
 * so the child costs one execve and one exit_group: no dynamic loader, no
 * libc start-up.  What is left of a spawn is then the spawner's own cost.
 * Where no raw entry point is written for the architecture the build fails
 * on purpose (#error) and the benchmark retries as a plain static program,
 * then falls back to /bin/true.
 */

#if defined(NOOP_NOSTDLIB)

#if defined(__x86_64__)
/* exit_group(0): syscall 231 on x86-64. */
__asm__(
    ".text\n"
    ".globl _start\n"
    ".type _start, @function\n"
    "_start:\n"
    "    mov $231, %eax\n"
    "    xor %edi, %edi\n"
    "    syscall\n"
    "    hlt\n");
#elif defined(__aarch64__)
/* exit_group(0): syscall 94 on aarch64. */
__asm__(
    ".text\n"
    ".globl _start\n"
    ".type _start, %function\n"
    "_start:\n"
    "    mov x8, #94\n"
    "    mov x0, #0\n"
    "    svc #0\n"
    "    brk #0\n");
#else
#error "no raw _start for this architecture; build without -DNOOP_NOSTDLIB"
#endif

#else /* !NOOP_NOSTDLIB */

int main(void)
{
    return 0;
}

#endif
