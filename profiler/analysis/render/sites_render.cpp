// The report's allocation sites (traces with call stacks) in the terminal and in JSON: the
// report's renderers call these (report_text.cpp, report_json.cpp).
#include "sites_render.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "adprof/report.h"
#include "named_json.h"

namespace adprof {

namespace {

void add(std::string &out, const char *format, ...) __attribute__((format(printf, 2, 3)));
void add(std::string &out, const char *format, ...) {
  char line[4096];
  va_list ap;
  va_start(ap, format);
  vsnprintf(line, sizeof line, format, ap);
  va_end(ap);
  out += line;
}

// The top `top` sites by `key` (descending, then by name), those with a nonzero key only.
template <class Key>
std::vector<const SiteSummary *> top_sites(const std::vector<SiteSummary> &sites, size_t top,
                                           Key key) {
  std::vector<const SiteSummary *> out;
  for (const SiteSummary &s : sites)
    if (key(s)) out.push_back(&s);
  std::sort(out.begin(), out.end(), [&](const SiteSummary *a, const SiteSummary *b) {
    return key(*a) != key(*b) ? key(*a) > key(*b) : a->site < b->site;
  });
  if (out.size() > top) out.resize(top);
  return out;
}

}  // namespace

void render_sites_text(std::string &o, const Report &r, size_t top) {
  if (!r.stacks) return;
  // What is live at the peak, by role, foreign first: where memory nobody described came from.
  std::vector<int> roles;
  for (int role = 0; role < kRoleCount; ++role)
    if (r.peak_by_role[role]) roles.push_back(role);
  add(o, "\nAllocation sites live at the peak, by role (call stacks):%s\n",
      roles.empty() ? " none" : "");
  std::sort(roles.begin(), roles.end(), [&](int a, int b) {
    if ((a == ADPROF_ROLE_FOREIGN) != (b == ADPROF_ROLE_FOREIGN)) return a == ADPROF_ROLE_FOREIGN;
    return r.peak_by_role[a] > r.peak_by_role[b];
  });
  for (int role : roles) {
    add(o, "  %s %s\n", role_name(role), format_bytes(r.peak_by_role[role]).c_str());
    for (const SiteSummary *s :
         top_sites(r.sites, top, [role](const SiteSummary &x) { return x.peak_by_role[role]; }))
      add(o, "    %12s  %s\n", format_bytes(s->peak_by_role[role]).c_str(), s->site.c_str());
  }
  const auto by_bytes = top_sites(r.sites, top, [](const SiteSummary &x) { return x.bytes; });
  if (by_bytes.empty()) {
    add(o, "Allocation sites by bytes allocated: none\n");
  } else {
    add(o, "Allocation sites by bytes allocated (top %zu):\n", top);
    add(o, "    %12s %12s  %s\n", "bytes", "allocations", "site");
  }
  for (const SiteSummary *s : by_bytes)
    add(o, "    %12s %12llu  %s\n", format_bytes(s->bytes).c_str(),
        static_cast<unsigned long long>(s->allocations), s->site.c_str());
  const auto by_count = top_sites(r.sites, top, [](const SiteSummary &x) { return x.allocations; });
  if (by_count.empty()) {
    add(o, "Allocation sites by allocations: none\n");
  } else {
    add(o, "Allocation sites by allocations (top %zu):\n", top);
    add(o, "    %12s %12s  %s\n", "allocations", "bytes", "site");
  }
  for (const SiteSummary *s : by_count)
    add(o, "    %12llu %12s  %s\n", static_cast<unsigned long long>(s->allocations),
        format_bytes(s->bytes).c_str(), s->site.c_str());
  const auto temporaries =
      top_sites(r.sites, top, [](const SiteSummary &x) { return x.temporaries; });
  if (!temporaries.empty()) {
    add(o, "Allocation sites making the most temporaries (top %zu):\n", top);
    for (const SiteSummary *s : temporaries)
      add(o, "    %12llu %12s  %s\n", static_cast<unsigned long long>(s->temporaries),
          format_bytes(s->temporary_bytes).c_str(), s->site.c_str());
  }
  const auto at_exit = top_sites(r.sites, top, [](const SiteSummary &x) { return x.exit_bytes; });
  if (at_exit.empty())
    add(o, "Live at exit by allocation site: none\n");
  else
    add(o, "Live at exit by allocation site (top %zu):\n", top);
  for (const SiteSummary *s : at_exit)
    add(o, "    %12s %8llu blocks  %s\n", format_bytes(s->exit_bytes).c_str(),
        static_cast<unsigned long long>(s->exit_blocks), s->site.c_str());
}

nlohmann::json sites_to_json(const Report &r) {
  nlohmann::json sites = nlohmann::json::array();
  for (const SiteSummary &s : r.sites) {
    sites.push_back({{"site", s.site},
                     {"stack", s.stack},
                     {"allocations", s.allocations},
                     {"bytes", s.bytes},
                     {"temporaries", s.temporaries},
                     {"temporary_bytes", s.temporary_bytes},
                     {"peak_bytes", s.peak_bytes},
                     {"peak_blocks", s.peak_blocks},
                     {"peak_by_role", named_array(s.peak_by_role, role_name, /*skip_zeros=*/true)},
                     {"exit_bytes", s.exit_bytes},
                     {"exit_blocks", s.exit_blocks}});
  }
  return sites;
}

void sites_from_json(const nlohmann::json &j, Report &r) {
  if (!j.contains("sites") || !j["sites"].is_array()) return;
  r.stacks = true;
  for (const auto &x : j["sites"]) {
    SiteSummary s;
    s.site = x.value("site", std::string());
    s.stack = x.value("stack", std::vector<std::string>{});
    s.allocations = x.value("allocations", uint64_t{0});
    s.bytes = x.value("bytes", uint64_t{0});
    s.temporaries = x.value("temporaries", uint64_t{0});
    s.temporary_bytes = x.value("temporary_bytes", uint64_t{0});
    s.peak_bytes = x.value("peak_bytes", uint64_t{0});
    s.peak_blocks = x.value("peak_blocks", uint64_t{0});
    s.exit_bytes = x.value("exit_bytes", uint64_t{0});
    s.exit_blocks = x.value("exit_blocks", uint64_t{0});
    if (x.contains("peak_by_role")) read_named_array(x["peak_by_role"], s.peak_by_role, role_name);
    r.sites.push_back(std::move(s));
  }
}

}  // namespace adprof
