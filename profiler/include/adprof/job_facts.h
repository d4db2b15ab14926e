/* What a process says about its place in a job of several processes (a training job's ranks,
 * its launcher, its workers), so that `adprof report` can put the processes of one run side by
 * side (docs/PYTORCH.md, "Training jobs"; the reader is profiler/analysis/job/).
 *
 * Facts ride on the context API (context.h): adprof_annotate(adprof_name(KIND), values, n).
 * They name no engine or launcher: any program may say them (the PyTorch integration does, in
 * python/adprof/torch/_job.py). Strings inside values are name ids from adprof_name;
 * ADPROF_JOB_UNKNOWN marks a value the process does not know. A process may say a fact again
 * (it learned its rank later): the last one counts.
 *
 * Stability: kind names and value positions are part of the trace format, append only (a new
 * value goes at the end; readers take what they know).
 *
 * "job.process": {pid, parent pid}
 *   once, when the process's instrumentation starts. The parent links a job's processes: a
 *   process whose parent is a rank is that rank's worker (a DataLoader's), the parent of ranks
 *   is their launcher (torchrun, a script that spawns its ranks).
 *
 * "job.rank": {rank, world size, local rank, local world size, node, host (name id),
 *             job (name id)}
 *   when the process knows it is one rank of a collective job (a launcher's environment:
 *   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK; or the process group it
 *   joined). node: the rank of its machine among the job's machines. job: what every rank of
 *   the job shares and no other job does (the rendezvous' address and id), so that the ranks
 *   of several machines, each recorded by its own `adprof run`, are read as one job.
 */
#ifndef ADPROF_JOB_FACTS_H
#define ADPROF_JOB_FACTS_H

#include <stdint.h>

#define ADPROF_JOB_UNKNOWN (~(uint64_t)0)
#define ADPROF_JOB_PROCESS "job.process"
#define ADPROF_JOB_RANK "job.rank"

#endif /* ADPROF_JOB_FACTS_H */
