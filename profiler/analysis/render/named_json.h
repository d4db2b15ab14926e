// Counts indexed by a vocabulary (roles, phases: context.h) as a JSON object keyed by their
// names, and back: the one form report_json.cpp and sites_render.cpp write (docs/REPORT_SCHEMA.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace adprof {

// {"name": value, ...} in index order; `skip_zeros`: only the nonzero values (a missing key
// reads back as 0).
template <size_t N>
nlohmann::json named_array(const std::array<uint64_t, N> &values, const char *(*name)(int),
                           bool skip_zeros = false) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < N; ++i)
    if (!skip_zeros || values[i]) j[name(static_cast<int>(i))] = values[i];
  return j;
}

// The reverse: every value by its name, 0 for a missing key; nothing when `j` is no object.
template <size_t N>
void read_named_array(const nlohmann::json &j, std::array<uint64_t, N> &values,
                      const char *(*name)(int)) {
  if (!j.is_object()) return;
  for (size_t i = 0; i < N; ++i) values[i] = j.value(name(static_cast<int>(i)), uint64_t{0});
}

}  // namespace adprof
