// Shared command line and reporting for the adcore samples.
//
// Every sample takes the same policy switches: --naive (all policies off) and one flag per
// policy; unknown flags are a one-line error with exit status 2.
#pragma once
#include <adcore/adcore.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace samples {

namespace po = boost::program_options;

struct Common {
  adcore::Options opts;
  std::string dump_grad;
  bool quiet = false;
};

inline void add_common(po::options_description &d) {
  d.add_options()("help,h", "show this help and exit")(
      "naive", "turn every memory policy off (the naive engine)")(
      "no-activity-analysis",
      "policy 1 off: adjoints and caches for values that lead to no "
      "requested gradient")("no-early-release",
                            "policy 2 off: forward caches live until the end of backward")(
      "no-inplace-accumulation",
      "policy 3 off: gradient contributions are materialised and "
      "summed at the end")("no-fused-optimizer",
                           "policy 4 off: gradients kept, optimizer step after backward")(
      "no-checkpoint", "policy 5 off: marked segments keep their caches")(
      "no-reuse-tape", "policy 6 off: every evaluation allocates afresh")(
      "widen-indices", "policy 7 off: i32 index arrays are copied to i64 before gather/scatter")(
      "hash-contents", "hash op outputs for the profiler's duplicate detection")(
      "dump-grad", po::value<std::string>(), "write the gradient to FILE as NumPy .npy")(
      "quiet,q", "print only the result lines")(
      "device", po::value<std::string>()->default_value("cpu"),
      "where tensors live: cpu, or cuda (its plugin is loaded on demand; see docs/CUDA.md)");
}

// Parses argv; returns -1 to continue, else the exit status.
inline int parse(int argc, char **argv, const char *name, const char *about,
                 po::options_description &d, po::variables_map &vm, Common &c) {
  add_common(d);
  try {
    po::store(po::command_line_parser(argc, argv).options(d).run(), vm);
    po::notify(vm);
  } catch (const po::error &e) {
    std::fprintf(stderr, "%s: %s (try --help)\n", name, e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << about << "\n" << d << "\n";
    return 0;
  }
  adcore::Options &o = c.opts;
  if (vm.count("naive")) o = adcore::Options::naive();
  if (vm.count("no-activity-analysis")) o.activity_analysis = false;
  if (vm.count("no-early-release")) o.early_release = false;
  if (vm.count("no-inplace-accumulation")) o.inplace_accumulation = false;
  if (vm.count("no-fused-optimizer")) o.fused_optimizer = false;
  if (vm.count("no-checkpoint")) o.checkpointing = false;
  if (vm.count("no-reuse-tape")) o.reuse_tape = false;
  if (vm.count("widen-indices")) o.native_i32_indices = false;
  if (vm.count("hash-contents")) o.hash_contents = true;
  if (vm.count("dump-grad")) c.dump_grad = vm["dump-grad"].as<std::string>();
  c.quiet = vm.count("quiet") > 0;
  const std::string dev = vm["device"].as<std::string>();
  adcore::Device *device = nullptr;
  try {  // loads the device's plugin (cuda) on demand; unknown, missing or unusable: one line
    device = &adcore::open_device(dev.c_str());
    (void)adcore::empty(adcore::Shape{1}, adcore::DType::F32, ADPROF_ROLE_INPUT, *device);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 2;
  }
  adcore::set_default_device(*device);
  adcore::set_default_options(o);
  return -1;
}

inline std::string policies(const adcore::Options &o) {
  std::string s;
  auto add = [&](bool on, const char *n) { s += std::string(on ? "+" : "-") + n + " "; };
  add(o.activity_analysis, "activity");
  add(o.early_release, "early-release");
  add(o.inplace_accumulation, "inplace-accum");
  add(o.fused_optimizer, "fused-opt");
  add(o.checkpointing, "checkpoint");
  add(o.reuse_tape, "reuse-tape");
  add(o.native_i32_indices, "i32-indices");
  return s;
}

inline double norm(const adcore::Tensor &g) {
  double s = 0;
  for (double v : g.to_vector()) s += v * v;
  return std::sqrt(s);
}

inline std::string mib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}

// adcore's own counters: what AD added on top of the function. They count adcore's tensor
// storage only; the profiler's "Peak" counts every live heap byte (loaded data, the C++
// runtime, ...), hence the label, so that the two figures of a demo are not read as one.
inline void print_memory(const char *name) {
  const adcore::AllocStats &s = adcore::alloc_stats();
  std::printf(
      "%s: adcore tensors peak %s (tensor storage only; adprof's Peak counts every live heap "
      "byte) | peak by role: forward_cache %s, adjoint %s (%lld buffers), "
      "accumulation %s (%lld buffers), duplicate %s, optimizer_state %s | "
      "heap allocations %llu, arena reuses %llu\n",
      name, mib(s.peak_total).c_str(), mib(s.peak_bytes[ADPROF_ROLE_FORWARD_CACHE]).c_str(),
      mib(s.peak_bytes[ADPROF_ROLE_ADJOINT]).c_str(),
      static_cast<long long>(s.peak_count[ADPROF_ROLE_ADJOINT]),
      mib(s.peak_bytes[ADPROF_ROLE_ACCUMULATION]).c_str(),
      static_cast<long long>(s.peak_count[ADPROF_ROLE_ACCUMULATION]),
      mib(s.peak_bytes[ADPROF_ROLE_DUPLICATE]).c_str(),
      mib(s.peak_bytes[ADPROF_ROLE_OPTIMIZER_STATE]).c_str(),
      static_cast<unsigned long long>(s.heap_allocs),
      static_cast<unsigned long long>(s.arena_hits));
}

inline void dump(const Common &c, const adcore::Tensor &g) {
  if (c.dump_grad.empty()) return;
  adcore::save_npy(c.dump_grad, g);
  std::printf("gradient written to %s\n", c.dump_grad.c_str());
}

// The gradient of `loss` with respect to every parameter, flattened and concatenated in the
// parameters' order: what the training samples' --dump-grad writes.
inline adcore::Tensor flat_gradient(const adcore::Tensor &loss,
                                    const std::vector<adcore::Tensor> &params) {
  std::vector<adcore::Tensor> grads(params.size());
  adcore::Tape::thread_default().gradients(loss, params, grads);
  std::vector<adcore::Tensor> flat;
  for (const adcore::Tensor &g : grads) flat.push_back(adcore::reshape(g, adcore::Shape{-1}));
  return adcore::concat(flat, 0);
}

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace samples
