/*
 * rs_environ_copy(): the C environment as one blob, for a spawn with env=None.
 *
 * The child of such a spawn must see what a CPython child sees, the C
 * `environ` (os.putenv() changes it without os.environ), but it runs while
 * the spawning thread has released the GIL, and another thread's os.environ
 * update (setenv/unsetenv) may reallocate and free that array meanwhile. So
 * the parent hands the child a private copy, made here.
 *
 * The binding calls this through ctypes.PyDLL, which keeps the GIL held for
 * the whole call (cffi's calls release it): Python code changes the
 * environment only with the GIL held, so the array and its strings cannot
 * change under this loop. Not in the cffi cdef for that reason.
 */
#include <string.h>

extern char **environ;

/* The strings of environ back to back, each NUL-terminated, into out when
 * they fit in cap bytes; returns the bytes they need and sets *count. */
long rs_environ_copy(char *out, long cap, int *count)
{
    char *const *env = environ;
    long need = 0;
    int n = 0;

    if (env)
        for (; env[n]; n++)
            need += (long)strlen(env[n]) + 1;
    *count = n;
    if (need > cap)
        return need;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(env[i]) + 1;
        memcpy(out, env[i], len);
        out += len;
    }
    return need;
}
