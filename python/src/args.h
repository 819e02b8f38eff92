/*
 * args.h — a hand parser for METH_FASTCALL | METH_KEYWORDS methods (args.c). The hot methods of
 * a handoff take their arguments through it: the generic PyArg_ParseTupleAndKeywords builds a
 * tuple and a dict per call and costs a good part of a short call.
 */
#ifndef MSTARPY_ARGS_H
#define MSTARPY_ARGS_H

#include "mstar_py.h"

/* One method's parameters: names[0..n) (NULL-terminated), of which the first npos may come by
 * position (the rest by keyword only) and the first nreq are required. */
typedef struct mstarpy_params {
    const char *fn; /* the method's name, for the messages */
    const char *const *names;
    int npos, nreq;
} mstarpy_params;

/* Sort a fastcall's arguments into out[0..n) as borrowed references, NULL where not given.
 * -1 with a TypeError worded as Python's own parser words it. */
int mstarpy_parse(const mstarpy_params *p, PyObject *const *args, Py_ssize_t nargs,
                  PyObject *kwnames, PyObject **out);

/* Converters for parsed arguments that were given (out[i] != NULL): an int in [lo, hi] (the
 * TypeError or OverflowError of an int argument), a truth value. -1 with an exception. */
int mstarpy_arg_ll(const mstarpy_params *p, PyObject *obj, long long lo, long long hi,
                   long long *out);
int mstarpy_arg_bool(PyObject *obj, int *out);

#endif
