/*
 * tensor_map.h — what the graph runner needs of a tensor map beyond the public step.h calls.
 */
#ifndef MSTAR_STEP_TENSOR_MAP_H
#define MSTAR_STEP_TENSOR_MAP_H

#include "mstar/step.h"

/* Let go of every owned entry without freeing it: after a capture the outputs' bytes belong to
 * the graph, so clearing the map must not hand them back to the allocator. */
void mstar__tensor_map_disown(mstar_tensor_map *m);

#endif /* MSTAR_STEP_TENSOR_MAP_H */
