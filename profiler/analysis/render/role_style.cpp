#include "adprof/role_style.h"

#include <cstdio>

namespace adprof {

namespace {

struct RoleStyle {
  uint32_t rgb;
  char glyph;
};

// Indexed by role (context.h). The colours are the GUI's since it was written (gui/src/palette).
constexpr std::array<RoleStyle, kRoleCount> kStyles = {{
    {0xDDDDDD, '.'},  // foreign
    {0x332288, 'P'},  // parameter
    {0x88CCEE, 'I'},  // input
    {0x44AA99, 'a'},  // activation
    {0x117733, 'F'},  // forward_cache
    {0xDDCC77, 'A'},  // adjoint
    {0xCC6677, 'S'},  // accumulation (pending gradient sums)
    {0xAA4499, 'D'},  // duplicate
    {0x882255, 'O'},  // optimizer_state
    {0x999933, 'w'},  // workspace
}};

constexpr std::array<int, kRoleCount> kStackOrder = {
    ADPROF_ROLE_PARAMETER,    ADPROF_ROLE_INPUT,         ADPROF_ROLE_OPTIMIZER_STATE,
    ADPROF_ROLE_ACTIVATION,   ADPROF_ROLE_FORWARD_CACHE, ADPROF_ROLE_ADJOINT,
    ADPROF_ROLE_ACCUMULATION, ADPROF_ROLE_DUPLICATE,     ADPROF_ROLE_WORKSPACE,
    ADPROF_ROLE_FOREIGN};

const RoleStyle &style(int role) {
  return kStyles[role >= 0 && role < kRoleCount ? role : ADPROF_ROLE_FOREIGN];
}

}  // namespace

const std::array<int, kRoleCount> &role_stack_order() { return kStackOrder; }

uint32_t role_rgb(int role) { return style(role).rgb; }

std::string role_hex(int role) {
  char text[8];
  snprintf(text, sizeof text, "#%06x", role_rgb(role));
  return text;
}

std::string role_ansi(int role) {
  const uint32_t c = role_rgb(role);
  char text[24];
  snprintf(text, sizeof text, "38;2;%u;%u;%u", (c >> 16) & 0xFF, (c >> 8) & 0xFF, c & 0xFF);
  return text;
}

char role_glyph(int role) { return style(role).glyph; }

}  // namespace adprof
