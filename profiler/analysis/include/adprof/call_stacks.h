// Call stacks as read (trace_format.h, "Call stacks"): the objects the process had mapped, the
// stacks it defined, and their symbols. Symbolised here, when the trace is read, never while
// recording: elfutils' libdw on the recorded objects' files (function, file:line, inlined
// frames), C++ and Rust names demangled. Each object is opened once, each address looked up once;
// an object whose file is gone or changed (another build-id), or has no symbols, degrades to
// "module+0xoffset", never to an error.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "adprof/trace_reader.h"

namespace adprof {

// A symbol's name as its language writes it: C++ (the Itanium ABI's `_Z...`, by the C++
// runtime's demangler) and Rust (`_R...`, and the legacy `_ZN...17h<hash>E` whose hash is left
// out; libiberty's demangler). A name that is neither comes back as it is.
std::string demangle_symbol(const char *name);

struct SourceFrame {
  std::string function;  // demangled; empty: unknown
  std::string file;      // source file; empty: no line information
  uint32_t line = 0;
  std::string module;    // the object's path; empty: no recorded object holds the address
  uint64_t offset = 0;   // the address relative to the object's load bias (or absolute)
  bool inlined = false;  // inlined into the next frame (the caller)

  // "function (file:line)", "function (module)", or "module+0x1a2b" when nothing better is
  // known.
  std::string text() const;
  // A frame's name for folded stacks: the function, else module+0x...
  std::string name() const;
};

class CallStacks {
 public:
  CallStacks();
  ~CallStacks();
  CallStacks(const CallStacks &) = delete;
  CallStacks &operator=(const CallStacks &) = delete;

  // Takes a kStack, kMapping or kUnmapping event (false for any other): an observer's on_event
  // hands it every non-heap event.
  bool on_event(const Event &e);
  bool empty() const;  // no stack defined (a trace without stacks)

  // Stack `id`'s frames, innermost first, inlined frames expanded (an inlined function first,
  // then the function it was inlined into); empty for an id the trace never defined. Valid
  // until the next call.
  const std::vector<SourceFrame> &frames(uint32_t id);
  // The same frames as indices for frame(), without copying them: each distinct frame is
  // symbolised and stored once. Valid until the trace defines `id` again; frame()'s references
  // as long as this object.
  std::span<const uint32_t> frame_indices(uint32_t id);
  const SourceFrame &frame(uint32_t index) const;
  // The allocation site: the innermost frame's text ("(unknown stack)" for id 0 or undefined).
  // Only that frame is symbolised (a site needs no more).
  std::string site(uint32_t id);
  // The innermost frame's index for frame(), or kNoFrame (id 0 or undefined).
  static constexpr uint32_t kNoFrame = UINT32_MAX;
  uint32_t site_frame(uint32_t id);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The path and build-id (raw bytes) of a kMapping event's text (trace_format.h).
std::string mapping_path(const Event &e);
std::string mapping_build_id(const Event &e);

}  // namespace adprof
