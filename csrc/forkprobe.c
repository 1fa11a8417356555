/*
 * Is memory of this process marked MADV_DONTFORK right now (smaps)?
 *
 * ibv_is_fork_initialized() cannot say whether libibverbs marks: rdma-core
 * 35-50 answer IBV_FORK_UNNEEDED whenever the kernel reports copy-on-fork,
 * even where fork protection is on and every registration is marked (seen on
 * a soft-RoCE device: 44.0 on Linux 6.1). So the marks are read here, from
 * /proc/self/smaps. The library is never asked to mark a probe range: where
 * its protection is off, ibv_dontfork_range() sets its too_late flag and a
 * later ibv_fork_init() returns EINVAL.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "rdmaspawn.h"

int rs_dontfork_anywhere(void)
{
    FILE *f = fopen("/proc/self/smaps", "re");
    char line[8192];
    int at_start = 1, counts = 0, found = 0;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        int whole = n > 0 && line[n - 1] == '\n';
        unsigned long lo, hi;
        int path_at = 0;
        /* A mapping's first line ("lo-hi perms offset dev inode path"); the
         * rest of a long line, read by the next fgets, is not one. */
        if (at_start && sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &path_at) >= 2
                && path_at > 0) {
            /* Device memory (uverbs doorbells and queues) is marked by its
             * driver, not by libibverbs: rs_driver_mapping() is the rule. */
            char *nl = strchr(line + path_at, '\n');
            if (nl)
                *nl = 0;
            counts = !rs_driver_mapping(line + path_at, 0);
        } else if (at_start && counts && strncmp(line, "VmFlags:", 8) == 0
                   && strstr(line, " dc") != NULL) {
            found = 1;
            break;
        }
        at_start = whole;
    }
    fclose(f);
    return found;
}
