/*
 * demo_procs.h — the driver's process plumbing: the run's private directories, forking the
 * workers, signals, and describing how a worker ended.
 *
 * Each run gets its own shm directory (/dev/shm/mstar-demo-<pid>-XXXXXX, or in --shm-dir or
 * $MSTAR_SHM_DIR, or under /tmp without /dev/shm) and its own inbox directory
 * (/tmp/mstar-demo-ipc-<pid>-XXXXXX), both 0700 and removed at the end on every path the driver
 * survives (SIGINT and SIGTERM included); those of a driver that was SIGKILLed (its pid gone) are
 * removed by the next run. Workers are forked before the driver creates any ZeroMQ context or
 * device state and die with the driver (PR_SET_PDEATHSIG), so a killed driver leaves no worker
 * behind.
 */
#ifndef MSTAR_EXAMPLES_DEMO_PROCS_H
#define MSTAR_EXAMPLES_DEMO_PROCS_H

#include "demo.h"

#include <sys/types.h>

typedef struct demo_dirs {
    char shm[128];
    char ipc[128];
} demo_dirs;

/* The run's directories; its shm directory is made in `shm_parent` (NULL: $MSTAR_SHM_DIR,
 * else /dev/shm, else /tmp). */
mstar_status demo_dirs_create(demo_dirs *d, const char *shm_parent);
/* Entries left in the shm directory (-1 if it cannot be read); with `entity`, only the per-uuid
 * files and arena segments that entity created. */
int demo_dirs_count_shm(const demo_dirs *d, const char *entity);
/* Remove both directories and everything in them. Idempotent. */
void demo_dirs_remove(demo_dirs *d);

/* Fork worker `rank`: the child runs demo_worker_main and exits with its code; never returns in
 * the child. */
mstar_status demo_spawn_worker(const demo_options *opts, int rank, const demo_dirs *dirs,
                               pid_t *pid);

/* SIGINT and SIGTERM set a flag (and interrupt poll); SIGPIPE is ignored. */
void demo_signals_install(void);
/* The signal that asked the driver to stop, or 0. The first one drains what is in flight and
 * shuts the workers down; a second one (demo_signal_again) kills them at once. */
int demo_signal_pending(void);
bool demo_signal_again(void);

/* "exited with code 3", "killed by signal 9 (Killed)". */
const char *demo_describe_exit(int status, char *buf, size_t size);

#endif
