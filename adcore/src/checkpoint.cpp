// Checkpointing: a marked segment keeps only its inputs; backward recomputes it on a nested
// tape and differentiates that.
#include <cmath>

#include "internal.h"

namespace adcore {

namespace detail {
void b_checkpoint(BackwardCtx &) {
  throw std::logic_error("checkpoint nodes are differentiated by the tape (recompute)");
}
}  // namespace detail

Tensor checkpoint(const SegmentFn &fn, std::span<const Tensor> inputs) {
  Tape &tape = Tape::current();
  bool any = false;
  for (const Tensor &t : inputs) any = any || tape.active(t);
  if (!tape.options().checkpointing || !grad_enabled() || !any) return fn(inputs);
  Tensor out;
  {
    NoGrad ng;  // the segment's intermediates are not kept
    out = fn(inputs);
  }
  // The output gets its own tensor object (fn may have returned one of its inputs).
  out = make_view(out, out.shape(), out.strides(), out.impl()->offset);
  tape.record_checkpoint(fn, inputs, out);
  return out;
}

std::vector<size_t> sqrt_schedule(size_t n, int segments) {
  std::vector<size_t> starts;
  if (n == 0) return starts;
  size_t s = segments > 0 ? static_cast<size_t>(segments)
                          : static_cast<size_t>(std::lround(std::sqrt(static_cast<double>(n))));
  s = std::max<size_t>(1, std::min(s, n));
  for (size_t k = 0; k < s; ++k) starts.push_back(k * n / s);
  return starts;
}

Tensor checkpoint_sequential(std::span<const std::function<Tensor(const Tensor &)>> layers,
                             const Tensor &x, int segments) {
  const std::vector<size_t> starts = sqrt_schedule(layers.size(), segments);
  Tensor h = x;
  for (size_t k = 0; k < starts.size(); ++k) {
    const size_t b = starts[k], e = k + 1 < starts.size() ? starts[k + 1] : layers.size();
    std::vector<std::function<Tensor(const Tensor &)>> part(
        layers.begin() + static_cast<std::ptrdiff_t>(b),
        layers.begin() + static_cast<std::ptrdiff_t>(e));
    SegmentFn seg = [part = std::move(part)](std::span<const Tensor> in) {
      Tensor t = in[0];
      for (const auto &f : part) t = f(t);
      return t;
    };
    const Tensor in[1] = {h};
    h = checkpoint(seg, in);
  }
  return h;
}

}  // namespace adcore
