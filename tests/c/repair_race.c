/*
 * The fork repair (csrc/forkrepair.c) beside forks, with no Python between:
 * what tests/test_fork_repair_races.py builds and runs.
 *
 *   repair_race look N      threads start the repair again and again (each
 *                           start looks, holding the look) while the main
 *                           thread forks N children that each fork a
 *                           grandchild: prints "hung H of N"
 *
 * It starts the repair without the kernel's word: nothing is registered.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rdmaspawn.h"

static volatile int stop;

static void *restart(void *arg)
{
    (void)arg;
    while (!stop)
        rs_repair_start();
    return NULL;
}

/* 1 if the child did not end within 10 s (then killed), else 0. */
static int hung(pid_t pid)
{
    int status;
    for (int i = 0; i < 10000; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return 0;
        usleep(1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return 1;
}

static int look_race(int n)
{
    pthread_t t[3];
    int stuck = 0;
    if (!dlopen("libibverbs.so.1", RTLD_NOW))
        return 2;
    rs_repair_start();
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, restart, NULL);
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            pid_t grandchild = fork();
            if (grandchild == 0)
                _exit(0);
            waitpid(grandchild, NULL, 0);
            _exit(0);
        }
        stuck += hung(pid);
    }
    stop = 1;
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    printf("hung %d of %d\n", stuck, n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    setvbuf(stdout, NULL, _IONBF, 0);
    int n = atoi(argv[2]);
    return strcmp(argv[1], "look") == 0 ? look_race(n) : 2;
}
