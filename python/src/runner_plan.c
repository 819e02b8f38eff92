/*
 * runner_plan.c — capture planning and rank agreement from Python: _Sizing (mstar_size_captures
 * over a _GraphRunner: a cost per bucket, the walks' executable measurements), plan_captures,
 * fail_if_graphs_required, _RankGroup (single, over the control mesh, or a callback: graphs.py
 * wraps a torch.distributed group in one) and capture_startup (mstar_capture_startup_run, the
 * whole startup order of one device). The planner and the agreement are the library's; this
 * file converts.
 *
 * A cost crosses as a tuple (peak, has_graph, graph, kept, slots, outside, executable), the
 * fields of mstar_capture_cost in order.
 */
#include "runner.h"

#include <stdlib.h>
#include <string.h>

/* ---- _RankGroup -------------------------------------------------------------------------------
 */

typedef struct rg_obj {
    PyObject ob_base;
    mstar_rank_group *g;
    PyObject *reduce; /* a callback group's reduce(values, op) */
} rg_obj;

static PyTypeObject *rg_type;
static PyTypeObject *sizing_type;

static mstar_rank_group *rg_handle(PyObject *o)
{
    if (o == Py_None)
        return NULL;
    if (!PyObject_TypeCheck(o, rg_type)) {
        PyErr_SetString(PyExc_TypeError, "expected a rank group");
        return NULL;
    }
    if (!((rg_obj *)o)->g)
        mstarpy_raise_msg(MSTAR_ECLOSED, "the rank group is closed");
    return ((rg_obj *)o)->g;
}

static mstar_status py_reduce(void *user, int64_t *values, size_t n, mstar_reduce reduce)
{
    rg_obj *self = user;
    PyGILState_STATE gs = PyGILState_Ensure();
    mstar_status st = MSTAR_OK;
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++)
        PyList_SetItem(l, (Py_ssize_t)i, PyLong_FromLongLong(values[i]));
    PyObject *r =
        l ? PyObject_CallFunction(self->reduce, "Os", l, reduce == MSTAR_REDUCE_MIN ? "min" : "max")
          : NULL;
    PyObject *seq = r ? mstarpy_seq_list(r, "reduce must return a sequence") : NULL;
    if (seq && PyList_Size(seq) != (Py_ssize_t)n)
        st = mstar_error_set(MSTAR_EPROTO, "reduce returned %zd values for %zu",
                             (Py_ssize_t)PyList_Size(seq), n);
    for (size_t i = 0; seq && st == MSTAR_OK && i < n; i++) {
        long long v = PyLong_AsLongLong(PyList_GetItem(seq, (Py_ssize_t)i));
        if (v == -1 && PyErr_Occurred())
            break;
        values[i] = v;
    }
    if (PyErr_Occurred()) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyObject *s = v ? PyObject_Str(v) : NULL;
        const char *m = s ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL;
        st = mstar_error_set(MSTAR_EPROTO, "the group's reduce raised %s", m ? m : "?");
        PyErr_Clear();
        Py_XDECREF(s);
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
    }
    Py_XDECREF(seq);
    Py_XDECREF(r);
    Py_XDECREF(l);
    PyGILState_Release(gs);
    return st;
}

/* _RankGroup(kind, ...): ("single",), ("host", name, rank, world_size, timeout_ms=0),
 * ("custom", rank, world_size, reduce) */
