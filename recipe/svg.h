// recipe/svg.h — small inline SVG charts for bonsai-antidoom's HTML report (no script): a frame with a title, linear
// axes with ticks, lines, bars, dots and labels, written as text to a FILE.
#ifndef BONSAI_RECIPE_SVG_H
#define BONSAI_RECIPE_SVG_H
#include <stdio.h>

typedef struct {
    FILE *f;
    double w, h;               // pixels
    double x0, x1, y0, y1;     // data range of the plot area
    double left, right, top, bottom; // margins, pixels
} bn_svg;

// bn_svg_begin: opens an SVG of w x h pixels with a title and axes over [x0, x1] x [y0, y1] labelled xlabel / ylabel.
void bn_svg_begin(bn_svg *s, FILE *f, double w, double h, const char *title, double x0, double x1, double y0,
                  double y1, const char *xlabel, const char *ylabel);
// bn_svg_end: closes the SVG.
void bn_svg_end(bn_svg *s);
// bn_svg_px / bn_svg_py: data coordinates to pixels.
double bn_svg_px(const bn_svg *s, double x);
double bn_svg_py(const bn_svg *s, double y);
// bn_svg_line: a polyline through n points in color (dashed when dash).
void bn_svg_line(bn_svg *s, const double *x, const double *y, int n, const char *color, int dash);
// bn_svg_bar: a bar from y = 0 to y of width w (data units) centred at x.
void bn_svg_bar(bn_svg *s, double x, double w, double y, const char *color, const char *tooltip);
// bn_svg_text: text at data coordinates (anchor "start" | "middle" | "end").
void bn_svg_text(bn_svg *s, double x, double y, const char *anchor, const char *text);
// bn_svg_legend: a colour key entry i (0-based) at the top right.
void bn_svg_legend(bn_svg *s, int i, const char *color, const char *text);
// bn_svg_color: the i-th colour of a fixed palette.
const char *bn_svg_color(int i);
#endif
