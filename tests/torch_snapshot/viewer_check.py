#!/usr/bin/env python3
"""What PyTorch's own tools read from a memory snapshot, as JSON on stdout.

    python3 viewer_check.py SNAPSHOT.pickle [SNAPSHOT.pickle ...]

One JSON object a line, for each snapshot in order (one interpreter for all: importing torch is
most of a small snapshot's time).

For each device trace: the peak of the viewer's "Active Memory Timeline" and the bytes by
category live there, the number of allocations `torch.cuda._memory_viz trace` prints, and its
entry count; for the whole file: `_memory_viz`'s segment summary (`stats`) total allocated,
as it prints it, and the categories of the legend.

The timeline's rules are those of PyTorch's viewer (torch/utils/viz/MemoryViz.js,
process_alloc_data; it is not in the wheel and runs in a browser, so they are restated here):
an `alloc` is live until a `free` or `free_completed` of its address (a `free_requested` alone
frees nothing); a free of an address the trace never allocated was live from the start; a block
active in the segments at the dump that the trace did not allocate is live from the start with
its requested size. The peak is the largest total after any of those actions. The trace and
stats outputs are `torch.cuda._memory_viz`'s own functions (`trace`, `segsum`); without torch
(or a torch whose `_memory_viz` has no `trace`, 1.13) they are null.
"""
import json
import pickle
import re
import sys


def requested(block):
    """A block's requested size; in PyTorch 1.13's layout, its history's first real size."""
    if "requested_size" in block:
        return block["requested_size"]
    if block.get("history"):
        return block["history"][0]["real_size"]
    return block["size"]


def timeline(snapshot, device):
    entries = snapshot["device_traces"][device]
    sizes, cats, live, start = {}, {}, {}, []
    # What was live before the trace.
    seen = {}
    for e in entries:
        if e.get("action") == "alloc":
            seen[e["addr"]] = True
        elif e.get("action") in ("free", "free_completed"):
            if not seen.pop(e["addr"], False):
                start.append((e["size"], e.get("category", "unknown")))
    for seg in snapshot.get("segments", []):
        if seg.get("device", 0) != device:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            at = b.get("address", addr)
            addr = at + b["size"]
            if b["state"] == "active_allocated" and at not in seen:
                start.append((requested(b), b.get("category", "unknown")))
    total = sum(s for s, _ in start)
    by_cat = {}
    for s, c in start:
        by_cat[c] = by_cat.get(c, 0) + s
    peak, at_peak = total, dict(by_cat)
    for e in entries:
        action = e.get("action")
        if action == "alloc":
            c = e.get("category", "unknown")
            live[e["addr"]] = (e["size"], c)
            total += e["size"]
            by_cat[c] = by_cat.get(c, 0) + e["size"]
        elif action in ("free", "free_completed"):
            if e["addr"] in live:
                s, c = live.pop(e["addr"])
            else:
                s, c = e["size"], e.get("category", "unknown")
            total -= s
            by_cat[c] -= s
        else:
            continue
        if total > peak:
            peak, at_peak = total, dict(by_cat)
    return peak, {c: b for c, b in at_peak.items() if b}


def read(path):
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    segments_only = isinstance(snapshot, list)  # PyTorch 1.13: no trace to print
    if segments_only:
        devices = 1 + max([s.get("device", 0) for s in snapshot] or [0])
        snapshot = {"segments": snapshot, "device_traces": [[] for _ in range(devices)]}
    out = {"devices": [], "stats_total_allocated": None, "categories": []}
    try:
        from torch.cuda import _memory_viz as viz
        have_viz = hasattr(viz, "trace")
    except Exception:
        have_viz = False
    trace_text = viz.trace(snapshot) if have_viz and not segments_only else None
    per_device = re.split(r"^Device (\d+) -+$", trace_text, flags=re.M)[1:] if trace_text else []
    printed = {int(per_device[i]): per_device[i + 1] for i in range(0, len(per_device), 2)}
    for d, entries in enumerate(snapshot["device_traces"]):
        peak, by_cat = timeline(snapshot, d)
        text = printed.get(d)
        allocs = entries_n = None
        if text is not None:
            entries_n = int(re.search(r"^(\d+) entries$", text, flags=re.M).group(1))
            # `n = seg_0[offset:size]` or `n = MEM[addr:size]`: one line per alloc
            allocs = len(re.findall(r"^\w+ = (?!cudaMalloc)\S+\[", text, flags=re.M))
        out["devices"].append({"device": d, "peak": peak, "by_category": by_cat,
                               "trace_allocations": allocs, "trace_entries": entries_n})
        for e in entries:
            c = e.get("category")
            if c is not None and c not in out["categories"]:
                out["categories"].append(c)
    if have_viz:
        m = re.search(r"^total_allocated: (\S+)$", viz.segsum(snapshot), flags=re.M)
        out["stats_total_allocated"] = m.group(1) if m else None
        live_at_end = 0
        for seg in snapshot["segments"]:
            for b in seg["blocks"]:
                if b["state"] == "active_allocated":
                    live_at_end += requested(b)
        out["format_bytes"] = repr(viz.Bytes(live_at_end))
    return out


def main(paths):
    for path in paths:
        json.dump(read(path), sys.stdout)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