static PyObject *rg_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    const char *kind;
    if (PyTuple_Size(args) < 1 || !(kind = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(args, 0), NULL)))
        return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_TypeError, "a kind"), NULL);
    rg_obj *self = (rg_obj *)PyType_GenericAlloc(tp, 0);
    if (!self)
        return NULL;
    mstar_status st = MSTAR_OK;
    const char *name, *k;
    int rank, size;
    long long timeout = 0;
    PyObject *fn;
    if (strcmp(kind, "single") == 0) {
        st = mstar_rank_group_create_single(&self->g);
    } else if (strcmp(kind, "host") == 0) {
        if (!PyArg_ParseTuple(args, "ssii|L", &k, &name, &rank, &size, &timeout))
            goto fail;
        mstar_host_group_options o = { NULL, timeout };
        Py_BEGIN_ALLOW_THREADS;
        st = mstar_rank_group_create_host(name, rank, size, &o, &self->g);
        Py_END_ALLOW_THREADS;
    } else if (strcmp(kind, "custom") == 0) {
        if (!PyArg_ParseTuple(args, "siiO", &k, &rank, &size, &fn))
            goto fail;
        self->reduce = Py_NewRef(fn);
        st = mstar_rank_group_create_custom(rank, size, py_reduce, NULL, self, &self->g);
    } else {
        PyErr_Format(PyExc_ValueError, "unknown rank group kind '%s'", kind);
        goto fail;
    }
    if (st != MSTAR_OK) {
        mstarpy_raise(st);
        goto fail;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static void rg_close(rg_obj *self)
{
    mstar_rank_group *g = self->g;
    self->g = NULL;
    if (g) {
        Py_BEGIN_ALLOW_THREADS;
        mstar_rank_group_destroy(g);
        Py_END_ALLOW_THREADS;
    }
}

static void rg_dealloc(PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
    rg_close((rg_obj *)obj);
    Py_CLEAR(((rg_obj *)obj)->reduce);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(obj);
    Py_DECREF(tp);
}

static int reduce_from_py(const char *s, mstar_reduce *out)
{
    if (strcmp(s, "min") == 0 || strcmp(s, "amin") == 0)
        *out = MSTAR_REDUCE_MIN;
    else if (strcmp(s, "max") == 0 || strcmp(s, "amax") == 0)
        *out = MSTAR_REDUCE_MAX;
    else
        return mstarpy_raise_msg(MSTAR_EINVAL, "reduce '%s': expected 'min' or 'max'", s), -1;
    return 0;
}

/* agree(values, reduce) -> list */
static PyObject *rg_agree(PyObject *self, PyObject *args)
{
    PyObject *vals;
    const char *rs;
    if (!PyArg_ParseTuple(args, "Os", &vals, &rs))
        return NULL;
    mstar_reduce red;
    mstar_rank_group *g = rg_handle(self);
    if (!g || reduce_from_py(rs, &red) < 0)
        return NULL;
    PyObject *seq = mstarpy_seq_list(vals, "values must be a sequence of ints");
    if (!seq)
        return NULL;
    Py_ssize_t n = PyList_Size(seq);
    int64_t *v = calloc((size_t)n + 1, sizeof(*v));
    int r = v ? 0 : (PyErr_NoMemory(), -1);
    for (Py_ssize_t i = 0; r == 0 && i < n; i++)
        r = mstarpy_i64_from_py(PyList_GetItem(seq, i), &v[i], "value");
    Py_DECREF(seq);
    PyObject *res = NULL;
    if (r == 0) {
        mstar_status st;
        bool custom = ((rg_obj *)self)->reduce != NULL;
        if (custom) { /* its reduce is Python: keep the GIL */
            st = mstar_agree_across_ranks(g, v, (size_t)n, red);
        } else {
            Py_BEGIN_ALLOW_THREADS;
            st = mstar_agree_across_ranks(g, v, (size_t)n, red);
            Py_END_ALLOW_THREADS;
        }
        if (st != MSTAR_OK) {
            mstarpy_raise(st);
        } else {
            res = PyList_New(n);
            for (Py_ssize_t i = 0; res && i < n; i++)
                PyList_SetItem(res, i, PyLong_FromLongLong(v[i]));
        }
    }
    free(v);
    return res;
}

static PyObject *rg_get_rank(PyObject *self, void *unused)
{
    mstar_rank_group *g = rg_handle(self);
    return g ? PyLong_FromLong(mstar_rank_group_rank(g)) : NULL;
}

static PyObject *rg_get_size(PyObject *self, void *unused)
{
    mstar_rank_group *g = rg_handle(self);
    return g ? PyLong_FromLong(mstar_rank_group_size(g)) : NULL;
}

static PyObject *rg_close_m(PyObject *self, PyObject *unused)
{
    rg_close((rg_obj *)self);
    Py_RETURN_NONE;
}

static PyMethodDef rg_methods[] = {
    { "agree", rg_agree, METH_VARARGS, "agree(values, 'min' or 'max') -> list" },
    { "close", rg_close_m, METH_NOARGS, NULL },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef rg_getset[] = {
    { "rank", rg_get_rank, NULL, NULL, NULL },
    { "size", rg_get_size, NULL, NULL, NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot rg_slots[] = {
    { Py_tp_new, rg_new },
    { Py_tp_dealloc, rg_dealloc },
    { Py_tp_methods, rg_methods },
    { Py_tp_getset, rg_getset },
    { Py_tp_doc, "_RankGroup(kind, ...): the library's rank group (single, host, custom)." },
    { 0, NULL },
};

static PyType_Spec rg_spec = { "mstar_c._mstar._RankGroup", sizeof(rg_obj), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, rg_slots };

/* ---- costs ------------------------------------------------------------------------------------
 */

static PyObject *cost_to_py(const mstar_capture_cost *c)
{
    return Py_BuildValue("(KNKKIKi)", (unsigned long long)c->peak, PyBool_FromLong(c->has_graph),
                         (unsigned long long)c->graph, (unsigned long long)c->kept,
                         (unsigned)c->slots, (unsigned long long)c->outside, (int)c->executable);
}

static int cost_from_py(PyObject *o, mstar_capture_cost *c)
{
    unsigned long long peak, graph, kept, outside;
    unsigned slots;
    int has, exe;
    if (!PyArg_ParseTuple(o, "KpKKIKi", &peak, &has, &graph, &kept, &slots, &outside, &exe))
        return -1;
    *c = (mstar_capture_cost){ peak, has != 0, graph, kept, slots, outside, exe };
    return 0;
}

/* ---- _Sizing ----------------------------------------------------------------------------------
 */

typedef struct sizing_obj {
    PyObject ob_base;
    mstar_capture_sizing *s;
    PyObject *runner; /* the costs' keys are its strings */
} sizing_obj;

static PyObject *py_size_captures(PyObject *mod, PyObject *args)
{
    PyObject *ro, *go = Py_None;
    if (!PyArg_ParseTuple(args, "O|O", &ro, &go))
        return NULL;
    /* a whole-forward runner or a piecewise region */
    bool piecewise = PyObject_TypeCheck(ro, mstarpy_piecewise_runner_type);
    mstar_piecewise_runner *pr = piecewise ? mstarpy_piecewise_runner_handle(ro) : NULL;
    mstar_graph_runner *r = piecewise ? NULL : mstarpy_graph_runner_handle(ro);
    if (!r && !pr)
        return NULL;
    mstar_rank_group *g = rg_handle(go);
    if (!g && PyErr_Occurred())
        return NULL;
    sizing_obj *self = (sizing_obj *)PyType_GenericAlloc(sizing_type, 0);
    if (!self)
        return NULL;
    self->runner = Py_NewRef(ro);
    mstar_status st = piecewise ? mstar_size_piecewise_captures(pr, g, &self->s)
                                : mstar_size_captures(r, g, &self->s);
    mstarpy_graph_runner_forget_stale(ro);
    if (st != MSTAR_OK) {
        Py_DECREF(self);
        return mstarpy_raise(st);
    }
    return (PyObject *)self;
}

static void sizing_dealloc(PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
    sizing_obj *self = (sizing_obj *)obj;
    mstar_capture_sizing_destroy(self->s);
    Py_CLEAR(self->runner);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(obj);
    Py_DECREF(tp);
}

/* costs() -> [(key, config_idx, cost)] */
static PyObject *sizing_costs(PyObject *self, PyObject *unused)
{
    size_t n;
    mstar_bucket_cost *c = mstar_capture_sizing_costs(((sizing_obj *)self)->s, &n);
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *k = mstarpy_key_to_py(&c[i].key);
        PyObject *co = k ? cost_to_py(&c[i].cost) : NULL;
        PyObject *t = co ? Py_BuildValue("(NIN)", k, c[i].config_idx, co) : NULL;
        if (!t) {
            Py_XDECREF(k);
            Py_CLEAR(l);
            break;
        }
        PyList_SetItem(l, (Py_ssize_t)i, t);
    }
    return l;
}

static PyObject *sizing_set_cost(PyObject *self, PyObject *args)
{
    Py_ssize_t i;
    PyObject *co;
    if (!PyArg_ParseTuple(args, "nO", &i, &co))
        return NULL;
    size_t n;
    mstar_bucket_cost *c = mstar_capture_sizing_costs(((sizing_obj *)self)->s, &n);
    if (i < 0 || (size_t)i >= n)
        return mstarpy_raise_msg(MSTAR_ERANGE, "cost %zd of %zu", i, n);
    mstar_capture_cost v;
    if (cost_from_py(co, &v) < 0)
        return NULL;
    c[i].cost = v;
    Py_RETURN_NONE;
}

static PyObject *sizing_lent(PyObject *self, PyObject *arg)
{
    int wanted = PyObject_IsTrue(arg);
    if (wanted < 0)
        return NULL;
    mstar_status st = mstar_size_lent_captures(((sizing_obj *)self)->s, wanted);
    mstarpy_graph_runner_forget_stale(((sizing_obj *)self)->runner);
    if (st != MSTAR_OK)
        return mstarpy_raise(st);
    Py_RETURN_NONE;
}

/* executable(walk) -> (per_node or None, held, copies) */
static PyObject *sizing_executable(PyObject *self, PyObject *arg)
{
    Py_ssize_t w = PyLong_AsSsize_t(arg);
    if (w == -1 && PyErr_Occurred())
        return NULL;
    sizing_obj *s = (sizing_obj *)self;
    if (w < 0 || (size_t)w >= mstar_capture_sizing_walks(s->s))
        return mstarpy_raise_msg(MSTAR_ERANGE, "walk %zd of %zu", w,
                                 mstar_capture_sizing_walks(s->s));
    mstar_exec_memory *em = mstar_capture_sizing_executable(s->s, (size_t)w);
    double per;
    PyObject *pn =
        mstar_exec_memory_per_node(em, &per) ? PyFloat_FromDouble(per) : Py_NewRef(Py_None);
    return Py_BuildValue("(NKn)", pn, (unsigned long long)mstar_exec_memory_held(em),
                         (Py_ssize_t)mstar_exec_memory_copies(em));
}

static PyObject *sizing_walks(PyObject *self, PyObject *unused)
{
    return PyLong_FromSize_t(mstar_capture_sizing_walks(((sizing_obj *)self)->s));
}

static PyObject *sizing_release(PyObject *self, PyObject *unused)
{
    mstar_capture_sizing_release(((sizing_obj *)self)->s);
    Py_RETURN_NONE;
}

static PyMethodDef sizing_methods[] = {
    { "costs", sizing_costs, METH_NOARGS, "-> [(key, config_idx, cost tuple)]" },
    { "set_cost", sizing_set_cost, METH_VARARGS, "set_cost(i, cost tuple): an agreed value." },
    { "size_lent", sizing_lent, METH_O, "size_lent(wanted)" },
    { "executable", sizing_executable, METH_O, "-> (per_node, held, copies)" },
    { "walks", sizing_walks, METH_NOARGS, NULL },
    { "release", sizing_release, METH_NOARGS, NULL },
    { NULL, NULL, 0, NULL },
};

static PyType_Slot sizing_slots[] = {
    { Py_tp_dealloc, sizing_dealloc },
    { Py_tp_methods, sizing_methods },
    { Py_tp_doc, "What mstar_size_captures learned about one runner." },
    { 0, NULL },
};

static PyType_Spec sizing_spec = { "mstar_c._mstar._Sizing", sizeof(sizing_obj), 0,
                                   Py_TPFLAGS_DEFAULT, sizing_slots };

/* ---- plan_captures ----------------------------------------------------------------------------
 */

/* plan_captures(pools, free, credits, reusable) with pools [(name, [(key, config_idx, cost)])]
 * -> (floor, [(predicted, outside, [planned bools])]) */
static PyObject *py_plan_captures(PyObject *mod, PyObject *args)
{
    PyObject *pools, *credits_o, *reusable_o;
    unsigned long long free_bytes;
    if (!PyArg_ParseTuple(args, "OKOO", &pools, &free_bytes, &credits_o, &reusable_o))
        return NULL;
    PyObject *pseq = mstarpy_seq_list(pools, "pools must be a sequence");
    if (!pseq)
        return NULL;
    Py_ssize_t np = PyList_Size(pseq);
    mstar_pool_costs *pc = calloc((size_t)np + 1, sizeof(*pc));
    mstar_bucket_cost **bc = calloc((size_t)np + 1, sizeof(*bc));
    PyObject **bseqs = calloc((size_t)np + 1, sizeof(*bseqs));
    uint64_t *credits = NULL;
    size_t ncredits = 0;
    PyObject *res = NULL;
    int r = pc && bc && bseqs ? 0 : (PyErr_NoMemory(), -1);
    for (Py_ssize_t i = 0; r == 0 && i < np; i++) {
        PyObject *p = PyList_GetItem(pseq, i);
        PyObject *name, *buckets;
        if (!PyArg_ParseTuple(p, "OO", &name, &buckets) ||
            !(pc[i].name = PyUnicode_AsUTF8AndSize(name, NULL)) ||
            !(bseqs[i] = mstarpy_seq_list(buckets, "buckets must be a sequence"))) {
            r = -1;
            break;
        }
        Py_ssize_t nb = PyList_Size(bseqs[i]);
        bc[i] = calloc((size_t)nb + 1, sizeof(**bc));
        if (!bc[i]) {
            PyErr_NoMemory();
            r = -1;
            break;
        }
        for (Py_ssize_t j = 0; r == 0 && j < nb; j++) {
            PyObject *key, *co;
            unsigned idx;
            if (!PyArg_ParseTuple(PyList_GetItem(bseqs[i], j), "OIO", &key, &idx, &co) ||
                mstarpy_key_from_py(key, &bc[i][j].key) < 0 || cost_from_py(co, &bc[i][j].cost) < 0)
                r = -1;
            bc[i][j].config_idx = idx;
        }
        pc[i].buckets = bc[i];
        pc[i].nbuckets = (size_t)nb;
    }
    if (r == 0 && credits_o != Py_None) {
        PyObject *cs = mstarpy_seq_list(credits_o, "credits must be a sequence");
        if (!cs) {
            r = -1;
        } else {
            ncredits = (size_t)PyList_Size(cs);
            credits = calloc(ncredits + 1, sizeof(*credits));
            for (size_t i = 0; credits && r == 0 && i < ncredits; i++)
                r = mstarpy_u64_from_py(PyList_GetItem(cs, (Py_ssize_t)i), &credits[i], "credit");
            Py_DECREF(cs);
        }
    }
    uint64_t reusable = MSTAR_PLAN_REUSE_UNBOUNDED;
    if (r == 0 && reusable_o != Py_None)
        r = mstarpy_u64_from_py(reusable_o, &reusable, "reusable");
    if (r == 0) {
        mstar_capture_plan plan;
        memset(&plan, 0, sizeof(plan));
        mstar_status st =
            mstar_plan_captures(pc, (size_t)np, free_bytes, credits, ncredits, reusable, &plan);
        if (st != MSTAR_OK) {
            mstarpy_raise(st);
        } else {
            PyObject *pl = PyList_New(np);
            for (Py_ssize_t i = 0; pl && i < np; i++) {
                PyObject *b = PyList_New((Py_ssize_t)pc[i].nbuckets);
                for (size_t j = 0; b && j < pc[i].nbuckets; j++)
                    PyList_SetItem(b, (Py_ssize_t)j, PyBool_FromLong(plan.pools[i].planned[j]));
                PyObject *t =
                    b ? Py_BuildValue("(KKN)", (unsigned long long)plan.pools[i].predicted,
                                      (unsigned long long)plan.pools[i].outside, b)
                      : NULL;
                if (!t) {
                    Py_CLEAR(pl);
                    break;
                }
                PyList_SetItem(pl, i, t);
            }
            if (pl)
                res = Py_BuildValue("(KN)", (unsigned long long)plan.floor, pl);
            mstar_capture_plan_clear(&plan);
        }
    }
    for (Py_ssize_t i = 0; bseqs && i < np; i++) {
        Py_XDECREF(bseqs[i]);
        free(bc ? bc[i] : NULL);
    }
    free(bseqs);
    free(bc);
    free(pc);
    free(credits);
    Py_DECREF(pseq);
    return res;
}

static PyObject *py_fail_if_required(PyObject *mod, PyObject *arg)
{
    PyObject *seq = mstarpy_seq_list(arg, "missing must be a sequence of names");
    if (!seq)
        return NULL;
    Py_ssize_t n = PyList_Size(seq);
    const char **names = calloc((size_t)n + 1, sizeof(*names));
    int r = names ? 0 : (PyErr_NoMemory(), -1);
    for (Py_ssize_t i = 0; r == 0 && i < n; i++)
        r = (names[i] = PyUnicode_AsUTF8AndSize(PyList_GetItem(seq, i), NULL)) ? 0 : -1;
    PyObject *res = NULL;
    if (r == 0) {
        mstar_status st = mstar_fail_if_graphs_required(names, (size_t)n);
        res = st != MSTAR_OK ? mstarpy_raise(st) : Py_NewRef(Py_None);
    }
    free(names);
    Py_DECREF(seq);
    return res;
}

static PyObject *py_bucket_name(PyObject *mod, PyObject *key)
{
    mstar_bucket_key k;
    if (mstarpy_key_from_py(key, &k) < 0)
        return NULL;
    char buf[MSTAR_BUCKET_NAME_MAX];
    return PyUnicode_FromString(mstar_bucket_key_format(&k, buf, sizeof(buf)));
}

static PyObject *py_dummy_rid_handle(PyObject *mod, PyObject *arg)
{
    const char *name = PyUnicode_AsUTF8AndSize(arg, NULL);
    if (!name)
        return NULL;
    int64_t h;
    mstar_status st = mstar_dummy_rid_handle(name, &h);
    return st != MSTAR_OK ? mstarpy_raise(st) : PyLong_FromLongLong(h);
}

static PyObject *py_dummy_rid_name(PyObject *mod, PyObject *arg)
{
    long long h = PyLong_AsLongLong(arg);
    if (h == -1 && PyErr_Occurred())
        return NULL;
    const char *name = mstar_dummy_rid_name(h);
    if (!name)
        Py_RETURN_NONE;
    return PyUnicode_FromString(name);
}

/* capture_startup(step_runner, runners, group=None, reusable=None) -> report dict; `runners`
 * holds the device's whole-forward runners and piecewise regions (each list in one order on every
 * rank). */
static PyObject *py_capture_startup(PyObject *mod, PyObject *args)
{
    PyObject *sro, *runners, *go = Py_None, *ro = Py_None;
    if (!PyArg_ParseTuple(args, "OO|OO", &sro, &runners, &go, &ro))
        return NULL;
    mstar_capture_startup o;
    memset(&o, 0, sizeof(o));
    if (!(o.step_runner = mstarpy_step_runner_handle(sro)))
        return NULL;
    o.group = rg_handle(go);
    if (!o.group && PyErr_Occurred())
        return NULL;
    if (ro != Py_None) {
        o.bound_reuse = true;
        if (mstarpy_u64_from_py(ro, &o.reusable, "reusable") < 0)
            return NULL;
    }
    PyObject *seq = mstarpy_seq_list(runners, "runners must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PyList_Size(seq);
    mstar_graph_runner **rs = calloc((size_t)n + 1, sizeof(*rs));
    mstar_piecewise_runner **ps = calloc((size_t)n + 1, sizeof(*ps));
    int r = rs && ps ? 0 : (PyErr_NoMemory(), -1);
    for (Py_ssize_t i = 0; r == 0 && i < n; i++) { /* whole-forward runners and regions */
        PyObject *it = PyList_GetItem(seq, i);
        if (PyObject_TypeCheck(it, mstarpy_piecewise_runner_type))
            r = (ps[o.n_piecewise++] = mstarpy_piecewise_runner_handle(it)) ? 0 : -1;
        else
            r = (rs[o.n_runners++] = mstarpy_graph_runner_handle(it)) ? 0 : -1;
    }
    PyObject *res = NULL;
    if (r == 0) {
        o.runners = rs;
        o.piecewise = ps;
        mstar_capture_report rep;
        memset(&rep, 0, sizeof(rep));
        mstar_status st = mstar_capture_startup_run(&o, &rep);
        /* Each runner forgets the replays of graphs startup dropped; the exception a callback
         * raised is the cause when startup failed (else a bucket it dropped, forgotten). */
        PyObject *first = NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *e = PyObject_CallMethod(PyList_GetItem(seq, i), "_after_startup", NULL);
            if (e && e != Py_None && !first)
                first = Py_NewRef(e);
            Py_XDECREF(e);
            PyErr_Clear();
        }
        if (st != MSTAR_OK) {
            /* The library's error (it names the bucket or the rank), caused by the callback's
             * exception when one was raised. */
            mstarpy_raise(st);
            if (first) {
                PyObject *t, *v, *tb;
                PyErr_Fetch(&t, &v, &tb);
                PyErr_NormalizeException(&t, &v, &tb);
                if (v)
                    PyException_SetCause(v, Py_NewRef(first));
                PyErr_Restore(t, v, tb);
            }
        } else
            res = Py_BuildValue(
                "{sKsKsKsKsKsKsnsnsnsNsd}", "free_bytes", (unsigned long long)rep.free_bytes,
                "floor", (unsigned long long)rep.floor, "predicted",
                (unsigned long long)rep.predicted, "predicted_outside",
                (unsigned long long)rep.predicted_outside, "taken", (unsigned long long)rep.taken,
                "outside", (unsigned long long)rep.outside, "buckets", (Py_ssize_t)rep.buckets,
                "planned", (Py_ssize_t)rep.planned, "captured", (Py_ssize_t)rep.captured, "resized",
                PyBool_FromLong(rep.resized), "capture_seconds", rep.capture_seconds);
        Py_XDECREF(first);
    }
    free(rs);
    free(ps);
    Py_DECREF(seq);
    return res;
}

static PyMethodDef plan_functions[] = {
    { "_size_captures", py_size_captures, METH_VARARGS, "_size_captures(runner, group=None)" },
    { "_plan_captures", py_plan_captures, METH_VARARGS,
      "_plan_captures(pools, free, credits, reusable)" },
    { "_fail_if_graphs_required", py_fail_if_required, METH_O, NULL },
    { "_bucket_name", py_bucket_name, METH_O, "The name mstar_bucket_key_format gives a key." },
    { "_dummy_rid_handle", py_dummy_rid_handle, METH_O, NULL },
    { "_dummy_rid_name", py_dummy_rid_name, METH_O, NULL },
    { "_capture_startup", py_capture_startup, METH_VARARGS,
      "_capture_startup(step_runner, runners, group=None, reusable=None)" },
    { NULL, NULL, 0, NULL },
};

int mstarpy_add_runner_plan_functions(PyObject *module)
{
    rg_type = (PyTypeObject *)PyType_FromSpec(&rg_spec);
    sizing_type = (PyTypeObject *)PyType_FromSpec(&sizing_spec);
    if (!rg_type || !sizing_type)
        return -1;
    if (PyModule_AddObjectRef(module, "_RankGroup", (PyObject *)rg_type) < 0 ||
        PyModule_AddObjectRef(module, "_Sizing", (PyObject *)sizing_type) < 0)
        return -1;
    return PyModule_AddFunctions(module, plan_functions);
}

int mstarpy_add_runner_types(PyObject *module)
{
    if (mstarpy_add_runner_step_types(module) < 0 || mstarpy_add_runner_graph_types(module) < 0 ||
        mstarpy_add_runner_piecewise_types(module) < 0 ||
        PyModule_AddFunctions(module, mstarpy_lease_functions) < 0)
        return -1;
    return mstarpy_add_runner_plan_functions(module);
}
