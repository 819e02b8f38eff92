/*
 * test_hostile_fs.c — a local user attacks a producer (worker_0) and a consumer (worker_1)
 * through the file system: FIFOs and symlinks under the names of tensor files and segments,
 * directories and files owned by someone else or writable by others, descriptors that claim
 * huge sizes, sparse or foreign files under segment names, a segment truncated while mapped, a
 * second process of a live entity, names with '..', '/' and control bytes, and ranges past the
 * end. Each case asserts the clear error or refusal, that legitimate traffic beside it still
 * completes with every byte checked, and that nothing is left behind (no files in the
 * directory, no file descriptors). The threat model is docs/security.md.
 *
 * Cases that need another uid run as root and hand the planted files and directories to uid
 * 65534 (nobody); without root they are skipped inside the test.
 */
#include "hostile_fs.h"

#include "core/fs.h"
#include "core/guard.h"
#include "tensors/arena/arena.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define ATTACKER_UID 65534

typedef struct world {
    mstar_transport_kind kind;
    bus b;
    sender sp, sc;
    const char *dir;
    mstar_comm *p; /* worker_0 */
    mstar_comm *c; /* worker_1 */
    int fds;       /* open descriptors before the case */
} world;

static const mstar_transport_kind FILES = MSTAR_TRANSPORT_FILES;
static const mstar_transport_kind ARENA = MSTAR_TRANSPORT_ARENA;

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (d != NULL && readdir(d) != NULL)
        n++;
    if (d != NULL)
        closedir(d);
    return n;
}

static int setup(void **state)
{
    world *w = calloc(1, sizeof(*w));
    w->kind = *(const mstar_transport_kind *)*state;
    w->fds = count_fds();
    w->dir = mstar_test_tmpdir("hostile");
    w->sp = (sender){ &w->b, "worker_0" };
    w->sc = (sender){ &w->b, "worker_1" };
    setenv("MSTAR_SHM_ARENA_SEGMENT_MB", "1", 1);
    w->p = make_comm("worker_0", w->kind, w->dir, &w->sp);
    w->c = make_comm("worker_1", w->kind, w->dir, &w->sc);
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world *w = *state;
    mstar_comm_destroy(w->p);
    mstar_comm_destroy(w->c);
    bus_clear(&w->b);
    /* What the attacker planted is removed by the test; nothing of ours may remain. */
    assert_int_equal(mstar_test_count_dir(w->dir), 0);
    assert_int_equal(count_fds(), w->fds);
    unsetenv("MSTAR_SHM_ARENA_SEGMENT_MB");
    free(w);
    return 0;
}

/* Legitimate traffic beside the attack (hostile_fs.h). */
static void legit_roundtrip(world *w, int64_t rid_n)
{
    legit_roundtrip_of(&w->b, w->p, w->c, 4000, rid_n);
}

/* A descriptor from worker_0 of `n` uint8 elements for tensor number `counter`, never staged. */
static mstar_tensor_info forged(uint64_t counter, int64_t n)
{
    mstar_tensor_info info;
    memset(&info, 0, sizeof(info));
    info.uuid = mstar_id_make(100, counter);
    snprintf(info.source_entity, sizeof(info.source_entity), "worker_0");
    info.dtype = MSTAR_DTYPE_UINT8;
    info.ndim = 1;
    info.dims[0] = n;
    info.stride[0] = 1;
    info.nbytes = (uint64_t)n;
    info.source_tp_size = 1;
    return info;
}

static mstar_status read_forged(world *w, const mstar_tensor_info *info)
{
    mstar_rid rid = mstar_rid_from_int(999);
    mstar_edge e = edge_of("sig", "node", info, 1);
    mstar_status st = mstar_comm_start_read_tensors(w->c, &rid, &e, 1, NULL);
    mstar_edge_clear(&e);
    return st;
}

