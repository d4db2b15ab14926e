// The report's allocation sites rendered (sites_render.cpp), for report_text.cpp and
// report_json.cpp.
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace adprof {

struct Report;

// Appends the sites' sections to the text report (nothing for a trace without stacks).
void render_sites_text(std::string &out, const Report &r, size_t top);
// The report's "sites" array (written only for a trace with stacks), and its reading back.
nlohmann::json sites_to_json(const Report &r);
void sites_from_json(const nlohmann::json &j, Report &r);

}  // namespace adprof
