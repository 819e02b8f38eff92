/*
 * spin_break.h — ending a mesh's spin from another thread.
 *
 * A loop that spins on its rings before it sleeps (mstar_mesh_spin) also waits for the reads of
 * the manager that sends through its mesh, which land on other threads (a device copy's
 * watcher, a UCX worker). Without a word from them the loop would see such a read only once its
 * spin was over, and a spin's bound grows to 16 times MSTAR_RING_SPIN_US (800 µs by default)
 * while messages come soon after spins end: a device read over the CUDA IPC route that lands in
 * 10 µs took 830 µs a round trip that way. A finished read (tensors/completion.c) bumps a count
 * the spin watches, which costs the loop no system call.
 */
#ifndef MSTAR_MESH_SPIN_BREAK_H
#define MSTAR_MESH_SPIN_BREAK_H

#include "mstar/mesh.h"

/* End the spin `mesh`'s loop is in, or the next one it starts (any thread): it returns true, as
 * when a message has come, and the loop looks at its work before it sleeps. */
void mstar__mesh_spin_break(mstar_mesh *mesh);

#endif