static void expect_refused(world *w, const mstar_tensor_info *info, mstar_status want,
                           const char *needle)
{
    mstar_status st = read_forged(w, info);
    if (st != want)
        fail_msg("wanted %s, got %s: %s", mstar_status_name(want), mstar_status_name(st),
                 mstar_last_error());
    if (needle != NULL && strstr(mstar_last_error(), needle) == NULL)
        fail_msg("error '%s' does not say '%s'", mstar_last_error(), needle);
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
}

static void shm_name(const world *w, uint64_t counter, char *name, size_t size)
{
    snprintf(name, size, "mstar_worker_0_0x%016llx",
             (unsigned long long)mstar_id_make(100, counter));
    (void)w;
}

/* A 16-byte file under the name of worker_0's tensor number `counter`, as `uid` with `mode`. */
static void plant_file(const world *w, uint64_t counter, mode_t mode, uid_t uid, char *name,
                       size_t size)
{
    char path[4096];
    shm_name(w, counter, name, size);
    snprintf(path, sizeof(path), "%s/%s", w->dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "0123456789abcdef", 16), 16);
    assert_int_equal(fchown(fd, uid, uid), 0);
    close(fd);
}

static void unlink_in(const world *w, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", w->dir, name);
    assert_int_equal(unlink(path), 0);
}

/* Fault 1: a FIFO under a tensor file's name, a segment's name on the wire, and a dead pid's
 * segment name: each is refused at once (an open without O_NONBLOCK waited for a writer
 * forever), and a new manager's orphan sweep walks past them. */
static void test_fifo_is_refused(void **state)
{
    world *w = *state;
    alarm(60); /* a hang is a failure, not a stuck test run */
    char name[128], path[4096];
    shm_name(w, 7, name, sizeof(name));
    snprintf(path, sizeof(path), "%s/%s", w->dir, name);
    assert_int_equal(mkfifo(path, 0600), 0);
    mstar_tensor_info info = forged(7, 16);
    expect_refused(w, &info, MSTAR_EPROTO, "FIFO");
    unlink_in(w, name);

    char seg[128];
    snprintf(seg, sizeof(seg), "mstar_arena_worker_0_%d_0a0b0c0d.seg0", mstar_test_dead_pid());
    snprintf(path, sizeof(path), "%s/%s", w->dir, seg);
    assert_int_equal(mkfifo(path, 0600), 0);
    if (w->kind == MSTAR_TRANSPORT_ARENA) {
        info = forged(8, 16);
        snprintf(info.shm_segment, sizeof(info.shm_segment), "%s", seg);
        expect_refused(w, &info, MSTAR_EPROTO, "FIFO");
    }
    /* A manager starting beside it sweeps without blocking and leaves it be. */
    sender s = { &w->b, "worker_2" };
    mstar_comm *other = make_comm("worker_2", w->kind, w->dir, &s);
    mstar_comm_destroy(other);
    unlink_in(w, seg);
    alarm(0);
    legit_roundtrip(w, 1);
}

/* A symlink under a tensor file's name is refused, never followed (held before this work). */
static void test_symlink_is_refused(void **state)
{
    world *w = *state;
    char name[128], path[4096];
    shm_name(w, 9, name, sizeof(name));
    snprintf(path, sizeof(path), "%s/%s", w->dir, name);
    assert_int_equal(symlink("/etc/passwd", path), 0);
    mstar_tensor_info info = forged(9, 16);
    expect_refused(w, &info, MSTAR_EPROTO, "symbolic link");
    unlink_in(w, name);
    legit_roundtrip(w, 2);
}

/* Names with '..', '/', control bytes, and names of another entity's segment, on the wire
 * (held before this work): refused before any file is touched. */
