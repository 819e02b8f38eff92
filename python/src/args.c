/*
 * args.c — the hand parser of args.h: positional and keyword arguments of a fastcall sorted
 * into the method's parameters, with the errors Python's own parser raises (same TypeErrors,
 * the method named in them).
 */
#include "args.h"

#include <limits.h>

static int param_index(const mstarpy_params *p, PyObject *name)
{
    for (int i = 0; p->names[i]; i++)
        if (PyUnicode_CompareWithASCIIString(name, p->names[i]) == 0)
            return i;
    return -1;
}

int mstarpy_parse(const mstarpy_params *p, PyObject *const *args, Py_ssize_t nargs,
                  PyObject *kwnames, PyObject **out)
{
    int n = 0;
    while (p->names[n])
        out[n++] = NULL;
    if (nargs > p->npos && p->npos == 0) {
        PyErr_Format(PyExc_TypeError, "%s() takes no positional arguments", p->fn);
        return -1;
    }
    if (nargs > p->npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes %s %d positional argument%s (%zd given)", p->fn,
                     p->npos == p->nreq ? "exactly" : "at most", p->npos, p->npos == 1 ? "" : "s",
                     nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GetItem(kwnames, k);
        if (!name)
            return -1;
        int i = param_index(p, name);
        if (i < 0) {
            PyErr_Format(PyExc_TypeError, "'%U' is an invalid keyword argument for %s()", name,
                         p->fn);
            return -1;
        }
        if (out[i]) {
            PyErr_Format(PyExc_TypeError,
                         "argument for %s() given by name ('%s') and position (%d)", p->fn,
                         p->names[i], i + 1);
            return -1;
        }
        out[i] = args[nargs + k];
    }
    for (int i = 0; i < p->nreq; i++)
        if (!out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)", p->fn,
                         p->names[i], i + 1);
            return -1;
        }
    return 0;
}

int mstarpy_arg_ll(const mstarpy_params *p, PyObject *obj, long long lo, long long hi,
                   long long *out)
{
    long long v = PyLong_AsLongLong(obj); /* the TypeError of a non-int, as the parser's */
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < lo || v > hi) {
        PyErr_Format(PyExc_OverflowError, "%s(): %lld is out of range", p->fn, v);
        return -1;
    }
    *out = v;
    return 0;
}

int mstarpy_arg_bool(PyObject *obj, int *out)
{
    int v = PyObject_IsTrue(obj);
    if (v < 0)
        return -1;
    *out = v;
    return 0;
}
