// A training job's shape without PyTorch (the job commands' and the GUI's tests): a launcher
// that starts its node's ranks (fork, then exec of this program, as torchrun does), and ranks
// that say their facts (adprof/job_facts.h) and run two steps with known bytes.
//
//   cli_job_workload launch NODE NPROC NNODES SCALE
//   (rank R = NODE * NPROC + local rank; WORLD = NPROC * NNODES)
//
// Each rank holds 1 MiB of parameters throughout, and in each step (R + 1) * SCALE MiB of
// forward caches (freed at the step's end): its peak is 1 MiB + (R + 1) * SCALE MiB of known
// roles, so the last rank is the outlier for its forward caches. SCALE is a whole number.
// JOB_WORKLOAD_SPIKE=RANK:STEP:MIB in the environment: that rank holds MIB MiB more forward
// caches in that step (a step-dependent spike: the step windows' test of the job report), every
// rank runs STEP + 2 steps, and each step also makes and frees 100,000 small temporaries (a
// thread buffer's worth of events or more: under `adprof run --steps A:B` the steps outside
// the window are folded, not written whole in the buffer that holds the start-up).
// JOB_WORKLOAD_DEVICE=MIB in the environment: each rank also declares device blocks (the context
// API's tracked blocks: no device needed) on device 0: MIB MiB of parameters labelled
// "model.weight" throughout, and in each step MIB MiB of forward caches labelled "encoder" and
// (R + 1) * MIB MiB labelled "decoder"; its device peak is (R + 3) * MIB MiB, the last rank the
// device's outlier for its forward caches. Its allocator's reserve: a segment of
// 4 * (R + 3) * MIB MiB. After the peak the encoder's block is retagged an adjoint buffer before
// it is freed, and the parameters are held until the process exits (the device peak's blocks
// by label: one retagged since, one still live at the end).
#include <adprof/context.h>
#include <adprof/job_facts.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr size_t kMiB = size_t{1} << 20;

void *hold(size_t bytes, adprof_role role) {
  const adprof_role before = adprof_set_role(role);
  void *p = malloc(bytes);
  adprof_set_role(before);
  memset(p, 1, bytes);  // touched: the program uses what it asked for
  return p;
}

// A device block declared the way an instrumented allocator declares it (never dereferenced:
// the address is the allocator's, here a made-up one far from the heap).
void *device_block(uintptr_t at, size_t bytes, adprof_role role, const char *label,
                   adprof_space space = ADPROF_SPACE_DEVICE_BLOCK) {
  void *p = reinterpret_cast<void *>(uintptr_t{1} << 44 | at);
  const adprof_role before = adprof_set_role(role);
  adprof_track_alloc(p, bytes, space, 0);
  adprof_set_role(before);
  if (label) adprof_label(p, adprof_name(label));
  return p;
}

