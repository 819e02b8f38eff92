/*
 * msgpuck.c — the one translation unit that instantiates msgpuck.
 *
 * msgpuck is a header of inline functions; defining MP_SOURCE before including it here emits
 * their out-of-line copies and its lookup tables once, for the whole library (the header from
 * libmsgpuck-dev, not its static library).
 */
#define MP_SOURCE 1
#include <msgpuck.h>
