/*
 * svg_plot.c — the line-plot writer of svg_plot.h: range fitting, scales, ticks, escaping and
 * the SVG document itself (a fixed layout: plot area on the left, legend on the right).
 */
#include "svg_plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* The layout, in pixels. */
#define WIDTH       760
#define HEIGHT      440
#define AREA_LEFT   84
#define AREA_RIGHT  550
#define AREA_TOP    44
#define AREA_BOTTOM 384
#define MAX_TICKS   16

/* log_b(v) is computed through log(); a tiny slack keeps exact powers (log(1000)/log(10) is
 * 2.9999999999999996) on the right side of floor and ceil. */
#define LOG_SLACK 1e-9

static const char *const palette[MSTAR__PLOT_MAX_SERIES] = {
    "#1f6fb4", "#e3761c", "#2a9d3a", "#c8323a", "#7b52ab", "#8a5a44",
    "#d55fb0", "#6b6b6b", "#17a2b8", "#a89a00", "#3b3b98", "#5f8f00",
};

void mstar__plot_init(mstar__plot *p, const char *title)
{
    memset(p, 0, sizeof(*p));
    p->title = title;
}

mstar_status mstar__plot_add(mstar__plot *p, const char *name, const double *x, const double *y,
                             size_t n, bool dashed)
{
    if (p->nseries == MSTAR__PLOT_MAX_SERIES)
        return mstar_error_set(MSTAR_ENOSPC, "plot '%s': at most %d series", p->title,
                               MSTAR__PLOT_MAX_SERIES);
    mstar__plot_series s = { name, x, y, n, dashed };
    p->series[p->nseries++] = s;
    return MSTAR_OK;
}

static bool drawable(const mstar__plot_axis *a, double v)
{
    return isfinite(v) && (a->log_base == 0 || v > 0);
}

static double log_b(const mstar__plot_axis *a, double v)
{
    return log(v) / log((double)a->log_base);
}

/* 1, 2 or 5 times a power of ten, at or above `raw`. */
static double nice_step(double raw)
{
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    return (f <= 1 + LOG_SLACK ? 1 : f <= 2 + LOG_SLACK ? 2 : f <= 5 + LOG_SLACK ? 5 : 10) * mag;
}

static void fit_axis(mstar__plot_axis *a, double lo, double hi)
{
    if (a->log_base != 0) {
        if (!(lo <= hi)) /* no drawable point */
            lo = hi = 1;
        a->min = pow(a->log_base, floor(log_b(a, lo) + LOG_SLACK));
        a->max = pow(a->log_base, ceil(log_b(a, hi) - LOG_SLACK));
        if (a->max <= a->min)
            a->max = a->min * a->log_base;
        return;
    }
    if (!(lo <= hi))
        lo = hi = 0;
    lo = lo < 0 ? lo : 0;
    hi = hi > 0 ? hi : 0;
    if (hi == lo)
        hi = lo + 1;
    double step = nice_step((hi - lo) / 5);
    a->min = floor(lo / step + LOG_SLACK) * step;
    a->max = ceil(hi / step - LOG_SLACK) * step;
}

void mstar__plot_fit(mstar__plot *p)
{
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (size_t s = 0; s < p->nseries; s++) {
        const mstar__plot_series *ser = &p->series[s];
        for (size_t i = 0; i < ser->n; i++) {
            if (!drawable(&p->x, ser->x[i]) || !drawable(&p->y, ser->y[i]))
                continue;
            xlo = fmin(xlo, ser->x[i]);
            xhi = fmax(xhi, ser->x[i]);
            ylo = fmin(ylo, ser->y[i]);
            yhi = fmax(yhi, ser->y[i]);
        }
    }
    if (!(p->x.min < p->x.max))
        fit_axis(&p->x, xlo, xhi);
    if (!(p->y.min < p->y.max))
        fit_axis(&p->y, ylo, yhi);
}

double mstar__axis_map(const mstar__plot_axis *a, double v, double px0, double px1)
{
    if (!drawable(a, v) || !(a->min < a->max) || (a->log_base != 0 && a->min <= 0))
        return NAN;
    double t = a->log_base != 0 ? (log(v) - log(a->min)) / (log(a->max) - log(a->min))
                                : (v - a->min) / (a->max - a->min);
    return px0 + t * (px1 - px0);
}