static void test_bad_names(void **state)
{
    world *w = *state;
    const char *entities[] = { "../worker_0", "worker_0/..", "/etc", "work\x01er", "..", "" };
    for (size_t i = 0; i < sizeof(entities) / sizeof(entities[0]); i++) {
        mstar_tensor_info info = forged(10, 16);
        snprintf(info.source_entity, sizeof(info.source_entity), "%s", entities[i]);
        mstar_status st = read_forged(w, &info);
        if (st != MSTAR_EPROTO && st != MSTAR_EINVAL)
            fail_msg("entity '%s' gave %s", entities[i], mstar_status_name(st));
    }
    const char *segments[] = { "mstar_arena_worker_0_1_0a0b0c0d.seg0/../../x",
                               "../mstar_arena_worker_0_1_0a0b0c0d.seg0",
                               "mstar_arena_worker_1_1_0a0b0c0d.seg0" };
    for (size_t i = 0; i < sizeof(segments) / sizeof(segments[0]); i++) {
        mstar_tensor_info info = forged(10, 16);
        snprintf(info.shm_segment, sizeof(info.shm_segment), "%s", segments[i]);
        mstar_status st = read_forged(w, &info);
        if (st != MSTAR_EPROTO)
            fail_msg("segment '%s' gave %s", segments[i], mstar_status_name(st));
    }
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    legit_roundtrip(w, 3);
}

/* Fault 8: a descriptor claiming 1 TiB for a file that does not exist, and for one that holds
 * 16 bytes: refused by what the file holds, before any memory is committed (the read used to
 * allocate the claim first: ENOMEM, or an abort under ASan). */
static void test_huge_claim_checks_file_first(void **state)
{
    world *w = *state;
    mstar_tensor_info info = forged(11, INT64_C(1) << 40);
    expect_refused(w, &info, MSTAR_ENOENT, "does not exist");
    char name[128];
    plant_file(w, 11, 0600, geteuid(), name, sizeof(name));
    expect_refused(w, &info, MSTAR_EPROTO, "which has 16 bytes");
    info = forged(11, 8);
    info.offset = UINT64_MAX - 4; /* [offset, offset + n) wraps */
    expect_refused(w, &info, MSTAR_EPROTO, "overflows");
    info.offset = 9; /* [9, 17) of 16 bytes */
    expect_refused(w, &info, MSTAR_EPROTO, "16 bytes");
    unlink_in(w, name);
    legit_roundtrip(w, 4);
}

/* Fault 9: a second manager of a live entity (a worker restarted while its old process still
 * runs) keeps the first one's files; a consumer still reads them byte for byte. The sweep of
 * a dead one's files is test_comm_arena's test_stale_files_swept_at_start. */
static void test_restart_keeps_live_files(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(5);
    mstar_tensor t = make_vector(MSTAR_DTYPE_INT32, 300, 5);
    mstar_tensor_info info;
    produce(w->p, &rid, &t, 1, 1, &info);
    sender s = { &w->b, "worker_0" };
    mstar_comm *again = make_comm("worker_0", w->kind, w->dir, &s);
    read_checked_and_acked(&w->b, w->p, w->c, &rid, &info, &t);
    mstar_comm_destroy(again);
    free(t.data);
    legit_roundtrip(w, 6);
}

/* Fault 5, files: a tensor file under a valid name owned by another user is refused, naming
 * its owner. Our own files are 0600 (held before this work). */
static void test_foreign_file_is_refused(void **state)
{
    world *w = *state;
    if (geteuid() != 0) {
        print_message("skipped: planting another user's file needs root\n");
        legit_roundtrip(w, 7);
        return;
    }
    char name[128], path[4096];
    plant_file(w, 12, 0644, ATTACKER_UID, name, sizeof(name));
    snprintf(path, sizeof(path), "%s/%s", w->dir, name);
    mstar_tensor_info info = forged(12, 16);
    expect_refused(w, &info, MSTAR_EPROTO, "owned by uid 65534");
    /* The sweep of a restarted worker_0 leaves another user's file alone. */
    sender s = { &w->b, "worker_0" };
    mstar_comm_destroy(w->p);
    w->p = make_comm("worker_0", w->kind, w->dir, &s);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    unlink_in(w, name);
    legit_roundtrip(w, 7);
}

/* Fault 5, directories: an shm directory owned by another user, or ours but writable by group
 * or others, is refused with its path, owner and mode; so is such an ipc directory. A
 * directory we create is 0700 (held before this work). */
