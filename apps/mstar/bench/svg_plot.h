/*
 * svg_plot.h — line plots as standalone SVG files, for the report of `mstar bench all`
 * (bench_report.c). Axes are linear or logarithmic (base 2 or 10), tick labels plain numbers or
 * byte sizes; each series is a polyline with point markers, or a dashed line for a baseline; a
 * legend names them. Written by hand so the report needs no plotting tool.
 *
 * A point that cannot be drawn (not finite, or <= 0 on a log axis) is skipped and breaks its
 * line, so a failed measurement shows as a gap rather than a wrong value.
 */
#ifndef MSTAR_BENCH_SVG_PLOT_H
#define MSTAR_BENCH_SVG_PLOT_H

#include "mstar/core.h"

#include <stdio.h>

typedef enum mstar__tick_format {
    MSTAR__TICK_NUMBER = 0, /* 0.5, 20, 1000, 1e+06 */
    MSTAR__TICK_BYTES = 1,  /* 4 KiB, 1 MiB */
} mstar__tick_format;

typedef struct mstar__plot_axis {
    const char *label;
    int log_base; /* 0: linear; 2 or 10: logarithmic */
    mstar__tick_format format;
    double min, max; /* the range drawn; mstar__plot_fit sets it from the data when min >= max */
} mstar__plot_axis;

typedef struct mstar__plot_series {
    const char *name;
    const double *x, *y; /* borrowed: must live until the plot is written */
    size_t n;
    bool dashed; /* a baseline: dashed, no markers */
} mstar__plot_series;

#define MSTAR__PLOT_MAX_SERIES 12

typedef struct mstar__plot {
    const char *title;
    mstar__plot_axis x, y;
    size_t nseries;
    mstar__plot_series series[MSTAR__PLOT_MAX_SERIES];
} mstar__plot;

/* An empty plot with linear axes and no range. */
void mstar__plot_init(mstar__plot *p, const char *title);
/* Add a series; MSTAR_ENOSPC past MSTAR__PLOT_MAX_SERIES. */
mstar_status mstar__plot_add(mstar__plot *p, const char *name, const double *x, const double *y,
                             size_t n, bool dashed);
/* Set the range of each axis that has none (min >= max) from the drawable points: a log axis
 * from the power of its base at or below the smallest value to the one at or above the largest;
 * a linear axis from 0 (or below, for negative data) to a round value at or above the largest. */
void mstar__plot_fit(mstar__plot *p);

/* Where `v` lies on axis `a` when its range is drawn from pixel px0 (at min) to px1 (at max);
 * NaN when v cannot be drawn on that axis. */
double mstar__axis_map(const mstar__plot_axis *a, double v, double px0, double px1);
/* The tick values of a fitted axis, in increasing order (at most `cap`); returns their count. */
size_t mstar__axis_ticks(const mstar__plot_axis *a, double *ticks, size_t cap);
/* A tick's label ("1 MiB", "250", "0.5"), truncated to fit `cap`. */
void mstar__axis_label(const mstar__plot_axis *a, double v, char *buf, size_t cap);

/* `s` as XML character data or attribute text: & < > " ' escaped, control characters (which
 * XML 1.0 cannot carry) as spaces. Writes at most cap - 1 bytes and a NUL, never cutting an
 * escape in half; returns the length the whole escaped text needs. */
size_t mstar__svg_escape(const char *s, char *out, size_t cap);

/* Write the plot as one SVG document. MSTAR_EIO if the stream reports an error. */
mstar_status mstar__plot_write(const mstar__plot *p, FILE *out);
/* Write it to the file `path` (created or replaced). */
mstar_status mstar__plot_save(const mstar__plot *p, const char *path);

#endif
