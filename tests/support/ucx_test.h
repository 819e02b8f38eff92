/*
 * ucx_test.h — what the UCX engine's tests share: the UCX settings they run under, a census of
 * the process's threads and fds (to show an engine leaves nothing behind), patterned buffers, and
 * a producer process that registers memory and serves reads until told to stop.
 */
#ifndef MSTAR_UCX_TEST_H
#define MSTAR_UCX_TEST_H

#include "mstar_test.h"

#include "tensors/ucx/ucx_engine.h"

#include <sys/types.h>

/* Call first in main(): make sure UCX's memory hooks are off (they fight the sanitizers'
 * allocator; UCX reads these at load time, so the test re-executes itself once with them set). */
void ucx_test_setup(int argc, char **argv);

/* Threads and open fds of this process. The first call starts a sentinel UCP context that lives
 * until exit, so UCX's process-wide async thread (and its fds) is counted by every census alike
 * (ucx_test.c says why). Compare counts taken with no engine alive. */
int ucx_test_threads(void);
int ucx_test_fds(void);

/* A byte pattern that differs per seed and offset; fill and check. */
void ucx_test_fill(void *buf, size_t n, uint64_t seed);
/* The first mismatching offset, or SIZE_MAX when every byte matches. */
size_t ucx_test_check(const void *buf, size_t n, uint64_t seed);
/* The same for bytes that were read from `offset` of a filled buffer. */
size_t ucx_test_check_at(const void *buf, size_t n, uint64_t seed, size_t offset);

/* Regions a manager's UCX engine still has registered (0 for a manager of another transport). */
size_t regions_of(mstar_comm *c);

/* A TCP listener on 127.0.0.1 that never accepts nor speaks: reads from its session stay
 * pending until the fd is closed (then they fail). Writes its session to session_out. */
int ucx_test_blackhole(char session_out[MSTAR_NAME_MAX + 1]);

/* A forked producer: an engine with one registered buffer of `nbytes` filled with
 * ucx_test_fill(seed); its session, address and key come back over a pipe. It serves until
 * ucx_test_producer_stop (or a signal). */
typedef struct ucx_test_producer {
    pid_t pid;
    int to_child;   /* write a byte: stop */
    int from_child; /* session, address, key */
    char session[MSTAR_NAME_MAX + 1];
    uint64_t addr;
    uint64_t nbytes;
    uint8_t key[MSTAR_REMOTE_KEY_MAX];
    uint32_t key_len;
} ucx_test_producer;

/* Start one; `address` is the engine's listen address (NULL = 127.0.0.1); `netns` (NULL = this
 * one) is a network namespace the child enters first. */
void ucx_test_producer_start(ucx_test_producer *p, uint64_t nbytes, uint64_t seed,
                             const char *address, const char *netns);
/* Ask it to stop and reap it; asserts it exited 0 (it checks it left nothing registered). */
void ucx_test_producer_stop(ucx_test_producer *p);
/* Send it `sig`; reap it unless the signal is SIGSTOP or SIGCONT. */
void ucx_test_producer_kill(ucx_test_producer *p, int sig);

#endif
