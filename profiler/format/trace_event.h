// An event as the reader yields it (chunk_decoder.h decodes it from a chunk; trace_reader.h
// merges the threads' events by time): a trace's every kind of record in one 56-byte value,
// what the replay, the analyses and `adprof dump` read.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "trace_format.h"

namespace adprof {

// Sizes the reader yields are bounded, so that no total built from them overflows: an
// allocation's size or slack, or an unmapped length, above kMaxEventBytes (no address space
// is that large) is damage, and so is an allocation that takes the sum of every allocation's
// bytes so far (size plus slack) above kMaxTotalBytes. Every live, by-role, by-op or allocated
// total downstream is a sum of some of those allocations, so it fits a uint64_t with room to
// spare, without checks of its own. An event that fails these checks ends its chunk's
// readable part (counted in ReadStats::corrupt_chunks), as malformed bytes do.
inline constexpr uint64_t kMaxEventBytes = uint64_t{1} << 56;
inline constexpr uint64_t kMaxTotalBytes = uint64_t{1} << 62;

class Event {
  // The payload's kind sits in the top bits of its 16-bit size: every payload is short (texts
  // up to kMaxNameBytes plus a build-id, at most kMaxStackFrames values), and the event stays
  // 56 bytes with a stack id in it.
  enum : uint16_t { kNone = 0, kText = 1u << 14, kValues = 2u << 14, kKindMask = 3u << 14 };

 public:
  format::EventType type{};
  uint8_t operand = 0;  // space, phase, role or counter kind (see trace_format.h)

 private:
  uint16_t payload_size_ = 0;  // size | kind, here, where it fills a hole

 public:
  static constexpr size_t kMaxPayload = (1u << 14) - 1;
  uint32_t thread = 0;
  uint64_t ticks = 0;  // absolute timestamp
  uint64_t addr = 0;   // alloc, free, retag, label, describe, content hash; mapping: bias
  uint64_t a = 0;      // alloc: size; free: mmap length; op_begin: name id; step; counter value;
                       // name: id; label: name id; describe: dtype; hash; annotate: kind id;
                       // stack: id; mapping and unmapping: start
  uint64_t b = 0;      // alloc: slack (usable - size); op_begin: instance; retag: source;
                       // mapping: end; stack: how many of its outer frames are those of the
                       // thread's previous stack, as the writer said (0: not said)
  uint32_t device = 0;
  uint32_t stack = 0;  // alloc in a trace with stacks: the stack's id (0: none)

  // Name, thread name and mapping: the text. Annotate: the values; describe: the dimensions;
  // stack: the frames. Both are valid until the reader's next call. (One pointer serves both:
  // events are read by the million, and 56 bytes cross between the reader's threads where 80
  // did.)
  std::string_view text() const {
    return (payload_size_ & kKindMask) == kText
               ? std::string_view(static_cast<const char *>(payload_), payload_size_ & ~kKindMask)
               : std::string_view();
  }
  std::span<const uint64_t> values() const {
    return (payload_size_ & kKindMask) == kValues
               ? std::span<const uint64_t>(static_cast<const uint64_t *>(payload_),
                                           payload_size_ & ~kKindMask)
               : std::span<const uint64_t>();
  }
  bool has_payload() const { return (payload_size_ & ~kKindMask) != 0; }
  // Longer payloads are cut to kMaxPayload (the reader never makes one).
  void set_text(std::string_view text) {
    payload_ = text.data();
    payload_size_ = static_cast<uint16_t>(kText | std::min(text.size(), kMaxPayload));
  }
  void set_values(std::span<const uint64_t> values) {
    payload_ = values.data();
    payload_size_ = static_cast<uint16_t>(kValues | std::min(values.size(), kMaxPayload));
  }
  void clear_payload() {
    payload_size_ = kNone;
    payload_ = nullptr;
  }

 private:
  const void *payload_ = nullptr;
};
static_assert(sizeof(Event) == 56);

}  // namespace adprof
