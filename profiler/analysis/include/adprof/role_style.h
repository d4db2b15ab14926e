// One colour, one glyph and one stacking order per role for every view of a trace: the text
// timeline, the SVG, the GUI and the Perfetto export (the SVG coloured forward caches orange
// where the GUI coloured them green, and stacked the roles in the opposite order).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "adprof/context.h"
#include "adprof/report.h"

namespace adprof {

// Bottom to top: what lives longest first (parameters, inputs, optimizer state), then the
// forward pass's, the backward pass's, scratch, and the memory nobody described.
const std::array<int, kRoleCount> &role_stack_order();

// Paul Tol's "muted" scheme (distinct for the common forms of colour blindness), 0xRRGGBB.
uint32_t role_rgb(int role);
std::string role_hex(int role);   // "#117733"
std::string role_ansi(int role);  // a terminal's 24-bit colour: "38;2;17;119;51"
char role_glyph(int role);        // the text timeline's letter: 'F' for forward_cache

}  // namespace adprof
