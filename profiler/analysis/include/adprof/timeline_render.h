// The timeline drawn for a reader: an SVG image and a chart of characters for a terminal (the
// exports of `adprof timeline` and of the GUI's File > Export; exports/timeline_render.cpp).
// Glyphs, colours and the stacking order of the roles are role_style.h's, as in the GUI.
#pragma once

#include <string>

#include "adprof/timeline.h"

namespace adprof {

// Samples of the timeline that `adprof timeline` draws and the exports' CSV and SVG hold.
inline constexpr size_t kTimelineExportSamples = 8192;
// The SVG's size in pixels.
inline constexpr int kTimelineSvgWidth = 1000;
inline constexpr int kTimelineSvgHeight = 420;

// Live host bytes stacked by role over the phase bands, the peak marked, a legend.
std::string timeline_svg(const Timeline &t, int width = kTimelineSvgWidth,
                         int height = kTimelineSvgHeight);

// The same as `width` x `height` characters (one glyph per role), the phase bands and step marks
// under it, a legend; `colour`: ANSI 24-bit colours around the glyphs.
std::string timeline_text_chart(const Timeline &t, int width, int height, bool colour);

}  // namespace adprof
