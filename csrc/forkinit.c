/*
 * ibv_fork_init(), on the libibverbs instance that matters.
 *
 * Fork protection is per libibverbs instance: it marks the regions that
 * instance registers. So ask the copy the process already has loaded (the one
 * NCCL, pyverbs or UCX registered memory with), found by walking the loaded
 * objects; only if there is none, load libibverbs.so.1 from the system.
 *
 * Environment: libibverbs itself calls ibv_fork_init() when RDMAV_FORK_SAFE
 * or IBV_FORK_SAFE is set, at its first ibv_get_device_list(); after that the
 * status reads "enabled" and rs_fork_init() has nothing left to do.
 * RDMAV_HUGEPAGES_SAFE makes it round regions out to huge pages instead.
 *
 * The state is whether registrations are marked, not what the library says
 * (measured on a soft-RoCE device, docs/rdma-core-matrix.md):
 *
 *   library answers          state      how
 *   -----------------------  ---------  ------------------------------------
 *   IBV_FORK_ENABLED         enabled    its answer
 *   IBV_FORK_DISABLED        disabled   its answer (nothing marks without
 *                                       its mm_root, which that answer reads)
 *   IBV_FORK_UNNEEDED        enabled    if memory other than device
 *                                       memory is marked (forkprobe.c):
 *                                       rdma-core 35-50 answer UNNEEDED
 *                                       and mark
 *                            unneeded   if not (a library that marks but
 *                                       has registered nothing yet reads
 *                                       "unneeded" until it does)
 *   no ibv_is_fork_initialized (rdma-core < 35, no copy-on-fork awareness):
 *                            enabled    if ibv_fork_init() ran here, or
 *                                       RDMAV_FORK_SAFE / IBV_FORK_SAFE is
 *                                       set (it runs at the first device
 *                                       list), or memory other than device
 *                                       memory is marked already (someone
 *                                       else called ibv_fork_init())
 *                            disabled   if ibv_fork_init() here returned
 *                                       EINVAL: a range went by before it
 *                                       (too_late), and no call can turn
 *                                       it on after that
 *                            unknown    otherwise: another library may have
 *                                       called ibv_fork_init() and registered
 *                                       nothing yet, and nothing can be asked
 *                                       without changing the state (a probe
 *                                       range would make a later
 *                                       ibv_fork_init() fail; ibv_fork_init()
 *                                       itself would turn it on)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rdmaspawn.h"

/* enum ibv_fork_status of rdma-core (v35+). */
enum { IBV_FORK_DISABLED = 0, IBV_FORK_ENABLED = 1, IBV_FORK_UNNEEDED = 2 };

typedef int (*fork_init_fn)(void);
typedef int (*fork_status_fn)(void);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* For libibverbs without ibv_is_fork_initialized: what our own
 * ibv_fork_init() showed (it ran; or it was refused with EINVAL). */
static int initialized_here;
static int refused_here;

struct found {
    char path[4096];
};

static int find_loaded(struct dl_phdr_info *info, size_t size, void *data)
{
    struct found *f = data;
    const char *name = info->dlpi_name, *base;
    (void)size;
    if (!name || !*name)
        return 0;
    base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (strncmp(base, "libibverbs", 10) != 0)
        return 0;
    strncpy(f->path, name, sizeof f->path - 1);
    f->path[sizeof f->path - 1] = '\0';
    return 1;
}

/* A handle on the loaded instance, else on the system's; NULL if none. */
static void *open_verbs(char *libpath, int len)
{
    struct found f;
    void *h = NULL;
    memset(&f, 0, sizeof f);
    if (dl_iterate_phdr(find_loaded, &f))
        h = dlopen(f.path, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (libpath && len > 0) {
        struct link_map *map = NULL;
        libpath[0] = '\0';
        if (h && dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name) {
            strncpy(libpath, map->l_name, (size_t)len - 1);
            libpath[len - 1] = '\0';
        }
    }
    return h;
}

static int status_of(void *h)
{
    fork_status_fn is_init = (fork_status_fn)dlsym(h, "ibv_is_fork_initialized");
    if (!is_init) {
        int by_env = getenv("RDMAV_FORK_SAFE") || getenv("IBV_FORK_SAFE");
        if (initialized_here || by_env || rs_dontfork_anywhere() != 0)
            return RS_FORK_ENABLED;
        return refused_here ? RS_FORK_DISABLED : RS_FORK_UNKNOWN;
    }
    switch (is_init()) {
    case IBV_FORK_ENABLED:
        return RS_FORK_ENABLED;
    case IBV_FORK_UNNEEDED:
        /* "Unneeded" only if nothing is marked; unknown counts as marked
         * (forkprobe.c: why smaps, never a probe range). */
        return rs_dontfork_anywhere() == 0 ? RS_FORK_UNNEEDED : RS_FORK_ENABLED;
    default:
        return RS_FORK_DISABLED;
    }
}

int rs_fork_status(char *libpath, int libpath_len)
{
    pthread_mutex_lock(&lock);
    void *h = open_verbs(libpath, libpath_len);
    int state = h ? status_of(h) : RS_FORK_UNAVAILABLE;
    if (h)
        dlclose(h);
    pthread_mutex_unlock(&lock);
    return state;
}

int rs_fork_init(char *libpath, int libpath_len, int *err)
{
    *err = 0;
    pthread_mutex_lock(&lock);
    void *h = open_verbs(libpath, libpath_len);
    if (!h) {
        pthread_mutex_unlock(&lock);
        return RS_FORK_UNAVAILABLE;
    }
    int state = status_of(h);
    if (state == RS_FORK_DISABLED || state == RS_FORK_UNKNOWN) {
        fork_init_fn init = (fork_init_fn)dlsym(h, "ibv_fork_init");
        int rc = init ? init() : ENOSYS;
        if (rc == 0) {
            initialized_here = 1;
        } else {
            *err = rc;
            refused_here = rc == EINVAL;
        }
        state = status_of(h);
    }
    /* Once ibv_fork_init() has run here, the library must stay: its
     * tracking tree lives in it. Keep that one reference, and no other. */
    if (!(state == RS_FORK_ENABLED && initialized_here == 1))
        dlclose(h);
    if (initialized_here == 1)
        initialized_here = 2;   /* the reference is kept; later calls drop theirs */
    pthread_mutex_unlock(&lock);
    return state;
}