size_t mstar__axis_ticks(const mstar__plot_axis *a, double *ticks, size_t cap)
{
    size_t n = 0;
    if (!(a->min < a->max) || (a->log_base != 0 && a->min <= 0))
        return 0;
    if (a->log_base != 0) {
        double kmin = ceil(log_b(a, a->min) - LOG_SLACK),
               kmax = floor(log_b(a, a->max) + LOG_SLACK);
        double step = kmax - kmin > 8 ? ceil((kmax - kmin) / 8) : 1;
        for (double k = kmin; k <= kmax && n < cap; k += step)
            ticks[n++] = pow(a->log_base, k);
        return n;
    }
    double step = nice_step((a->max - a->min) / 5);
    double first = ceil(a->min / step - LOG_SLACK);
    for (double k = first; k * step <= a->max + step * LOG_SLACK && n < cap; k++)
        ticks[n++] = k == 0 ? 0 : k * step; /* no "-0" */
    return n;
}

void mstar__axis_label(const mstar__plot_axis *a, double v, char *buf, size_t cap)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    if (a->format != MSTAR__TICK_BYTES) {
        snprintf(buf, cap, "%g", v);
        return;
    }
    int u = 0;
    while (u < 4 && fabs(v) >= 1024) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, "%g %s", v, units[u]);
}

size_t mstar__svg_escape(const char *s, char *out, size_t cap)
{
    size_t need = 0, at = 0;
    bool full = cap == 0;
    for (; *s != '\0'; s++) {
        char one[2] = { *s, '\0' };
        const char *rep = one;
        switch (*s) {
        case '&':
            rep = "&amp;";
            break;
        case '<':
            rep = "&lt;";
            break;
        case '>':
            rep = "&gt;";
            break;
        case '"':
            rep = "&quot;";
            break;
        case '\'':
            rep = "&apos;";
            break;
        default:
            if ((unsigned char)*s < 0x20)
                one[0] = ' ';
        }
        size_t len = strlen(rep);
        full = full || at + len >= cap; /* nothing after a cut: no half escape */
        if (!full) {
            memcpy(out + at, rep, len);
            at += len;
        }
        need += len;
    }
    if (cap > 0)
        out[at] = '\0';
    return need;
}

/* Text escaped into a buffer that fits any label this file writes. */
static void put_text(FILE *out, const char *s)
{
    char buf[1024];
    mstar__svg_escape(s != NULL ? s : "", buf, sizeof(buf));
    fputs(buf, out);
}

static void write_axes(const mstar__plot *p, FILE *out)
{
    double ticks[MAX_TICKS];
    char label[64];
    size_t n = mstar__axis_ticks(&p->x, ticks, MAX_TICKS);
    fprintf(out, "<g stroke=\"#dddddd\" stroke-width=\"1\">\n");
    for (size_t i = 0; i < n; i++) {
        double x = mstar__axis_map(&p->x, ticks[i], AREA_LEFT, AREA_RIGHT);
        fprintf(out, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", x, AREA_TOP, x,
                AREA_BOTTOM);
    }
    size_t m = mstar__axis_ticks(&p->y, ticks + n, MAX_TICKS - n);
    for (size_t i = n; i < n + m; i++) {
        double y = mstar__axis_map(&p->y, ticks[i], AREA_BOTTOM, AREA_TOP);
        fprintf(out, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", AREA_LEFT, y,
                AREA_RIGHT, y);
    }
    fprintf(out,
            "</g>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
            "stroke=\"#333333\"/>\n",
            AREA_LEFT, AREA_TOP, AREA_RIGHT - AREA_LEFT, AREA_BOTTOM - AREA_TOP);
    for (size_t i = 0; i < n + m; i++) {
        bool on_x = i < n;
        const mstar__plot_axis *a = on_x ? &p->x : &p->y;
        mstar__axis_label(a, ticks[i], label, sizeof(label));
        if (on_x)
            fprintf(out, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">",
                    mstar__axis_map(a, ticks[i], AREA_LEFT, AREA_RIGHT), AREA_BOTTOM + 18);
        else
            fprintf(out, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">", AREA_LEFT - 6,
                    mstar__axis_map(a, ticks[i], AREA_BOTTOM, AREA_TOP) + 4);
        put_text(out, label);
        fprintf(out, "</text>\n");
    }
    fprintf(out, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", (AREA_LEFT + AREA_RIGHT) / 2,
            AREA_BOTTOM + 42);
    put_text(out, p->x.label);
    fprintf(out,
            "</text>\n<text x=\"18\" y=\"%d\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 18 %d)\">",
            (AREA_TOP + AREA_BOTTOM) / 2, (AREA_TOP + AREA_BOTTOM) / 2);
    put_text(out, p->y.label);
    fprintf(out, "</text>\n");
}

