// A string as the inside of a JSON string literal, for the exports that write their JSON as text
// (perfetto.cpp: millions of events, streamed, no document in memory). The report's JSON goes
// through nlohmann::json instead (the CLI's json_text, with the same replacement below).
#pragma once

#include <string>

namespace adprof {

// '"' and '\\' get a backslash; bytes below 0x20 become \u00XX (lowercase hex). A byte that does
// not begin a well-formed UTF-8 sequence (a thread name the kernel cut to 15 bytes inside a
// character, a path in another encoding) becomes U+FFFD, so the JSON stays readable: the text is
// UTF-8 whatever the names were.
std::string json_escape(const std::string &s);

}  // namespace adprof