static void test_foreign_dirs_are_refused(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof(path), "%s/open", mstar_test_tmpdir("hostiledir"));
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(chmod(path, 0777), 0);
    bus b = { 0 };
    sender s = { &b, "worker_0" };
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = "worker_0";
    o.transport = MSTAR_TRANSPORT_FILES;
    o.shm_dir = path;
    o.send = bus_send;
    o.send_ctx = &s;
    mstar_comm *c = NULL;
    assert_mstar_status(mstar_comm_create(&o, &c), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), path));
    assert_non_null(strstr(mstar_last_error(), "mode 0777"));
    mstar_mesh_options mo = { .transport = MSTAR_MESH_IPC, .ipc_dir = path };
    mstar_mesh *m = NULL;
    assert_mstar_status(mstar_mesh_create("worker_0", &mo, &m), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "mode 0777"));
    assert_int_equal(mstar_test_count_dir(path), 0);

    char fresh[4200];
    snprintf(fresh, sizeof(fresh), "%s/fresh", path);
    assert_int_equal(chmod(path, 0700), 0);
    c = make_comm("worker_0", MSTAR_TRANSPORT_FILES, fresh, &s);
    struct stat sb;
    assert_int_equal(stat(fresh, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    mstar_comm_destroy(c);

    if (geteuid() != 0) {
        print_message("skipped: a directory of another user needs root\n");
        return;
    }
    assert_int_equal(chown(fresh, ATTACKER_UID, ATTACKER_UID), 0);
    o.shm_dir = fresh;
    assert_mstar_status(mstar_comm_create(&o, &c), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "owned by uid 65534"));
    mo.ipc_dir = fresh;
    assert_mstar_status(mstar_mesh_create("worker_0", &mo, &m), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "owned by uid 65534"));
    assert_int_equal(mstar_test_count_dir(fresh), 0);
}

/* Fault 6: files planted under a segment name of worker_0 (a live pid, so no sweep takes
 * them): a sparse one with a perfect trailer — mapped with MAP_POPULATE it made tmpfs allocate
 * its holes until full, then the copy died of SIGBUS — and a full one without the trailer its
 * arena writes. Both refused before they are mapped. */
static void plant(const world *w, const char *seg, uint64_t size, bool sparse, bool trailer)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", w->dir, seg);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    if (sparse)
        assert_int_equal(ftruncate(fd, (off_t)(size + sizeof(mstar__arena_trailer))), 0);
    else
        assert_int_equal(posix_fallocate(fd, 0, (off_t)(size + sizeof(mstar__arena_trailer))), 0);
    if (trailer) {
        mstar__arena_trailer t;
        memset(&t, 0, sizeof(t));
        memcpy(t.magic, MSTAR__ARENA_TRAILER_MAGIC, sizeof(t.magic));
        t.size = size;
        t.pid = getpid();
        t.token = 0x0a0b0c0d;
        assert_int_equal(pwrite(fd, &t, sizeof(t), (off_t)size), (ssize_t)sizeof(t));
    }
    close(fd);
}

static void test_planted_segment_is_refused(void **state)
{
    world *w = *state;
    char seg[128];
    snprintf(seg, sizeof(seg), "mstar_arena_worker_0_%d_0a0b0c0d.seg0", (int)getpid());
    mstar_tensor_info info = forged(13, 4096);
    snprintf(info.shm_segment, sizeof(info.shm_segment), "%s", seg);
    plant(w, seg, UINT64_C(64) << 20, true, true);
    expect_refused(w, &info, MSTAR_EPROTO, "is sparse");
    unlink_in(w, seg);
    plant(w, seg, UINT64_C(1) << 20, false, false);
    expect_refused(w, &info, MSTAR_EPROTO, "trailer");
    unlink_in(w, seg);
    legit_roundtrip(w, 9);
}

/* Fault 6: a segment the consumer already maps is truncated under it (by its producer, or any
 * process of the user): the copy faults, and the read fails with an error instead of killing
 * the consumer. Restored, the segment serves reads again, but not of the tensor that was cut:
 * its stamp went with the file, so the zeros in its place are refused, not delivered. */
