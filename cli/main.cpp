// adprof: memory profiling for automatic-differentiation programs.
#include <cstdio>
#include <cstring>
#include <exception>

#include "adprof/report.h"
#include "adprof/trace_reader.h"
#include "cli_common.h"
#include "trace_format.h"

namespace {

constexpr const char *kUsage = R"(usage: adprof COMMAND [ARGS...]

Memory profiling for automatic-differentiation programs: what the peak is made of
(forward caches, adjoint buffers, duplicated intermediates, ...) and what to change.

Commands:
  run [-o TRACE] [--] PROGRAM [ARGS...]   profile a program, write a trace, print the report
  report TRACE [--json] [--top N]         the memory report of a trace
  report --job TRACE|FOLDER [--rank N]    a job's ranks side by side (a run's every process)
  timeline TRACE [--csv F] [--svg F]      live bytes over time, stacked by role
  diff BASE NEW [--fail-if GATE]...       compare two runs; exit 1 when a gate fails
  check RUN [--max-peak SIZE] ...         absolute memory budgets; exit 1 when exceeded
  export TRACE --perfetto F | --folded F  Chrome/Perfetto trace JSON, folded stacks
  dump TRACE [--limit N] [--types LIST]   the raw events, one per line
  whatif TRACE [--json]                   predicted peak with each memory policy switched on

PyTorch: `adprof run --torch -- python3 SCRIPT [ARGS...]` profiles an unmodified training
script, with roles, module paths and ops from autograd; `adprof run --torch -- torchrun ...`
records every rank of a job (`adprof run --help`).
JAX: `adprof run --jax -- python3 SCRIPT [ARGS...]`: the buffers of every program XLA compiles,
with their roles inside jitted gradients.

Run `adprof COMMAND --help` for a command's options; `adprof --version` names the version,
the trace format and the interposer `run` preloads. Once installed (`cmake --install`, or the
.deb), `man adprof` has all commands in one page.
Exit codes: 0 ok, 1 a check failed, 2 usage or input error (a trace that is cut, damaged or
incomplete is an input error for diff and check unless --allow-incomplete; output that cannot
be written is one too); `run` exits with the program's status (when signal N ended it: dies of N
too, or exits 128+N for a signal that dumps core). The other commands read what is left of a cut or damaged trace and say on stderr
what is missing.
)";

}  // namespace

int main(int argc, char **argv) {
  using namespace adprof::cli;
  if (argc < 2) {
    fputs(kUsage, stderr);
    return kExitUsage;
  }
  std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "--help" || command == "-h" || command == "help") {
    fputs(kUsage, stdout);
    return finish_stdout(kExitOk);
  }
  if (command == "--version") {
    printf("adprof %s (writes trace format %u, reads %u to %u; report schema %d)\n", ADPROF_VERSION,
           adprof::format::kVersion, adprof::format::kOldestVersion, adprof::format::kVersion,
           adprof::kReportSchemaVersion);
    try {
      printf("interposer: %s\n", find_preload().c_str());
    } catch (const UsageError &) {
      printf("interposer: none found (set ADPROF_PRELOAD to its path)\n");
    }
    return finish_stdout(kExitOk);
  }
  try {
    if (command == "run") return finish_stdout(command_run(args));
    if (command == "report") return finish_stdout(command_report(args));
    if (command == "diff") return finish_stdout(command_diff(args));
    if (command == "check") return finish_stdout(command_check(args));
    if (command == "timeline") return finish_stdout(command_timeline(args));
    if (command == "export") return finish_stdout(command_export(args));
    if (command == "dump") return finish_stdout(command_dump(args));
    if (command == "whatif") return finish_stdout(command_whatif(args));
    fprintf(stderr, "adprof: error: unknown command '%s' (see adprof --help)\n", command.c_str());
    return kExitUsage;
  } catch (const UsageError &e) {
    end_progress();
    fprintf(stderr, "adprof: error: %s\n", e.what());
    return kExitUsage;
  } catch (const adprof::TraceError &e) {
    end_progress();
    fprintf(stderr, "adprof: error: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception &e) {
    end_progress();
    fprintf(stderr, "adprof: error: %s\n", e.what());
    return kExitUsage;
  }
}
