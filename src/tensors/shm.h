/*
 * shm.h — the shared-memory directory and everything named in it (design.md "Transports").
 *
 * All entities of a deployment use one directory (default /dev/shm, else /tmp/mstar_shm). Two
 * kinds of names live there:
 *   - per-uuid files  "mstar_<entity>_0x<16 hex uuid>", or "mstar-<ns>_<entity>_0x<16 hex>"
 *     with a deployment namespace, written by the producer of a tensor in the file transport and
 *     for arena spills, unlinked only by that producer. Tensor ids restart with every process,
 *     so two deployments sharing one directory must each use a namespace (or a directory of
 *     their own): otherwise one could read the other's file of the same name;
 *   - arena segments  "mstar_arena_<entity>_<pid>_<8 hex>.seg<N>", one set per arena instance.
 * Every name that came over the wire is checked against these shapes before it is used, and all
 * file operations go through a directory fd (openat), so nothing outside the directory can be
 * reached. Files and segments are created 0600, exclusively (O_EXCL: never truncate what another
 * process may be reading).
 *
 * The directory and what is found in it are not trusted (docs/security.md): the directory must
 * be ours (or a sticky root-owned one like /dev/shm), and a name found on disk or on the wire is
 * opened without blocking and without following links, and only a regular file owned by this
 * user is used.
 */
#ifndef MSTAR_TENSORS_SHM_H
#define MSTAR_TENSORS_SHM_H

#include "mstar/core.h"

#include <sys/stat.h>
#include <sys/types.h>

#define MSTAR__SHM_PATH_MAX     4096
#define MSTAR__SHM_FILE_PREFIX  "mstar_"
#define MSTAR__SHM_ARENA_PREFIX "mstar_arena_"

#define MSTAR__SHM_NS_MAX 32

typedef struct mstar__shm_dir {
    int fd; /* O_DIRECTORY */
    char path[MSTAR__SHM_PATH_MAX];
    char ns[MSTAR__SHM_NS_MAX + 1]; /* the deployment namespace of per-uuid files; "" none */
} mstar__shm_dir;

/* Open `path` (NULL or "": $MSTAR_SHM_DIR, else /dev/shm if it is a directory, else
 * /tmp/mstar_shm), creating it 0700 if missing. `ns` (NULL or "": none) is 1..32 letters and
 * digits. MSTAR_EINVAL when the directory could be tampered with by another local user
 * (mstar__dir_check_owner). Closing it releases the liveness lock the sweep took. */
mstar_status mstar__shm_dir_open(const char *path, const char *ns, mstar__shm_dir *out);
void mstar__shm_dir_close(mstar__shm_dir *dir);

/* The per-uuid file name in `dir`'s namespace; MSTAR_EINVAL if `entity` is not a valid name or
 * the result would not be one. */
#define MSTAR__SHM_NAME_BUF (MSTAR_NAME_MAX + 1)
mstar_status mstar__shm_file_name(const mstar__shm_dir *dir, const char *entity,
                                  mstar_tensor_id uuid, char name[MSTAR__SHM_NAME_BUF]);

/* Write `n` bytes as a new file (0600, exclusive). A partial file is removed on error. */
mstar_status mstar__shm_file_write(const mstar__shm_dir *dir, const char *entity,
                                   mstar_tensor_id uuid, const void *data, uint64_t n);
/* Open `name` in `dir` for reading, for what a name on disk or on the wire refers to: never
 * blocks (a FIFO), never follows a symlink, and refuses (MSTAR_EPROTO, naming `what`, the path
 * and why) anything but a regular file owned by this user. MSTAR_ENOENT when it does not exist.
 * *fd_out is close-on-exec; `sb` gets its stat. */
mstar_status mstar__shm_open_read(const mstar__shm_dir *dir, const char *name, const char *what,
                                  int *fd_out, struct stat *sb);

/* Open the file `entity` wrote for `uuid` and check that bytes [offset, offset + n) lie in it,
 * before the caller commits memory to the read: MSTAR_EPROTO if they do not, MSTAR_ENOENT if
 * there is no such file. The caller closes *fd_out. */
mstar_status mstar__shm_file_open(const mstar__shm_dir *dir, const char *entity,
                                  mstar_tensor_id uuid, uint64_t offset, uint64_t n, int *fd_out);
/* Read n bytes at `offset` of an open file into `dst` (MSTAR_EIO if it shrank). */
mstar_status mstar__shm_file_pread(int fd, uint64_t offset, uint64_t n, void *dst);
/* mstar__shm_file_open, mstar__shm_file_pread and close. */
mstar_status mstar__shm_file_read(const mstar__shm_dir *dir, const char *entity,
                                  mstar_tensor_id uuid, uint64_t offset, uint64_t n, void *dst);
/* Remove the file (a missing file is fine: the producer may have spilled nothing). */
void mstar__shm_file_unlink(const mstar__shm_dir *dir, const char *entity, mstar_tensor_id uuid);

/* Remove per-uuid files an earlier incarnation of `entity` left behind (it was killed before its
 * teardown), then hold `entity`'s liveness lock on dir->fd until the directory is closed. The
 * files are removed only when no other process holds that lock: a worker restarted while its
 * old process still runs keeps the old one's tensors. Only files owned by this user are removed.
 * Returns how many were removed. */
int mstar__shm_sweep_entity_files(const mstar__shm_dir *dir, const char *entity);

/* The parts of an arena segment name. */
typedef struct mstar__shm_segment_name {
    char entity[MSTAR_NAME_MAX + 1];
    pid_t pid;
    uint32_t token;
    uint32_t index;
} mstar__shm_segment_name;

/* Parse "mstar_arena_<entity>_<pid>_<8 hex>.seg<N>" strictly: MSTAR_EPROTO naming what is wrong
 * (a '/', '..', a missing prefix, a non-numeric pid ...). */
mstar_status mstar__shm_segment_parse(const char *name, mstar__shm_segment_name *out);
/* A segment name from a descriptor: valid, and produced by `source_entity`. */
mstar_status mstar__shm_segment_check(const char *name, const char *source_entity);
/* The second half of that check, for a segment whose name was parsed before: its producer
 * `owner` (the parsed entity) is the descriptor's `source_entity`. MSTAR_EPROTO otherwise. */
mstar_status mstar__shm_segment_owned(const char *name, const char *owner,
                                      const char *source_entity);

/* Unlink arena segments in `dir` whose pid is no longer running (design.md "Transports"). Returns
 * how many were removed. */
int mstar__shm_sweep_dead_segments(const mstar__shm_dir *dir);

#endif
