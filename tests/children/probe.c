/*
 * What a child sees, printed as one JSON object: built by the tests and run
 * as the child of rdmaspawn and of CPython's subprocess, so that the two can
 * be compared field by field. It changes nothing before it looks.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20 || ch >= 0x7f)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

int main(int argc, char **argv)
{
    char buf[PATH_MAX];
    uid_t ru, eu, su;
    gid_t rg, eg, sg;
    gid_t groups[256];
    sigset_t mask;
    int i, n;

    /* Look at the fds first, before stdio or opendir add their own. */
    int fds[1024], nfds = 0;
    for (int fd = 0; fd < 1024; fd++)
        if (fcntl(fd, F_GETFD) >= 0)
            fds[nfds++] = fd;

    printf("{\"argv\": [");
    for (i = 0; i < argc; i++) {
        if (i)
            printf(", ");
        json_str(argv[i]);
    }
    printf("], \"cwd\": ");
    json_str(getcwd(buf, sizeof buf) ? buf : "?");
    printf(", \"pid\": %d, \"ppid\": %d, \"pgid\": %d, \"sid\": %d",
           (int)getpid(), (int)getppid(), (int)getpgrp(), (int)getsid(0));
    mode_t um = umask(0);
    umask(um);
    printf(", \"umask\": %d", (int)um);
    getresuid(&ru, &eu, &su);
    getresgid(&rg, &eg, &sg);
    printf(", \"uids\": [%u, %u, %u], \"gids\": [%u, %u, %u]", ru, eu, su, rg, eg, sg);
    n = getgroups(256, groups);
    printf(", \"groups\": [");
    for (i = 0; i < n; i++)
        printf("%s%u", i ? ", " : "", groups[i]);
    printf("], \"fds\": {");
    for (i = 0; i < nfds; i++) {
        char link[64];
        ssize_t len;
        snprintf(link, sizeof link, "/proc/self/fd/%d", fds[i]);
        len = readlink(link, buf, sizeof buf - 1);
        buf[len < 0 ? 0 : len] = '\0';
        printf("%s\"%d\": {\"target\": ", i ? ", " : "", fds[i]);
        json_str(buf);
        printf(", \"cloexec\": %s}", (fcntl(fds[i], F_GETFD) & FD_CLOEXEC) ? "true" : "false");
    }
    sigprocmask(SIG_BLOCK, NULL, &mask);
    printf("}, \"blocked\": [");
    for (i = 1, n = 0; i < 65; i++)
        if (sigismember(&mask, i) == 1)
            printf("%s%d", n++ ? ", " : "", i);
    printf("], \"ignored\": [");
    for (i = 1, n = 0; i < 65; i++) {
        struct sigaction sa;
        if (sigaction(i, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
            printf("%s%d", n++ ? ", " : "", i);
    }
    printf("], \"handled\": [");
    for (i = 1, n = 0; i < 65; i++) {
        struct sigaction sa;
        if (sigaction(i, NULL, &sa) == 0 && sa.sa_handler != SIG_IGN &&
            sa.sa_handler != SIG_DFL)
            printf("%s%d", n++ ? ", " : "", i);
    }
    printf("], \"env\": [");
    for (i = 0; environ[i]; i++) {
        if (i)
            printf(", ");
        json_str(environ[i]);
    }
    printf("]}\n");
    return 0;
}