static void test_truncated_segment_fails_the_read(void **state)
{
    world *w = *state;
    legit_roundtrip(w, 10); /* the consumer maps worker_0's segment 0 */
    mstar_rid rid = mstar_rid_from_int(11);
    mstar_tensor t = make_vector(MSTAR_DTYPE_UINT8, 4096, 11);
    mstar_tensor_info info;
    produce(w->p, &rid, &t, 1, 1, &info);
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", w->dir, info.shm_segment);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 0), 0);
    mstar__guard_install(); /* on top of the handler cmocka sets for each test */
    mstar_edge e = edge_of("sig", "node", &info, 1);
    assert_mstar_status(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, NULL), MSTAR_EIO);
    assert_non_null(strstr(mstar_last_error(), "SIGBUS"));
    assert_non_null(strstr(mstar_last_error(), "arena segment"));
    assert_non_null(strstr(mstar_last_error(), info.shm_segment));
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    assert_int_equal(ftruncate(fd, sb.st_size), 0); /* holes now, but backed again */
    close(fd);
    assert_mstar_status(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, NULL), MSTAR_ENOENT);
    assert_non_null(strstr(mstar_last_error(), "is no longer at offset"));
    mstar_edge_clear(&e);
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    /* The producer still owes the tensor; releasing it frees the slot. */
    assert_mstar_ok(mstar_comm_dereference(w->p, info.uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    free(t.data);
    legit_roundtrip(w, 12);
}

/* Fault 6: the slot stamps (docs/security.md). A process of the user writes the segment file of
 * a live producer: a stamp overwritten on a live slot fails its reads until it is put back; a
 * descriptor whose offset is not a slot start is refused; the stamps cut off the end of the file
 * fault inside the guard (the read fails, the consumer lives); a stamp planted on a free slot
 * for a forged descriptor lets a read take the bytes that slot holds, inside the segment and
 * nowhere else; a segment laid out without room for its stamps is refused before it is mapped. */
static void poke_stamp(int fd, uint64_t usable, uint64_t slot, uint64_t value)
{
    off_t at = (off_t)(usable + slot / MSTAR__ARENA_ALIGN * sizeof(uint64_t));
    assert_int_equal(pwrite(fd, &value, sizeof(value), at), (ssize_t)sizeof(value));
}

static void test_planted_stamps(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(14);
    mstar_tensor t = make_vector(MSTAR_DTYPE_UINT8, 4096, 14);
    mstar_tensor_info info;
    produce(w->p, &rid, &t, 1, 1, &info);
    assert_int_equal(info.shm_offset, 0);
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", w->dir, info.shm_segment);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    struct stat sb;
    assert_int_equal(fstat(fd, &sb), 0);
    const uint64_t usable = UINT64_C(1) << 20; /* MSTAR_SHM_ARENA_SEGMENT_MB=1 */
    /* Another uuid over the live slot's stamp: refused, until it is put back. */
    poke_stamp(fd, usable, 0, info.uuid + 7);
    expect_refused(w, &info, MSTAR_ENOENT, "is no longer at offset 0");
    poke_stamp(fd, usable, 0, info.uuid);
    read_checked_and_acked(&w->b, w->p, w->c, &rid, &info, &t);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    /* Not a slot start. */
    produce(w->p, &rid, &t, 1, 1, &info);
    mstar_tensor_info odd = info;
    odd.shm_offset = 128;
    expect_refused(w, &odd, MSTAR_EPROTO, "where no slot starts");
    /* The stamps and the trailer cut off: the data is all there, the stamp faults. */
    assert_int_equal(ftruncate(fd, (off_t)usable), 0);
    mstar__guard_install(); /* on top of the handler cmocka sets for each test */
    expect_refused(w, &info, MSTAR_EIO, "SIGBUS");
    assert_int_equal(ftruncate(fd, sb.st_size), 0); /* restored with the stamps cleared */
    expect_refused(w, &info, MSTAR_ENOENT, "is no longer at offset 0");
    assert_mstar_ok(mstar_comm_dereference(w->p, info.uuid, 1));
    /* A stamp planted on a free slot, for a forged descriptor of a tensor never staged there:
     * the read takes what the slot holds, which is all a stamp can grant. */
    mstar_tensor_info fake = forged(77, 256);
    snprintf(fake.shm_segment, sizeof(fake.shm_segment), "%s", info.shm_segment);
    fake.shm_offset = 8192;
    mstar_tensor held = make_vector(MSTAR_DTYPE_UINT8, 256, 77);
    assert_int_equal(pwrite(fd, held.data, 256, 8192), 256);
    poke_stamp(fd, usable, fake.shm_offset, fake.uuid);
    mstar_edge e = edge_of("sig", "node", &fake, 1);
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, NULL));
    mstar_edge_clear(&e);
    collect_ready(w->c, 1);
    check_bytes(w->c, fake.uuid, &held);
    free(held.data);
    assert_mstar_ok(mstar_comm_dereference(w->c, fake.uuid, 1));
    poke_stamp(fd, usable, fake.shm_offset, 0);
    bus_clear(&w->b); /* the ACK of a tensor worker_0 never staged */
    close(fd);
    /* A segment file whose trailer follows the usable bytes with no stamps between. */
    char seg[128];
    snprintf(seg, sizeof(seg), "mstar_arena_worker_0_%d_0a0b0c0d.seg0", (int)getpid());
    mstar_tensor_info planted = forged(13, 4096);
    snprintf(planted.shm_segment, sizeof(planted.shm_segment), "%s", seg);
    plant(w, seg, UINT64_C(1) << 20, false, true);
    expect_refused(w, &planted, MSTAR_EPROTO, "trailer");
    unlink_in(w, seg);
    free(t.data);
    legit_roundtrip(w, 15);
}