int rank_main(uint64_t rank, uint64_t world, uint64_t local_rank, uint64_t local_world,
              uint64_t node, uint64_t scale) {
  const uint64_t process[] = {static_cast<uint64_t>(getpid()), static_cast<uint64_t>(getppid())};
  adprof_annotate(adprof_name(ADPROF_JOB_PROCESS), process, 2);
  const uint64_t facts[] = {rank,
                            world,
                            local_rank,
                            local_world,
                            node,
                            adprof_name("localhost"),
                            adprof_name("cli_job_workload")};
  adprof_annotate(adprof_name(ADPROF_JOB_RANK), facts, 7);
  uint64_t spike_rank = UINT64_MAX, spike_step = 0, spike_mib = 0;
  if (const char *spike = getenv("JOB_WORKLOAD_SPIKE"))
    sscanf(spike, "%" SCNu64 ":%" SCNu64 ":%" SCNu64, &spike_rank, &spike_step, &spike_mib);
  const bool spiked = spike_rank != UINT64_MAX;
  const uint64_t steps = spiked ? spike_step + 2 : 2;
  uint64_t device_mib = 0;
  if (const char *device = getenv("JOB_WORKLOAD_DEVICE"))
    device_mib = strtoull(device, nullptr, 10);
  void *segment = nullptr, *device_parameters = nullptr;
  if (device_mib) {
    segment = device_block(uintptr_t{1} << 40, 4 * (rank + 3) * device_mib * kMiB,
                           ADPROF_ROLE_FOREIGN, nullptr, ADPROF_SPACE_DEVICE_SEGMENT);
    device_parameters = device_block(0, device_mib * kMiB, ADPROF_ROLE_PARAMETER, "model.weight");
  }
  void *parameters = hold(kMiB, ADPROF_ROLE_PARAMETER);
  for (uint64_t step = 0; step < steps; ++step) {
    adprof_step(step);
    adprof_phase before = adprof_set_phase(ADPROF_PHASE_FORWARD);
    const uint64_t extra = rank == spike_rank && step == spike_step ? spike_mib : 0;
    void *caches = hold(((rank + 1) * scale + extra) * kMiB, ADPROF_ROLE_FORWARD_CACHE);
    for (int i = 0; spiked && i < 100000; ++i) {
      void *temporary = malloc(32);
      *static_cast<volatile char *>(temporary) = 1;
      free(temporary);
    }
    void *encoder = nullptr, *decoder = nullptr;
    if (device_mib) {
      encoder =
          device_block(uintptr_t{1} << 36, device_mib * kMiB, ADPROF_ROLE_FORWARD_CACHE, "encoder");
      decoder = device_block(uintptr_t{2} << 36, (rank + 1) * device_mib * kMiB,
                             ADPROF_ROLE_FORWARD_CACHE, "decoder");
    }
    usleep(20000);  // a lane with some width on the job's clock
    adprof_set_phase(ADPROF_PHASE_BACKWARD);
    if (device_mib) {
      adprof_retag(encoder, ADPROF_ROLE_ADJOINT, nullptr);
      adprof_track_free(decoder, ADPROF_SPACE_DEVICE_BLOCK, 0);
      adprof_track_free(encoder, ADPROF_SPACE_DEVICE_BLOCK, 0);
    }
    free(caches);
    adprof_set_phase(before);
  }
  free(parameters);
  if (device_mib) adprof_track_free(segment, ADPROF_SPACE_DEVICE_SEGMENT, 0);
  (void)device_parameters;  // held until the process exits
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc == 8 && std::string(argv[1]) == "rank")
    return rank_main(strtoull(argv[2], nullptr, 10), strtoull(argv[3], nullptr, 10),
                     strtoull(argv[4], nullptr, 10), strtoull(argv[5], nullptr, 10),
                     strtoull(argv[6], nullptr, 10), strtoull(argv[7], nullptr, 10));
  if (argc != 6 || std::string(argv[1]) != "launch") return 2;
  const uint64_t node = strtoull(argv[2], nullptr, 10), nproc = strtoull(argv[3], nullptr, 10),
                 nnodes = strtoull(argv[4], nullptr, 10);
  const uint64_t launcher[] = {static_cast<uint64_t>(getpid()), static_cast<uint64_t>(getppid())};
  adprof_annotate(adprof_name(ADPROF_JOB_PROCESS), launcher, 2);
  for (uint64_t local = 0; local < nproc; ++local) {
    const pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
      const std::string args[] = {std::to_string(node * nproc + local),
                                  std::to_string(nproc * nnodes),
                                  std::to_string(local),
                                  std::to_string(nproc),
                                  std::to_string(node),
                                  argv[5]};
      execl("/proc/self/exe", argv[0], "rank", args[0].c_str(), args[1].c_str(), args[2].c_str(),
            args[3].c_str(), args[4].c_str(), args[5].c_str(), static_cast<char *>(nullptr));
      _exit(127);
    }
  }
  int failed = 0;
  for (uint64_t local = 0; local < nproc; ++local) {
    int status = 0;
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  return failed;
}
