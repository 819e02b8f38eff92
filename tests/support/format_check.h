/*
 * format_check.h — strict little checkers for the files the benchmark report writes (tests of
 * apps/mstar/bench/svg_plot.c and of `mstar bench all`): an XML well-formedness check for SVG, and
 * a JSON syntax check that also wants every number finite. They stop at the first problem and say
 * where.
 */
#ifndef MSTAR_TEST_FORMAT_CHECK_H
#define MSTAR_TEST_FORMAT_CHECK_H

#include <stdbool.h>
#include <stddef.h>

/* One root element named `root`; every tag closed in order or self-closed; attribute values in
 * double quotes; '&' only in the five named entities or a character reference; no '<' in text or
 * values; nothing but white space after the root. No prolog, DOCTYPE or comments (the report
 * writes none). */
bool mstar_test_xml_check(const char *text, const char *root, char *why, size_t cap);

/* One JSON value (RFC 8259 syntax) and only white space after it; every number is finite as a
 * double. *numbers (may be NULL) gets how many numbers it holds. */
bool mstar_test_json_check(const char *text, size_t *numbers, char *why, size_t cap);

#endif
