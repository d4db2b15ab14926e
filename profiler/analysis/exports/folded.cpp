#include "folded.h"

#include <algorithm>
#include <map>

namespace adprof {

std::string folded_stacks(const Report &r) {
  std::string text;
  if (r.stacks) {  // recorded with call stacks: the real frames, outermost first
    for (const auto &[frames, bytes] : r.peak_stacks)
      text += frames + ' ' + std::to_string(bytes) + '\n';
    return text;
  }
  std::map<std::string, uint64_t> stacks;
  for (const LiveBuffer &b : r.live_at_peak) {
    std::string op = b.op;
    if (auto hash = op.find('#'); hash != std::string::npos) op.resize(hash);
    std::string frame = b.phase + ";" + op + ";" + b.role;
    if (!b.label.empty()) frame += ";" + b.label;
    std::replace(frame.begin(), frame.end(), ' ', '_');
    stacks[frame] += b.size;
  }
  for (const auto &[frame, bytes] : stacks) text += frame + ' ' + std::to_string(bytes) + '\n';
  return text;
}

}  // namespace adprof
