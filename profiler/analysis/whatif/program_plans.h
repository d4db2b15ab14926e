// What-ifs that an engine of compiled programs predicts for itself (ad_protocol.h version 6),
// collected in pass 1 and applied to a scenario's plan (docs/WHATIF.md, "Compiled programs"):
//   ad.arena.whatif       with the policy on, every arena of a layout would be some other size:
//                         the blocks the arena was cut into (arena_slicer.h) are never
//                         allocated, one block of the predicted size lives as long as the arena
//   ad.result_in_argument with the policy on, a result would be written into an argument's
//                         buffer: the result is never allocated, the argument's buffer lives on
//                         until the result dies (a chain of them, step after step, is one buffer)
// An arena's blocks are known by their labels: the layout's ad.arena.slice events name them,
// and the slicer labels each block it makes with its slice's label (or the layout's label of the
// free bytes), during the call that announced the arena.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "plan.h"

namespace adprof::whatif {

class ProgramPlans {
 public:
  // The protocol's annotations, values in its layout (ad_protocol.h, "Arenas").
  void on_layout(std::span<const uint64_t> v);
  void on_slice(std::span<const uint64_t> v);
  void on_whatif(std::span<const uint64_t> v);
  void on_call(std::span<const uint64_t> v);
  void on_call_end(std::span<const uint64_t> v);
  // A label event on a live storage (`index`: the event's number).
  void on_label(uint64_t storage, uint64_t label);
  // ad.result_in_argument, its addresses resolved to live storages (0: none) and their sizes.
  void on_result_in_argument(uint64_t policy, uint64_t result, uint64_t result_bytes,
                             uint64_t argument);

  // Whether the engine predicted anything for `policy` that the recording can be changed by.
  bool predicts(int policy) const;
  bool any() const;

  // What the what-if of `policy` changes, added to `plan`.
  struct Applied {
    uint64_t arenas = 0, recorded_bytes = 0, predicted_bytes = 0;  // arenas, their bytes in all
    uint64_t results = 0, result_bytes = 0;                        // results in arguments
  };
  Applied apply(int policy, Plan &plan, VirtualIds &ids) const;

 private:
  struct Layout {
    uint64_t bytes = 0;
    std::unordered_map<uint64_t, uint64_t> whatif;  // policy -> bytes with it
    std::vector<size_t> open;                       // arenas_ indices of calls not ended
  };
  struct Arena {
    uint64_t layout = 0;
    std::vector<uint64_t> parts;  // the storages it was cut into
  };
  struct Alias {
    uint64_t policy = 0, result = 0, bytes = 0, buffer = 0;  // buffer: the first argument's
  };
  std::unordered_map<uint64_t, Layout> layouts_;
  std::unordered_map<uint64_t, uint64_t> label_layout_;  // a slice's label -> its layout
  std::vector<Arena> arenas_;
  std::vector<Alias> aliases_;
  std::unordered_map<uint64_t, uint64_t> buffer_of_;  // a result -> the buffer it would be in
  uint64_t parts_ = 0;                                // blocks remembered in arenas_
  static constexpr uint64_t kMaxParts = uint64_t{1} << 22;
};

}  // namespace adprof::whatif
