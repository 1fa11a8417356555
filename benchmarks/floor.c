/*
 * The floor: what a spawn costs from C with nothing in the way.
 *
 *     floor ITERATIONS THREADS PATH [pin]
 *
 * Each of THREADS threads, started together, times ITERATIONS rounds of
 * posix_spawn(PATH) + waitpid; with "pin", thread t runs (with its children)
 * on the t-th CPU this process may use, as `rdmaspawn bench --pin` does.
 * On stdout, read by measure.py: "lat NS" per spawn, then "wall_ns N" (the
 * first thread's start to the last one's end) and "cpu_ns N" (this process's
 * CPU over it); on a failure also "error STEP ERRNO", and exit status 1.
 * This process is small: the Python benchmark's resident memory is not here.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

struct worker {
    pthread_t thread;
    pthread_barrier_t *start;
    int cpu;          /* CPU to pin to, or -1 */
    const char *path;
    long iterations;
    long long *lat;
    long done;
    long long first, last; /* this thread's first start and last end */
    int err;          /* errno of the failed step, or -1 for a bad exit status */
    const char *step; /* which step failed */
};

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ((long long)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
           ((long long)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
}

static void *work(void *arg)
{
    struct worker *w = arg;
    char *argv[] = {(char *)w->path, NULL};

    if (w->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(w->cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    }
    pthread_barrier_wait(w->start);
    w->first = w->last = now_ns();
    for (long i = 0; i < w->iterations; i++) {
        pid_t pid;
        int status;
        long long t0 = now_ns();
        int rc = posix_spawn(&pid, w->path, NULL, NULL, argv, environ);
        if (rc != 0) {
            w->err = rc;
            w->step = "posix_spawn";
            break;
        }
        pid_t got;
        do {
            got = waitpid(pid, &status, 0);
        } while (got < 0 && errno == EINTR);
        if (got != pid) {
            w->err = errno;
            w->step = "waitpid";
            break;
        }
        w->lat[i] = now_ns() - t0;
        w->done = i + 1;
        w->last = now_ns();
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            w->err = -1;
            w->step = "child-status";
            break;
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4 && !(argc == 5 && strcmp(argv[4], "pin") == 0)) {
        fprintf(stderr, "usage: %s ITERATIONS THREADS PATH [pin]\n", argv[0]);
        return 2;
    }
    long iterations = strtol(argv[1], NULL, 10);
    long nthreads = strtol(argv[2], NULL, 10);
    if (iterations < 1 || nthreads < 1 || nthreads > 1024) {
        fprintf(stderr, "floor: bad ITERATIONS or THREADS\n");
        return 2;
    }

    /* The CPUs this process may use, in order, for "pin". */
    int cpus[CPU_SETSIZE];
    int ncpus = 0;
    if (argc == 5) {
        cpu_set_t mask;
        if (sched_getaffinity(0, sizeof(mask), &mask) == 0)
            for (int c = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &mask))
                    cpus[ncpus++] = c;
    }

    pthread_barrier_t start;
    struct worker *workers = calloc((size_t)nthreads, sizeof(*workers));
    if (workers == NULL || pthread_barrier_init(&start, NULL, (unsigned)nthreads + 1) != 0) {
        fprintf(stderr, "floor: out of memory\n");
        return 1;
    }
    for (long t = 0; t < nthreads; t++) {
        struct worker *w = &workers[t];
        w->start = &start;
        w->path = argv[3];
        w->iterations = iterations;
        w->cpu = ncpus > 0 ? cpus[t % ncpus] : -1;
        w->lat = calloc((size_t)iterations, sizeof(*w->lat));
        if (w->lat == NULL || pthread_create(&w->thread, NULL, work, w) != 0) {
            fprintf(stderr, "floor: cannot start thread\n");
            return 1;
        }
    }

    long long c0 = cpu_ns();
    pthread_barrier_wait(&start);
    for (long t = 0; t < nthreads; t++)
        pthread_join(workers[t].thread, NULL);
    long long c1 = cpu_ns();
    /* Not the main thread's clock: it may wake from the barrier late. */
    long long t0 = workers[0].first, t1 = workers[0].last;
    int failed = 0;
    for (long t = 0; t < nthreads; t++) {
        struct worker *w = &workers[t];
        if (w->first < t0)
            t0 = w->first;
        if (w->last > t1)
            t1 = w->last;
        for (long i = 0; i < w->done; i++)
            printf("lat %lld\n", w->lat[i]);
        if (w->step != NULL) {
            printf("error %s %d\n", w->step, w->err);
            failed = 1;
        }
        free(w->lat);
    }
    printf("wall_ns %lld\ncpu_ns %lld\n", t1 - t0, c1 - c0);
    free(workers);
    pthread_barrier_destroy(&start);
    return failed;
}
