/*
 * runner_step_cache.c — what a _GraphRunner keeps between steps so that a step makes no Python
 * object it made before (docs/python.md, "A step from Python"): the SlotLease objects lease_slot
 * handed out, and per replayed slot the torch tensors viewing its static outputs.
 *
 * A lease is a value: lease_slot returns the object it made the first time for the same lease,
 * and a method given one of those objects takes the lease kept beside it instead of parsing the
 * tuple again. The outputs of a slot stay where its capture put them, so run_forward returns a
 * new dict of the same tensors while each output still has the pointer, dtype, shape and strides
 * its tensor views; an output that moved (a bucket captured again) gets a new tensor. Each cached
 * tensor holds a reference on the runner through its DLPack capsule (the memory's keeper), which
 * the collector cannot see: mstarpy_step_cache_traverse reports that reference as the runner's
 * own while the cache is the tensor's only holder, so a runner nobody else holds is collected
 * with its tensors; a tensor someone holds (or a view of it) keeps the runner, as any output
 * does.
 */
#include "runner.h"

#include <stdlib.h>
#include <string.h>

/* Whether `a` and `b` view the same elements the same way. */
static bool same_view(const mstar_tensor *a, const mstar_tensor *b)
{
    if ((const char *)a->data + a->byte_offset != (const char *)b->data + b->byte_offset ||
        a->device.type != b->device.type || a->device.index != b->device.index ||
        a->dtype != b->dtype || a->ndim != b->ndim)
        return false;
    for (int32_t d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || a->strides[d] != b->strides[d])
            return false;
    return true;
}

static bool same_key(const mstar_bucket_key *a, const mstar_bucket_key *b)
{
    return a->bs == b->bs && a->num_tokens == b->num_tokens &&
           strcmp(a->graph_walk, b->graph_walk) == 0 &&
           (a->cg_key_info == NULL
                ? b->cg_key_info == NULL
                : b->cg_key_info != NULL && strcmp(a->cg_key_info, b->cg_key_info) == 0);
}

PyObject *mstarpy_step_cache_lease(mstarpy_step_cache *c, const mstar_slot_lease *l)
{
    for (size_t i = 0; i < c->nleases; i++)
        if (c->leases[i].lease.slot == l->slot && same_key(&c->leases[i].lease.bucket, &l->bucket))
            return Py_NewRef(c->leases[i].obj);
    PyObject *obj = mstarpy_slot_lease_to_py(l);
    if (!obj || c->nleases == MSTARPY_CACHED_LEASES)
        return obj;
    /* The kept lease's strings point into obj's, which the cache holds. */
    mstarpy_cached_lease *e = &c->leases[c->nleases];
    if (mstarpy_lease_from_py(obj, &e->lease) < 0) {
        Py_DECREF(obj);
        return NULL;
    }
    e->obj = Py_NewRef(obj);
    c->nleases++;
    return obj;
}

bool mstarpy_step_cache_find_lease(const mstarpy_step_cache *c, PyObject *obj,
                                   mstar_slot_lease *out)
{
    for (size_t i = 0; i < c->nleases; i++)
        if (c->leases[i].obj == obj) {
            *out = c->leases[i].lease;
            return true;
        }
    return false;
}

static void outputs_free(mstarpy_cached_outputs *o)
{
    for (size_t i = 0; i < o->n; i++)
        Py_XDECREF(o->tensors[i]);
    free(o->tensors);
    free(o->views);
    Py_XDECREF(o->dict);
    memset(o, 0, sizeof(*o));
}

/* Fill `o` for `outs` (emptied first): one tensor per output, and their dict. 0 / -1. */
static int outputs_fill(mstarpy_cached_outputs *o, PyObject *owner, const mstar_tensor_map *outs)
{
    outputs_free(o);
    size_t n = mstar_tensor_map_count(outs);
    o->map = outs;
    o->tensors = calloc(n ? n : 1, sizeof(*o->tensors));
    o->views = calloc(n ? n : 1, sizeof(*o->views));
    o->dict = PyDict_New();
    if (!o->tensors || !o->views || !o->dict) {
        outputs_free(o);
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        o->views[i] = *mstar_tensor_map_at(outs, i);
        PyObject *cap = mstarpy_capsule(owner, &o->views[i]);
        PyObject *t = cap ? mstarpy_torch_from_capsule(cap) : NULL;
        Py_XDECREF(cap);
        if (t)
            o->tensors[o->n++] = t;
        if (!t || PyDict_SetItemString(o->dict, mstar_tensor_map_name(outs, i), t) < 0) {
            outputs_free(o);
            return -1;
        }
    }
    return 0;
}

/* Whether `o` still views every output of `outs`. */
static bool outputs_current(const mstarpy_cached_outputs *o, const mstar_tensor_map *outs)
{
    size_t n = mstar_tensor_map_count(outs);
    if (o->map != outs || o->dict == NULL || o->n != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!same_view(&o->views[i], mstar_tensor_map_at(outs, i)))
            return false;
    return true;
}

PyObject *mstarpy_step_cache_outputs(mstarpy_step_cache *c, PyObject *owner,
                                     const mstar_tensor_map *outs)
{
    mstarpy_cached_outputs *o = NULL;
    for (size_t i = 0; i < c->nouts && !o; i++)
        if (c->outs[i].map == outs)
            o = &c->outs[i];
    if (!o && c->nouts < MSTARPY_CACHED_OUTPUTS) {
        if (outputs_fill(&c->outs[c->nouts], owner, outs) < 0)
            return NULL; /* the entry stays free */
        o = &c->outs[c->nouts++];
    }
    if (!o) { /* full: tensors made for this step only */
        mstarpy_cached_outputs once = { 0 };
        if (outputs_fill(&once, owner, outs) < 0)
            return NULL;
        PyObject *d = Py_NewRef(once.dict);
        outputs_free(&once);
        return d;
    }
    if (!outputs_current(o, outs) && outputs_fill(o, owner, outs) < 0)
        return NULL;
    /* A dict of its own: what the caller does to it does not reach the next step's. */
    return PyDict_Copy(o->dict);
}

int mstarpy_step_cache_traverse(mstarpy_step_cache *c, PyObject *owner, visitproc visit, void *arg)
{
    for (size_t i = 0; i < c->nleases; i++)
        Py_VISIT(c->leases[i].obj);
    for (size_t k = 0; k < c->nouts; k++) {
        mstarpy_cached_outputs *o = &c->outs[k];
        Py_VISIT(o->dict);
        for (size_t i = 0; i < o->n; i++) {
            Py_VISIT(o->tensors[i]);
            /* Held by the cache and its dict alone: the tensor's capsule reference on the owner
             * is a reference of the owner's own (see the top of the file). */
            if (Py_REFCNT(o->tensors[i]) == 2)
                Py_VISIT(owner);
        }
    }
    return 0;
}

void mstarpy_step_cache_clear(mstarpy_step_cache *c)
{
    for (size_t i = 0; i < c->nleases; i++)
        Py_CLEAR(c->leases[i].obj);
    c->nleases = 0;
    for (size_t k = 0; k < c->nouts; k++)
        outputs_free(&c->outs[k]);
    c->nouts = 0;
}