/* One series: a polyline per run of drawable points, and a marker on each point. */
static void write_series(const mstar__plot *p, size_t s, FILE *out)
{
    const mstar__plot_series *ser = &p->series[s];
    const char *dash = ser->dashed ? " stroke-dasharray=\"7 4\"" : "";
    bool open = false;
    for (size_t i = 0; i <= ser->n; i++) {
        double x = i < ser->n ? mstar__axis_map(&p->x, ser->x[i], AREA_LEFT, AREA_RIGHT) : NAN;
        double y = i < ser->n ? mstar__axis_map(&p->y, ser->y[i], AREA_BOTTOM, AREA_TOP) : NAN;
        if (isnan(x) || isnan(y)) {
            if (open)
                fprintf(out, "\"/>\n");
            open = false;
            continue;
        }
        if (!open)
            fprintf(out, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"",
                    palette[s], dash);
        fprintf(out, "%s%.1f,%.1f", open ? " " : "", x, y);
        open = true;
    }
    for (size_t i = 0; !ser->dashed && i < ser->n; i++) {
        double x = mstar__axis_map(&p->x, ser->x[i], AREA_LEFT, AREA_RIGHT);
        double y = mstar__axis_map(&p->y, ser->y[i], AREA_BOTTOM, AREA_TOP);
        if (!isnan(x) && !isnan(y))
            fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", x, y,
                    palette[s]);
    }
}

static void write_legend(const mstar__plot *p, FILE *out)
{
    for (size_t s = 0; s < p->nseries; s++) {
        int x = AREA_RIGHT + 16, y = AREA_TOP + 12 + (int)s * 22;
        fprintf(out,
                "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
                "stroke-width=\"2\"%s/>\n",
                x, y, x + 26, y, palette[s],
                p->series[s].dashed ? " stroke-dasharray=\"7 4\"" : "");
        fprintf(out, "<text x=\"%d\" y=\"%d\">", x + 32, y + 4);
        put_text(out, p->series[s].name);
        fprintf(out, "</text>\n");
    }
}

mstar_status mstar__plot_write(const mstar__plot *p, FILE *out)
{
    fprintf(out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
            WIDTH, HEIGHT, WIDTH, HEIGHT);
    fprintf(out, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", WIDTH, HEIGHT);
    fprintf(out, "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">",
            (AREA_LEFT + AREA_RIGHT) / 2);
    put_text(out, p->title);
    fprintf(out,
            "</text>\n<defs><clipPath id=\"area\"><rect x=\"%d\" y=\"%d\" width=\"%d\" "
            "height=\"%d\"/></clipPath></defs>\n",
            AREA_LEFT - 4, AREA_TOP - 4, AREA_RIGHT - AREA_LEFT + 8, AREA_BOTTOM - AREA_TOP + 8);
    write_axes(p, out);
    fprintf(out, "<g clip-path=\"url(#area)\">\n");
    for (size_t s = 0; s < p->nseries; s++)
        write_series(p, s, out);
    fprintf(out, "</g>\n");
    write_legend(p, out);
    fprintf(out, "</svg>\n");
    if (ferror(out))
        return mstar_error_set(MSTAR_EIO, "plot '%s': write failed", p->title);
    return MSTAR_OK;
}

mstar_status mstar__plot_save(const mstar__plot *p, const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return mstar_error_set(MSTAR_EIO, "%s: %s", path, strerror(errno));
    mstar_status st = mstar__plot_write(p, f);
    if (fclose(f) != 0 && st == MSTAR_OK)
        st = mstar_error_set(MSTAR_EIO, "%s: %s", path, strerror(errno));
    return st;
}
