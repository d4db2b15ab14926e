#!/usr/bin/env python3
"""Writes the hand-made PyTorch memory snapshots of tests/torch_snapshot/data/.

Each is what `torch.cuda.memory._dump_snapshot` writes (`pickle.dump` of a dict with
`segments` and `device_traces`, layout: torch/cuda/memory.py, `_snapshot`), small and made by
hand, for one case each; torch_snapshot_test.cpp says what adprof must read from each. Only the
standard library is needed: `python3 tests/torch_snapshot/make_snapshots.py` rewrites them.
"""
import collections
import os
import pickle
import sys

MiB = 1 << 20
BASE = 0x7F0000000000
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def frame(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


CPP = frame("/pytorch/c10/cuda/CUDACachingAllocator.cpp", 1234, "c10::cuda::malloc")
LINEAR = frame("/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125, "forward")


def user(line, name):
    return frame("/home/me/train.py", line, name)


def entry(action, addr, size, t, frames=(), **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
         "frames": list(frames)}
    e.update(extra)
    return e


def freed(addr, size, t, frames=()):
    return [entry("free_requested", addr, size, t, frames),
            entry("free_completed", addr, size, t + 1, frames)]


def basic():
    """Live over time (MiB): E 3 and F 0.5 before the trace; +A 4 (parameter), +B 8 (PyTorch's
    activation: forward_cache), +C 2 (user_metadata optimizer_state): the peak, 17.5; -B;
    +D 1 (user_metadata, a label); -E. Reserved: one 20 MiB segment."""
    a, b, c, d = BASE, BASE + 4 * MiB, BASE + 12 * MiB, BASE + 14 * MiB
    e_addr, f_addr = BASE + 64 * MiB, BASE + 15 * MiB
    trace = [entry("segment_alloc", BASE, 20 * MiB, 1000, [CPP]),
             entry("alloc", a, 4 * MiB, 1100, [CPP, LINEAR, user(12, "build")], category="parameter"),
             entry("alloc", b, 8 * MiB, 1200, [CPP, user(20, "forward")], category="activation"),
             entry("alloc", c, 2 * MiB, 1300, [user(31, "step")], user_metadata="optimizer_state"),
             *freed(b, 8 * MiB, 1400, [CPP, user(20, "forward")]),
             entry("alloc", d, 1 * MiB, 1500, [user(40, "embed")], user_metadata="encoder.embedding"),
             *freed(e_addr, 3 * MiB, 1600, [user(5, "load")])]
    seg = {"device": 0, "address": BASE, "total_size": 20 * MiB, "allocated_size": 7 * MiB + MiB // 2,
           "active_size": 7 * MiB + MiB // 2, "requested_size": 7 * MiB + MiB // 2, "stream": 0,
           "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
           "blocks": [
               {"address": a, "size": 4 * MiB, "requested_size": 4 * MiB, "state": "active_allocated",
                "frames": [CPP, LINEAR, user(12, "build")]},
               {"address": b, "size": 8 * MiB, "requested_size": 0, "state": "inactive", "frames": []},
               {"address": c, "size": 2 * MiB, "requested_size": 2 * MiB, "state": "active_allocated",
                "frames": [user(31, "step")]},
               {"address": d, "size": 1 * MiB, "requested_size": 1 * MiB, "state": "active_allocated",
                "frames": [user(40, "embed")]},
               {"address": f_addr, "size": MiB, "requested_size": MiB // 2,
                "state": "active_allocated", "frames": [user(3, "setup")]},
               {"address": f_addr + MiB, "size": 4 * MiB, "requested_size": 0, "state": "inactive",
                "frames": []}]}
    return {"segments": [seg], "device_traces": [trace], "allocator_settings": {"PYTORCH": 1}}


def scaled(factor):
    """One 100 * factor MiB buffer after a 10 MiB parameter: for diff and check."""
    size = int(100 * MiB * factor)
    trace = [entry("alloc", BASE, 10 * MiB, 10, category="parameter"),
             entry("alloc", BASE + 16 * MiB, size, 20, category="activation"),
             *freed(BASE + 16 * MiB, size, 30)]
    return {"segments": [], "device_traces": [trace]}


def oom():
    """1 GiB reserved and allocated, then an OOM asking for 2 GiB with 512 MiB free in CUDA."""
    trace = [entry("segment_alloc", BASE, 1024 * MiB, 5),
             entry("alloc", BASE, 1024 * MiB, 10, [user(7, "grow")], category="activation"),
             {"action": "oom", "size": 2048 * MiB, "device_free": 512 * MiB, "stream": 0,
              "time_us": 20, "frames": [user(8, "grow")]}]
    return {"segments": [], "device_traces": [trace]}


def no_frames():
    """No frames, no times, no categories: 1 MiB then 2 MiB live, the first freed."""
    trace = [{"action": "alloc", "addr": BASE, "size": MiB, "stream": 0},
             {"action": "alloc", "addr": BASE + MiB, "size": 2 * MiB, "stream": 0},
             {"action": "free_completed", "addr": BASE, "size": MiB, "stream": 0}]
    return {"segments": [], "device_traces": [trace]}


def unknown_action():
    """Actions adprof does not know (and entries that are not dicts) among known ones."""
    trace = [entry("alloc", BASE, 3 * MiB, 1),
             entry("segment_mystery", BASE, 99 * MiB, 2),
             {"no_action": True},
             42,
             entry("snapshot", 0, 0, 3),
             entry("alloc", BASE + 4 * MiB, MiB, 4),
             *freed(BASE, 3 * MiB, 5)]
    return {"segments": [], "device_traces": [trace]}


def two_devices():
    """Device 0 and device 1, interleaved in time: 1 MiB (dev 0), 2 MiB (dev 1), -1 MiB."""
    d0 = [entry("alloc", BASE, MiB, 10), *freed(BASE, MiB, 30)]
    d1 = [entry("alloc", BASE + (1 << 40), 2 * MiB, 20)]
    return {"segments": [], "device_traces": [d0, d1]}


def segments_only():
    """PyTorch 1.13: a list of segments; blocks without addresses, sizes in their history."""
    return [{"device": 0, "address": BASE, "total_size": 8 * MiB, "allocated_size": 3 * MiB,
             "active_size": 3 * MiB, "stream": 0, "segment_type": "large",
             "blocks": [{"size": 2 * MiB, "state": "active_allocated",
                         "history": [{"addr": BASE, "real_size": 2 * MiB - 100,
                                      "frames": [user(1, "a")]}]},
                        {"size": 5 * MiB, "state": "inactive", "history": []},
                        {"size": MiB, "state": "active_allocated",
                         "history": [{"addr": BASE + 7 * MiB, "real_size": MiB,
                                      "frames": [user(2, "b")]}]}]}]


def annotate():
    """X 1 MiB then annotated "parameter" (a role: retagged); Y 2 MiB annotated "decoder.out"
    (a label)."""
    trace = [entry("alloc", BASE, MiB, 1),
             {"action": "annotate", "addr": BASE, "size": MiB, "stream": 0, "time_us": 2,
              "user_metadata": "parameter"},
             entry("alloc", BASE + MiB, 2 * MiB, 3),
             {"action": "annotate", "addr": BASE + MiB, "size": 2 * MiB, "stream": 0,
              "time_us": 4, "user_metadata": "decoder.out"}]
    return {"segments": [], "device_traces": [trace]}


def expandable():
    """Expandable segments: map 8 MiB, unmap 2 MiB from its middle, map 4 MiB more: reserved
    8, 6, then 10 MiB (12 if the partial unmap freed nothing)."""
    trace = [entry("segment_map", BASE, 8 * MiB, 1),
             entry("segment_unmap", BASE + 2 * MiB, 2 * MiB, 2),
             entry("segment_map", BASE + 8 * MiB, 4 * MiB, 3),
             entry("segment_unmap", BASE, 2 * MiB, 4)]
    return {"segments": [], "device_traces": [trace]}


def categories():
    """One live block per category, sizes powers of two MiB: parameter 1, input 2, activation
    4, gradient 8, autograd_detail 16, temporary 32, optimizer_state 64, unknown 128, and a
    category PyTorch does not have, 256."""
    names = ["parameter", "input", "activation", "gradient", "autograd_detail", "temporary",
             "optimizer_state", "unknown", "weird"]
    trace = [entry("alloc", BASE + (i << 30), (1 << i) * MiB, i, category=n)
             for i, n in enumerate(names)]
    return {"segments": [], "device_traces": [trace]}


def peak_roles():
    """Roles and labels that change after a peak, on a device (0) and on adprof's host heap (1:
    the `adprof` dict names it "host"), each with its own peak. Each memory: A 4 MiB activation
    and B 2 MiB parameter (a first peak, 6 MiB); A annotated "optimizer_state" (retagged) and B
    "decoder.w" (labelled); -B; D 1 MiB activation annotated "parameter", -D; +C 4 MiB
    activation (the peak, 8 MiB: A and C); then C annotated "parameter" and A "encoder.x". A
    snapshot exported again keeps each block's category and label at its memory's peak where
    it was live there (A optimizer_state without a label, C activation), else its last (B
    labelled, D parameter)."""
    def memory(base, t):
        def note(addr, size, at, meta):
            return {"action": "annotate", "addr": addr, "size": size, "stream": 0, "time_us": at,
                    "user_metadata": meta}
        a, b, c, d = base, base + 4 * MiB, base + 8 * MiB, base + 12 * MiB
        return [entry("alloc", a, 4 * MiB, t + 1, category="activation"),
                entry("alloc", b, 2 * MiB, t + 2, category="parameter"),
                note(a, 4 * MiB, t + 3, "optimizer_state"),
                note(b, 2 * MiB, t + 4, "decoder.w"),
                *freed(b, 2 * MiB, t + 5),
                entry("alloc", d, MiB, t + 7, category="activation"),
                note(d, MiB, t + 8, "parameter"),
                *freed(d, MiB, t + 9),
                entry("alloc", c, 4 * MiB, t + 11, category="activation"),
                note(c, 4 * MiB, t + 12, "parameter"),
                note(a, 4 * MiB, t + 13, "encoder.x")]
    # The host's events come after the device's, interleaved by time; each memory has its peak.
    return {"segments": [], "device_traces": [memory(BASE, 0), memory(BASE + 64 * MiB, 5)],
            "adprof": {"schema": "adprof.torch_snapshot", "version": 1, "categories": "roles",
                       "devices": ["device 0", "host"]}}


def huge():
    """65 blocks of 2^56 bytes: more than the 2^62 bytes adprof's totals are bounded by."""
    trace = [entry("alloc", i << 57, 1 << 56, i) for i in range(65)]
    return {"segments": [], "device_traces": [trace]}


def main():
    os.makedirs(OUT, exist_ok=True)

    def dump(name, obj, protocol=4):
        with open(os.path.join(OUT, name), "wb") as f:
            pickle.dump(obj, f, protocol=protocol)

    dump("basic.pickle", basic())
    for p in (2, 3, 5):
        dump("basic_protocol%d.pickle" % p, basic(), p)
    dump("protocol0.pickle", basic(), 0)
    dump("empty.pickle", {"segments": [], "device_traces": []})
    dump("oom.pickle", oom())
    dump("no_frames.pickle", no_frames())
    dump("unknown_action.pickle", unknown_action())
    dump("two_devices.pickle", two_devices())
    dump("annotate.pickle", annotate())
    dump("expandable.pickle", expandable())
    dump("categories.pickle", categories())
    dump("huge.pickle", huge())
    dump("peak_roles.pickle", peak_roles())
    dump("segments_only.pickle", segments_only())
    dump("before.pickle", scaled(1.0))
    dump("after.pickle", scaled(1.1))
    dump("not_snapshot.pickle", {"hello": [1, 2, 3]})
    dump("object.pickle", {"segments": collections.OrderedDict(), "device_traces": []})
    whole = pickle.dumps(basic(), protocol=4)
    with open(os.path.join(OUT, "damaged.pickle"), "wb") as f:
        f.write(whole[: len(whole) // 2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
