#include "adprof/timeline_render.h"

#include <algorithm>
#include <cstdio>

#include "adprof/report.h"
#include "adprof/role_style.h"

namespace adprof {

namespace {

// For each column the sample with the highest host bytes (peaks stay visible).
std::vector<const TimelineSample *> columns(const Timeline &t, int width) {
  std::vector<const TimelineSample *> col(width, nullptr);
  double span = std::max(t.end - t.start, 1e-9);
  for (const TimelineSample &s : t.samples) {
    int x = std::clamp(static_cast<int>((s.time - t.start) / span * (width - 1)), 0, width - 1);
    if (!col[x] || s.host > col[x]->host) col[x] = &s;
  }
  const TimelineSample *last = nullptr;
  for (auto &c : col) {  // carry the level across empty columns
    if (c)
      last = c;
    else
      c = last;
  }
  return col;
}

}  // namespace

std::string timeline_text_chart(const Timeline &t, int width, int height, bool colour) {
  std::string out;
  if (t.samples.empty() || t.peak == 0) return "no host allocations in this trace\n";
  auto col = columns(t, width);
  double span = std::max(t.end - t.start, 1e-9);
  int peak_x =
      std::clamp(static_cast<int>((t.peak_time - t.start) / span * (width - 1)), 0, width - 1);
  char head[256];
  snprintf(head, sizeof head, "live bytes of %s, stacked by role (peak %s at %.3f s)\n",
           t.memory.c_str(), format_bytes(t.peak).c_str(), t.peak_time);
  out += head;
  out += std::string(11, ' ') + std::string(peak_x, ' ') + "v peak\n";
  for (int row = height - 1; row >= 0; --row) {
    double lo = static_cast<double>(t.peak) * row / height;
    char label[16];
    if (row == height - 1 || row == 0 || row == height / 2)
      snprintf(label, sizeof label, "%9s |",
               format_bytes(static_cast<uint64_t>(lo + t.peak / height)).c_str());
    else
      snprintf(label, sizeof label, "%9s |", "");
    out += label;
    for (int x = 0; x < width; ++x) {
      const TimelineSample *s = col[x];
      if (!s || static_cast<double>(s->host) <= lo) {
        out += ' ';
        continue;
      }
      // Which role's band covers the middle of this cell (roles stacked in a fixed order).
      double mid = lo + static_cast<double>(t.peak) / height / 2, acc = 0;
      int role = -1;
      for (int r : role_stack_order()) {
        if (acc >= mid) break;
        if (s->by_role[r] == 0) continue;
        acc += static_cast<double>(s->by_role[r]);
        role = r;
      }
      if (role < 0) role = 0;
      if (colour)
        out += "\033[" + role_ansi(role) + "m" + role_glyph(role) + "\033[0m";
      else
        out += role_glyph(role);
    }
    out += '\n';
  }
  out += std::string(10, ' ') + "+" + std::string(width, '-') + "\n";
  std::string bands(width, ' ');
  for (const PhaseBand &b : t.phases) {
    int a = std::clamp(static_cast<int>((b.start - t.start) / span * (width - 1)), 0, width - 1);
    int z = std::clamp(static_cast<int>((b.end - t.start) / span * (width - 1)), 0, width - 1);
    char c = b.phase == ADPROF_PHASE_FORWARD ? 'f' : b.phase == ADPROF_PHASE_BACKWARD ? 'b' : 'o';
    for (int x = a; x <= z; ++x) bands[x] = c;
  }
  for (const StepMark &s : t.steps) {
    int x = std::clamp(static_cast<int>((s.time - t.start) / span * (width - 1)), 0, width - 1);
    bands[x] = '|';
  }
  out += "   phase   " + bands + "\n";
  snprintf(head, sizeof head, "%11s%-10.3f%*s%.3f s\n", "", t.start, width - 16, "", t.end);
  out += head;
  out += "roles: ";
  for (int r : role_stack_order())
    out += std::string(1, role_glyph(r)) + "=" + role_name(r) +
           (r != role_stack_order().back() ? " " : "");
  out += "\nphases: f=forward b=backward o=optimizer |=step\n";
  return out;
}

std::string timeline_svg(const Timeline &t, int width, int height) {
  const int left = 80, bottom = 40, top = 20;
  int w = width, h = height;
  double span = std::max(t.end - t.start, 1e-9);
  double peak = std::max<double>(t.peak, 1);
  auto X = [&](double time) { return left + (time - t.start) / span * (w - left - 10); };
  auto Y = [&](double bytes) { return top + (1.0 - bytes / peak) * (h - top - bottom); };
  std::string s;
  char buf[512];
  snprintf(buf, sizeof buf,
           "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
           "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" "
           "fill=\"white\"/>\n",
           w, h);
  s += buf;
  for (const PhaseBand &b : t.phases) {
    const char *fill = b.phase == ADPROF_PHASE_FORWARD    ? "#e8f1fb"
                       : b.phase == ADPROF_PHASE_BACKWARD ? "#fdf0e6"
                                                          : "#eef7ee";
    snprintf(buf, sizeof buf,
             "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n", X(b.start),
             top, std::max(0.5, X(b.end) - X(b.start)), h - top - bottom, fill);
    s += buf;
  }
  // Stacked areas: role r's band lies between cumulative sums up to r-1 and up to r.
  const auto &order = role_stack_order();
  for (size_t i = 0; i < order.size(); ++i) {
    const int r = order[i];
    std::string upper, lower;
    for (const TimelineSample &p : t.samples) {
      double below = 0;
      for (size_t k = 0; k < i; ++k) below += static_cast<double>(p.by_role[order[k]]);
      double above = below + static_cast<double>(p.by_role[r]);
      snprintf(buf, sizeof buf, "%.1f,%.1f ", X(p.time), Y(above));
      upper += buf;
      snprintf(buf, sizeof buf, "%.1f,%.1f ", X(p.time), Y(below));
      lower = buf + lower;
    }
    if (t.samples.empty()) continue;
    s += "<polygon fill=\"" + role_hex(r) + "\" stroke=\"none\" points=\"" + upper + lower +
         "\"><title>" + role_name(r) + "</title></polygon>\n";
  }
  snprintf(
      buf, sizeof buf,
      "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"red\" stroke-dasharray=\"4,3\"/>"
      "<text x=\"%.1f\" y=\"%d\" fill=\"red\">peak %s at %.3f s</text>\n",
      X(t.peak_time), top, X(t.peak_time), h - bottom, X(t.peak_time) + 4, top + 12,
      format_bytes(t.peak).c_str(), t.peak_time);
  s += buf;
  snprintf(buf, sizeof buf,
           "<text x=\"4\" y=\"%d\">%s</text><text x=\"4\" y=\"%d\">0</text>"
           "<text x=\"%d\" y=\"%d\">%.3f s</text><text x=\"%d\" y=\"%d\">%.3f s</text>\n",
           top + 4, format_bytes(t.peak).c_str(), h - bottom, left, h - bottom + 14, t.start,
           w - 70, h - bottom + 14, t.end);
  s += buf;
  int lx = left;
  for (int r : role_stack_order()) {
    snprintf(buf, sizeof buf,
             "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/>"
             "<text x=\"%d\" y=\"%d\">%s</text>\n",
             lx, h - 16, role_hex(r).c_str(), lx + 13, h - 7, role_name(r));
    s += buf;
    lx += 13 + 7 * static_cast<int>(std::string(role_name(r)).size()) + 10;
  }
  s += "</svg>\n";
  return s;
}

}  // namespace adprof
