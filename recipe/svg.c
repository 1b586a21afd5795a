// recipe/svg.c — inline SVG charts (recipe/svg.h).
#include "recipe/svg.h"
#include <math.h>
#include <string.h>

const char *bn_svg_color(int i) {
    static const char *pal[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                "#bcbd22", "#17becf"};
    return pal[(i % 10 + 10) % 10];
}

double bn_svg_px(const bn_svg *s, double x) {
    double span = s->x1 > s->x0 ? s->x1 - s->x0 : 1;
    return s->left + (x - s->x0) / span * (s->w - s->left - s->right);
}

double bn_svg_py(const bn_svg *s, double y) {
    double span = s->y1 > s->y0 ? s->y1 - s->y0 : 1;
    return s->h - s->bottom - (y - s->y0) / span * (s->h - s->top - s->bottom);
}

// escaped: text with &, < and > escaped, to f.
static void escaped(FILE *f, const char *t) {
    for (; t && *t; t++) {
        if (*t == '&') fputs("&amp;", f);
        else if (*t == '<') fputs("&lt;", f);
        else if (*t == '>') fputs("&gt;", f);
        else fputc(*t, f);
    }
}

// nice_step: a round tick step giving about n ticks over span.
static double nice_step(double span, int n) {
    double raw = span / n, p = pow(10, floor(log10(raw > 0 ? raw : 1))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

void bn_svg_begin(bn_svg *s, FILE *f, double w, double h, const char *title, double x0, double x1, double y0,
                  double y1, const char *xlabel, const char *ylabel) {
    *s = (bn_svg){.f = f, .w = w, .h = h, .x0 = x0, .x1 = x1, .y0 = y0, .y1 = y1, .left = 56, .right = 16, .top = 30,
                  .bottom = 42};
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n<text x=\"%.0f\" y=\"18\" text-anchor=\"middle\" font-size=\"13\" "
               "font-weight=\"bold\">",
            w, h, w / 2);
    escaped(f, title);
    fprintf(f, "</text>\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#999\"/>\n",
            s->left, s->top, w - s->left - s->right, h - s->top - s->bottom);
    double st = nice_step(y1 - y0, 5);
    for (double y = ceil(y0 / st) * st; y <= y1 + 1e-9 * st; y += st)
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/><text x=\"%.1f\" "
                   "y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                s->left, w - s->right, bn_svg_py(s, y), bn_svg_py(s, y), s->left - 4, bn_svg_py(s, y) + 4, y);
    st = nice_step(x1 - x0, 6);
    for (double x = ceil(x0 / st) * st; x <= x1 + 1e-9 * st; x += st)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", bn_svg_px(s, x),
                h - s->bottom + 14, x);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (s->left + w - s->right) / 2, h - 6);
    escaped(f, xlabel);
    fprintf(f, "</text>\n<text transform=\"translate(14 %.1f) rotate(-90)\" text-anchor=\"middle\">",
            (s->top + h - s->bottom) / 2);
    escaped(f, ylabel);
    fputs("</text>\n", f);
}

void bn_svg_end(bn_svg *s) { fputs("</svg>\n", s->f); }

void bn_svg_line(bn_svg *s, const double *x, const double *y, int n, const char *color, int dash) {
    if (n <= 0) return;
    fprintf(s->f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"", color,
            dash ? " stroke-dasharray=\"5 4\"" : "");
    for (int i = 0; i < n; i++) fprintf(s->f, "%.1f,%.1f ", bn_svg_px(s, x[i]), bn_svg_py(s, y[i]));
    fputs("\"/>\n", s->f);
    if (n == 1)
        fprintf(s->f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", bn_svg_px(s, x[0]),
                bn_svg_py(s, y[0]), color);
}

void bn_svg_bar(bn_svg *s, double x, double w, double y, const char *color, const char *tooltip) {
    double a = bn_svg_px(s, x - w / 2), b = bn_svg_px(s, x + w / 2), top = bn_svg_py(s, y), base = bn_svg_py(s, 0);
    fprintf(s->f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">", a, top < base ? top : base,
            b - a, fabs(base - top), color);
    if (tooltip) {
        fputs("<title>", s->f);
        escaped(s->f, tooltip);
        fputs("</title>", s->f);
    }
    fputs("</rect>\n", s->f);
}

void bn_svg_text(bn_svg *s, double x, double y, const char *anchor, const char *text) {
    fprintf(s->f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">", bn_svg_px(s, x), bn_svg_py(s, y), anchor);
    escaped(s->f, text);
    fputs("</text>\n", s->f);
}

void bn_svg_legend(bn_svg *s, int i, const char *color, const char *text) {
    double x = s->w - s->right - 150, y = s->top + 12 + 14 * i;
    fprintf(s->f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">",
            x, y - 9, color, x + 14, y);
    escaped(s->f, text);
    fputs("</text>\n", s->f);
}
