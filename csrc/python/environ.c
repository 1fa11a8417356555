/*
 * The C environment for a spawn with env=None: the one policy, for every
 * request convert.c converts.
 *
 * The child must see what a CPython child sees, the C `environ` (os.putenv()
 * changes it without os.environ), but the spawn runs with the GIL released,
 * while another thread's os.environ update may reallocate and free the live
 * array (setenv grows it with realloc, clearenv frees it): handing the child
 * the array itself gave EFAULT or heap bytes as its environment. So the
 * parent hands it a private copy of the array, taken with the GIL held (Python
 * code changes the environment only with the GIL held, so the array cannot
 * change under the copy).
 *
 * The strings need no copy: glibc never frees nor rewrites a string it has
 * put in the environment (setenv keeps every one it made for good; unsetenv
 * and clearenv only drop pointers), and os.putenv is setenv; copying them
 * would cost every spawn time that grows with the environment.
 */
#include "binding.h"

#include <string.h>

extern char **environ;

int rs_environ_count(void)
{
    int n = 0;
    if (environ)
        while (environ[n])
            n++;
    return n;
}

void rs_environ_snapshot(char **out, int count)
{
    if (count)
        memcpy(out, environ, (size_t)count * sizeof *out);
    out[count] = NULL;
}
