// minitape: a second AD engine, a few dozen lines that share nothing with adcore, emitting the
// AD protocol (adprof/ad_protocol.h) by hand. It differentiates
//   loss = sum(x + x) + sum_k sum(tanh(w_k * x)),  k = 1..K, every vector of S doubles,
// with respect to x and every w_k. Two memory policies, switched the minitape way:
//   MINITAPE_EARLY_RELEASE=1    a tanh output the tape saved dies right after its backward rule
//   MINITAPE_ACCUMULATE=inplace gradients meeting at x are added as they arrive, not each copied
//                               and summed at the end ("deferred")
// x receives 2 + K contributions: twice the same buffer from x + x (the second one shared,
// so an in-place engine adds it out of place), then one per branch (added in place).
#include <adprof/ad_protocol.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace {
size_t S = 1 << 20;
struct Storage {  // one malloc'd vector, allocated with the role of the moment
  double *p;
  Storage(adprof_role role, double fill) {
    adprof::RoleScope r(role);
    p = static_cast<double *>(std::malloc(S * sizeof(double)));
    for (size_t i = 0; i < S; ++i) p[i] = fill;
  }
  ~Storage() { std::free(p); }
};
using Buf = std::shared_ptr<Storage>;
Buf make(adprof_role role, double fill = 0) { return std::make_shared<Storage>(role, fill); }
uint64_t addr(const Buf &b) { return reinterpret_cast<uint64_t>(b->p); }
void event(const char *kind, std::initializer_list<uint64_t> v) {
  adprof_annotate(adprof_name(kind), v.begin(), static_cast<uint32_t>(v.size()));
}

struct Tape {
  bool early, inplace;
  uint64_t bytes;
  std::vector<Buf> adj;
  std::vector<std::vector<Buf>> pending;
  explicit Tape(size_t nodes) : adj(nodes), pending(nodes) {}
  void accumulate(int target, int from, Buf c) {
    const uint64_t src = addr(c);
    if (!inplace) {  // deferred: a copy of every contribution, summed when the adjoint is read
      Buf m = make(ADPROF_ROLE_ACCUMULATION);
      std::memcpy(m->p, c->p, S * sizeof(double));
      event(ADPROF_AD_TAPE_CONTRIBUTION, {uint64_t(target), uint64_t(from), addr(m), bytes,
                                          ADPROF_AD_CONTRIBUTION_DEFERRED, src});
      pending[target].push_back(std::move(m));
      return;
    }
    Buf &cur = adj[target];
    uint64_t mode = ADPROF_AD_CONTRIBUTION_ADOPTED;
    if (!cur) {
      cur = std::move(c);
    } else if (cur.use_count() == 1) {
      for (size_t i = 0; i < S; ++i) cur->p[i] += c->p[i];
      mode = ADPROF_AD_CONTRIBUTION_INPLACE;
    } else {
      Buf sum = make(ADPROF_ROLE_ADJOINT);
      for (size_t i = 0; i < S; ++i) sum->p[i] = cur->p[i] + c->p[i];
      cur = std::move(sum);
      mode = ADPROF_AD_CONTRIBUTION_OUT_OF_PLACE;
    }
    event(ADPROF_AD_TAPE_CONTRIBUTION,
          {uint64_t(target), uint64_t(from), addr(cur), bytes, mode, src});
  }
  Buf take(int id) {  // the adjoint, its pending contributions summed first
    auto &p = pending[id];
    if (!p.empty()) {
      Buf s = p[0];
      if (p.size() > 1) {
        s = make(ADPROF_ROLE_ADJOINT);
        for (const Buf &b : p)
          for (size_t i = 0; i < S; ++i) s->p[i] += b->p[i];
      } else {
        adprof_retag(s->p, ADPROF_ROLE_ADJOINT, nullptr);
      }
      event(ADPROF_AD_TAPE_ADJOINT_SUM, {uint64_t(id), addr(s), bytes, p.size()});
      p.clear();
      adj[id] = std::move(s);
    }
    return std::move(adj[id]);
  }
};
}  // namespace

