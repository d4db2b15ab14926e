// A string as the inside of a JSON string literal, for the exports that write their JSON as text
// (perfetto.cpp: millions of events, streamed, no document in memory). The report's JSON goes
// through nlohmann::json instead, which escapes otherwise (\n, not \u000a) and refuses bytes
// that are not UTF-8; this one passes every byte but '"', '\\' and the control characters.
#pragma once

#include <string>

namespace adprof {

// '"' and '\\' get a backslash; bytes below 0x20 become \u00XX (lowercase hex).
std::string json_escape(const std::string &s);

}  // namespace adprof
