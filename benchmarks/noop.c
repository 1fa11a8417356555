/*
 * The benchmark's child: a process that does nothing and exits 0.
 *
 * Built (build.py) with `-static -nostdlib -DNOOP_NOSTDLIB`, it costs one execve
 * and one exit_group, so what is left of a spawn is the spawner's own cost.
 * Without a raw entry point for the architecture the build fails on purpose
 * and the benchmark retries it as a plain static program.
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