/* Fault 12: with no shm_dir in the options, MSTAR_SHM_DIR names the directory. */
static void test_shm_dir_from_env(void **state)
{
    (void)state;
    const char *dir = mstar_test_tmpdir("hostileenv");
    char sub[4096];
    snprintf(sub, sizeof(sub), "%s/shm", dir);
    setenv("MSTAR_SHM_DIR", sub, 1);
    bus b = { 0 };
    sender sp = { &b, "worker_0" }, sc = { &b, "worker_1" };
    mstar_comm *p = make_comm("worker_0", MSTAR_TRANSPORT_FILES, NULL, &sp);
    mstar_comm *c = make_comm("worker_1", MSTAR_TRANSPORT_FILES, NULL, &sc);
    unsetenv("MSTAR_SHM_DIR");
    mstar_rid rid = mstar_rid_from_int(8);
    mstar_tensor t = make_vector(MSTAR_DTYPE_UINT8, 64, 8);
    mstar_tensor_info info;
    produce(p, &rid, &t, 1, 1, &info);
    assert_int_equal(mstar_test_count_dir(sub), 1);
    read_checked_and_acked(&b, p, c, &rid, &info, &t);
    assert_int_equal(mstar_test_count_dir(sub), 0);
    mstar_comm_destroy(p);
    mstar_comm_destroy(c);
    bus_clear(&b);
    free(t.data);
}

/* Each case once per shared-memory transport, named after it. */
// clang-format off
#define ONE(fn, kind, label) { #fn " (" label ")", fn, setup, teardown, (void *)&kind }
#define BOTH(fn) ONE(fn, FILES, "files"), ONE(fn, ARENA, "arena")
// clang-format on

int main(void)
{
    const struct CMUnitTest tests[] = {
        BOTH(test_fifo_is_refused),
        BOTH(test_symlink_is_refused),
        BOTH(test_bad_names),
        BOTH(test_huge_claim_checks_file_first),
        ONE(test_restart_keeps_live_files, FILES, "files"), /* segments: test_shm */
        BOTH(test_foreign_file_is_refused),
        ONE(test_planted_segment_is_refused, ARENA, "arena"),
        ONE(test_truncated_segment_fails_the_read, ARENA, "arena"),
        ONE(test_planted_stamps, ARENA, "arena"),
        cmocka_unit_test(test_foreign_dirs_are_refused),
        cmocka_unit_test(test_shm_dir_from_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