int main(int argc, char **argv) {
  const int K = argc > 1 ? std::atoi(argv[1]) : 4;
  if (argc > 2) S = static_cast<size_t>(std::atol(argv[2]));
  const char *e = std::getenv("MINITAPE_EARLY_RELEASE");
  const char *a = std::getenv("MINITAPE_ACCUMULATE");
  const bool early = e && std::strcmp(e, "1") == 0;
  const bool inplace = !a || std::strcmp(a, "inplace") == 0;
  const uint64_t bytes = S * sizeof(double);

  adprof_ad_describe_engine("minitape", "0.1");
  adprof_ad_describe_policy(ADPROF_AD_POLICY_EARLY_RELEASE, early,
                            "export MINITAPE_EARLY_RELEASE=1", "MINITAPE_EARLY_RELEASE=0");
  adprof_ad_describe_policy(ADPROF_AD_POLICY_INPLACE_ACCUMULATION, inplace,
                            "export MINITAPE_ACCUMULATE=inplace", "MINITAPE_ACCUMULATE=deferred");
  const uint64_t mask = (early ? 1u << ADPROF_AD_POLICY_EARLY_RELEASE : 0) |
                        (inplace ? 1u << ADPROF_AD_POLICY_INPLACE_ACCUMULATION : 0);
  // Node ids: x 0, w_k k, b_k (tanh(w_k x)) K + k, a (x + x) 2K + 1, loss 2K + 2.
  const int A = 2 * K + 1, L = 2 * K + 2;
  Tape t(static_cast<size_t>(L) + 1);
  t.early = early;
  t.inplace = inplace;
  t.bytes = bytes;
  const uint32_t op_tanh = adprof_name("tanh_mul"), op_add = adprof_name("add2"),
                 op_sum = adprof_name("sum_all");
  Buf x = make(ADPROF_ROLE_INPUT, 0.5);
  std::vector<Buf> w, z(static_cast<size_t>(K) + 1);
  for (int k = 0; k <= K; ++k) w.push_back(make(ADPROF_ROLE_PARAMETER, 0.1 * k));
  adprof::PhaseScope forward(ADPROF_PHASE_FORWARD);
  event(ADPROF_AD_TAPE_BEGIN, {1, 0, mask});
  event(ADPROF_AD_TAPE_LEAF, {0, addr(x), bytes, 1});
  for (int k = 1; k <= K; ++k) event(ADPROF_AD_TAPE_LEAF, {uint64_t(k), addr(w[k]), bytes, 1});
  for (int k = 1; k <= K; ++k) {
    adprof::OpScope op(op_tanh, uint64_t(K + k));
    z[k] = make(ADPROF_ROLE_ACTIVATION);
    for (size_t i = 0; i < S; ++i) z[k]->p[i] = std::tanh(w[k]->p[i] * x->p[i]);
    event(ADPROF_AD_TAPE_NODE, {uint64_t(K + k), op_tanh, addr(z[k]), bytes, 2, 0, uint64_t(k)});
    adprof_retag(z[k]->p, ADPROF_ROLE_FORWARD_CACHE, nullptr);
    event(ADPROF_AD_TAPE_SAVE, {uint64_t(K + k), addr(z[k]), bytes, ADPROF_AD_SAVE_OUTPUT, 3});
  }
  {
    adprof::OpScope op(op_add, uint64_t(A));
    Buf y = make(ADPROF_ROLE_ACTIVATION);
    event(ADPROF_AD_TAPE_NODE, {uint64_t(A), op_add, addr(y), bytes, 2, 0, 0});
  }  // y is read by the sum only: gone
  double loss = 0;
  {
    adprof::OpScope op(op_sum, uint64_t(L));
    for (size_t i = 0; i < S; ++i) loss += 2 * x->p[i];
    for (int k = 1; k <= K; ++k)
      for (size_t i = 0; i < S; ++i) loss += z[k]->p[i];
    std::vector<uint64_t> v = {uint64_t(L), op_sum, 0, 0, uint64_t(K + 1)};
    for (int k = 1; k <= K; ++k) v.push_back(uint64_t(K + k));
    v.push_back(uint64_t(A));
    adprof_annotate(adprof_name(ADPROF_AD_TAPE_NODE), v.data(), uint32_t(v.size()));
  }
  adprof::PhaseScope backward(ADPROF_PHASE_BACKWARD);
  adprof::RoleScope adjoints(ADPROF_ROLE_ADJOINT);
  event(ADPROF_AD_TAPE_BACKWARD_BEGIN,
        {uint64_t(L), uint64_t(L + 1), mask, ADPROF_AD_BACKWARD_IN_CALL});
  std::vector<uint64_t> requested;
  for (int k = 0; k <= K; ++k) requested.push_back(uint64_t(k));
  adprof_annotate(adprof_name(ADPROF_AD_TAPE_REQUESTED), requested.data(),
                  uint32_t(requested.size()));
  {
    adprof::OpScope op(op_sum, uint64_t(L));
    event(ADPROF_AD_TAPE_BACKWARD_NODE, {uint64_t(L)});
    t.accumulate(A, L, make(ADPROF_ROLE_ADJOINT, 1));
    Buf ones = make(ADPROF_ROLE_ADJOINT, 1);
    for (int k = 1; k <= K; ++k) t.accumulate(K + k, L, ones);
  }
  {
    Buf g = t.take(A);
    adprof::OpScope op(op_add, uint64_t(A));
    event(ADPROF_AD_TAPE_BACKWARD_NODE, {uint64_t(A)});
    t.accumulate(0, A, g);
    t.accumulate(0, A, std::move(g));
  }
  for (int k = K; k >= 1; --k) {
    Buf g = t.take(K + k);
    {
      adprof::OpScope op(op_tanh, uint64_t(K + k));
      event(ADPROF_AD_TAPE_BACKWARD_NODE, {uint64_t(K + k)});
      Buf d = make(ADPROF_ROLE_WORKSPACE);
      for (size_t i = 0; i < S; ++i) d->p[i] = g->p[i] * (1 - z[k]->p[i] * z[k]->p[i]);
      g.reset();
      Buf gw = make(ADPROF_ROLE_ADJOINT), gx = make(ADPROF_ROLE_ADJOINT);
      for (size_t i = 0; i < S; ++i) gw->p[i] = d->p[i] * x->p[i], gx->p[i] = d->p[i] * w[k]->p[i];
      t.accumulate(k, K + k, std::move(gw));
      t.accumulate(0, K + k, std::move(gx));
    }
    if (early) {
      event(ADPROF_AD_TAPE_RELEASE, {uint64_t(K + k), addr(z[k])});
      z[k].reset();
    }
  }
  std::vector<Buf> grads;  // handed to the caller
  for (int id = 0; id <= K; ++id) {
    Buf g = t.take(id);
    event(ADPROF_AD_TAPE_ADJOINT_COMPLETE, {uint64_t(id), addr(g), bytes});
    grads.push_back(std::move(g));
  }
  for (int k = 1; k <= K; ++k)
    if (z[k]) {
      event(ADPROF_AD_TAPE_RELEASE, {uint64_t(K + k), addr(z[k])});
      z[k].reset();
    }
  event(ADPROF_AD_TAPE_END, {1, 0});
  return loss > 0 && grads[0]->p[0] != 0 ? 0 : 1;
}
