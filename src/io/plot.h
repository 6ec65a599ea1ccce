/* plot.h - drawing primitives for charts: filled rectangles, anti-aliased
 * thick line segments and text in a built-in 5x7 bitmap font, painted into a
 * uint8 image tensor (C, H, W) with C = 1 or 3 (what dl.image.save writes).
 *
 * Invariants:
 *  - The image must be a contiguous uint8 tensor of 3 dims; anything else is
 *    an error naming the op (the tensor is never touched then).
 *  - Coordinates are 0-based pixels, x to the right, y down; everything is
 *    clipped to the image, so any coordinates (even huge or negative) are
 *    safe.  Non-finite coordinates draw nothing.
 *  - Colours are RGB bytes; a 1-channel image gets their average.
 *  - Text: characters 32..126 have glyphs; anything else draws as '?'.  A
 *    glyph cell is 6x9 font pixels (5x7 glyph, a descender row, 1-pixel gaps), scaled by
 *    `scale` (1..16).  dl_plot_text_width gives the advance of n characters. */
#ifndef DL_IO_PLOT_H
#define DL_IO_PLOT_H

#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"

#define DL_PLOT_CELL_W 6
#define DL_PLOT_CELL_H 9

/* Fills the rectangle [x, x+w) x [y, y+h) with rgb (blended with alpha 0..1). */
int dl_plot_fill_rect(dl_tensor *img, double x, double y, double w, double h, const uint8_t rgb[3],
                      double alpha);
/* A segment from (x0, y0) to (x1, y1), `width` pixels wide, anti-aliased. */
int dl_plot_line(dl_tensor *img, double x0, double y0, double x1, double y1, const uint8_t rgb[3],
                 double width);
/* Text with its top-left corner at (x, y); vertical != 0 turns it 90 degrees
 * counter-clockwise (reading bottom to top, the top-left corner of the
 * rotated box at (x, y)). */
int dl_plot_text(dl_tensor *img, int64_t x, int64_t y, const char *s, size_t n,
                 const uint8_t rgb[3], int scale, int vertical);
int64_t dl_plot_text_width(size_t n, int scale);

#endif
