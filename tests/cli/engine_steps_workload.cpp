// An engine that describes itself (the AD protocol's ad.engine) and makes the same heap
// allocations in each of 4 steps, for the allocations-per-step finding's fix: in the engine's
// words when it describes a reusable tape ("tape": it does, switched off), else it says the
// engine has none. With "longname" the op's name is 1,500 bytes with quotes and backslashes
// (the Perfetto export formatted names into a 512-byte buffer); with "multiline" it is a
// snippet of code over three lines, with a tab and quotes (a fix an integration names, as PyTorch
// users' are). Usage: engine_steps_workload [tape|longname|multiline]
#include <adprof/ad_protocol.h>
#include <adprof/context.h>

#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char **argv) {
  adprof_ad_describe_engine("tinyengine", "0.1");
  if (argc > 1 && !strcmp(argv[1], "tape"))
    adprof_ad_describe_policy(ADPROF_AD_POLICY_REUSABLE_TAPE, 0, "export TINY_TAPE=1",
                              "export TINY_TAPE=0");
  std::string long_name;
  if (argc > 1 && !strcmp(argv[1], "longname"))
    for (int i = 0; i < 100; ++i) long_name += "op\"name\\" + std::to_string(1000 + i);
  if (argc > 1 && !strcmp(argv[1], "multiline"))
    long_name = "for b in \"blocks\":\n\tb.forward = wrap(b)\nthen \\ done";
  const uint32_t work = adprof_name(long_name.empty() ? "work" : long_name.c_str());
  for (uint64_t step = 0; step < 4; ++step) {
    adprof_step(step);
    adprof_op_begin(work, step + 1);
    void *volatile blocks[8];
    for (auto &b : blocks) b = malloc(4096);
    for (auto &b : blocks) free(b);
    adprof_op_end();
  }
  return 0;
}
