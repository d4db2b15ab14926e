// modules: a training step of a two-layer model written by hand through the context API, each
// buffer labelled with the path of the module that made it, as an engine with named modules
// labels them ("model.fc1"; a parameter and its gradient with the parameter's path,
// "model.fc1.weight"). The peak is reached in the backward phase with every buffer below live,
// so a test knows the bytes of each (label, role) pair at the peak exactly:
//   parameter      model.fc1.weight 64 KiB, model.fc1.bias 1 KiB, model.fc2.weight 32 KiB
//   input          (unlabelled) 128 KiB
//   forward_cache  model.fc1 256 KiB (linear), model.act 256 KiB (relu), model.fc2 2 x 16 KiB,
//                  (unlabelled) 4 KiB (relu)
//   activation     model.fc2 128 KiB (linear)
//   duplicate      model.embed 8 KiB (cast of the input; source: the input)
//   adjoint        model.fc2 128 KiB, model.act 256 KiB, model.fc1.weight 64 KiB,
//                  model.fc1.bias 1 KiB, model.fc2.weight 32 KiB
//   workspace      (unlabelled) 48 KiB (linear, backward)
#include <adprof/context.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr size_t KiB = 1024;

void *buffer(size_t bytes, adprof_role role, const char *label) {
  adprof::RoleScope r(role);
  void *p = std::malloc(bytes);
  std::memset(p, 1, bytes);
  if (label) adprof_label(p, adprof_name(label));
  return p;
}

struct Op {
  explicit Op(const char *name) { adprof_op_begin(adprof_name(name), ++instance); }
  ~Op() { adprof_op_end(); }
  static inline uint64_t instance = 0;
};

}  // namespace

int main() {
  std::vector<void *> live;
  live.reserve(64);  // no growth inside the ops below
  auto keep = [&](void *p) {
    live.push_back(p);
    return p;
  };
  keep(buffer(64 * KiB, ADPROF_ROLE_PARAMETER, "model.fc1.weight"));
  keep(buffer(1 * KiB, ADPROF_ROLE_PARAMETER, "model.fc1.bias"));
  keep(buffer(32 * KiB, ADPROF_ROLE_PARAMETER, "model.fc2.weight"));
  void *input = keep(buffer(128 * KiB, ADPROF_ROLE_INPUT, nullptr));
  adprof_step(1);
  {
    adprof::PhaseScope forward(ADPROF_PHASE_FORWARD);
    {
      Op op("cast");
      void *dup = keep(buffer(8 * KiB, ADPROF_ROLE_ACTIVATION, "model.embed"));
      adprof_retag(dup, ADPROF_ROLE_DUPLICATE, input);
    }
    {
      Op op("linear");
      void *h = keep(buffer(256 * KiB, ADPROF_ROLE_ACTIVATION, "model.fc1"));
      adprof_retag(h, ADPROF_ROLE_FORWARD_CACHE, nullptr);  // saved for backward
    }
    {
      Op op("relu");
      keep(buffer(256 * KiB, ADPROF_ROLE_FORWARD_CACHE, "model.act"));
      keep(buffer(4 * KiB, ADPROF_ROLE_FORWARD_CACHE, nullptr));  // a cache nobody labelled
    }
    {
      Op op("linear");
      keep(buffer(128 * KiB, ADPROF_ROLE_ACTIVATION, "model.fc2"));
      keep(buffer(16 * KiB, ADPROF_ROLE_FORWARD_CACHE, "model.fc2"));
      keep(buffer(16 * KiB, ADPROF_ROLE_FORWARD_CACHE, "model.fc2"));
    }
  }
  {
    adprof::PhaseScope backward(ADPROF_PHASE_BACKWARD);
    {
      Op op("linear_backward");
      keep(buffer(128 * KiB, ADPROF_ROLE_ADJOINT, "model.fc2"));
      keep(buffer(32 * KiB, ADPROF_ROLE_ADJOINT, "model.fc2.weight"));
    }
    {
      Op op("relu_backward");
      keep(buffer(256 * KiB, ADPROF_ROLE_ADJOINT, "model.act"));
    }
    {
      Op op("linear_backward");
      keep(buffer(64 * KiB, ADPROF_ROLE_ADJOINT, "model.fc1.weight"));
      keep(buffer(1 * KiB, ADPROF_ROLE_ADJOINT, "model.fc1.bias"));
      keep(buffer(48 * KiB, ADPROF_ROLE_WORKSPACE, nullptr));  // the peak: everything is live
    }
    for (void *p : live) std::free(p);
  }
  return 0;
}
