// PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`, the pickle that
// pytorch.org/memory_viz and `python -m torch.cuda._memory_viz` read), both ways.
//
// In: TraceReader opens a snapshot as it opens a trace (known by its first byte, pickle's PROTO
// opcode 0x80, not by its name) and yields the events read_torch_snapshot() makes of it, so that
// every command and the GUI read snapshots through the one replay loop. What the events say:
//  - each device's allocations are the run's primary memory, the space every analysis reads
//    (heap events: the report's peak, roles, buffers, timeline, gates), one thread per device
//    ("device 0"); a device's reserved segments are ADPROF_SPACE_DEVICE_SEGMENT (the report's
//    device.reserved_peak);
//  - live memory over time follows the device traces as PyTorch's viewer draws its Active
//    Memory Timeline: an `alloc` is live until its `free_completed` (or `free`); a block freed in
//    the trace but allocated before it, and a block active in the segments at the dump but not
//    allocated in the trace, are live from the start;
//  - roles: an entry's `category` (an adprof role, as adprof's export writes it, or PyTorch's
//    memory-profiler category where it means the same: activation -> forward_cache, gradient
//    and autograd_detail -> adjoint, temporary -> workspace), else its `user_metadata` read the
//    same way, else foreign; `user_metadata` that names no role is the buffer's label;
//  - the allocation site is the op scope of each allocation: the innermost Python frame outside
//    torch's own files ("function (file:line)"), else the innermost frame (in adprof's own
//    export, the op its first frame names; its `user_metadata` is the label);
//  - a snapshot adprof wrote of a run with a host heap (its `adprof` dict names that device
//    "host"): that device is the heap again, the others device blocks (ADPROF_SPACE_DEVICE_BLOCK);
//  - `oom` entries are the AD protocol's ad.device.oom annotation; `annotate` entries label (or,
//    naming a role, retag) their block; other actions are counted and skipped.
//  Times are the entries' `time_us`; where the snapshot has none, the entry's number (1 us each).
//
// Out: write_exports() (exports.h, ExportStreams::torch_snapshot) writes a trace as a snapshot
// in its one pass (docs/PYTORCH.md, "Snapshots").
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "adprof/trace_reader.h"

namespace adprof {

// A file's first byte says whether it is a pickle (protocol 2 and later start with PROTO).
bool is_pickle_file(const std::string &path);

// A snapshot turned into trace events, in time order; texts and values live in `texts` and
// `values` for as long as this object.
struct SnapshotEvents {
  TraceHeader header;
  std::vector<Event> events;
  uint32_t threads = 0;          // one per device with memory
  uint64_t skipped_entries = 0;  // unknown actions
  std::deque<std::string> texts;
  std::deque<std::vector<uint64_t>> values;
};

// Throws TraceError with one line: not a pickle, a pickle outside the subset, damaged, or not a
// PyTorch memory snapshot.
SnapshotEvents read_torch_snapshot(const std::string &path);

// What write_exports() wrote in a snapshot (pickle protocol 4). Device i < N: the trace's device
// blocks of device i (N devices); device N: the host heap (device 0 when the trace has no device
// memory).
struct SnapshotExportStats {
  uint64_t allocations = 0;  // alloc entries written (all devices)
  uint64_t entries = 0;      // trace entries written
  uint32_t devices = 0;      // device traces (the host heap is the last)
  uint64_t bytes = 0;        // size of the pickle
};

}  // namespace adprof
