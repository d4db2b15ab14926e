"""The device-block ledger (python/adprof/torch/_device.py) follows each storage's life exactly.

The ledger does not care which device a storage is on, so CPU storages stand in for CUDA ones
here (no GPU needed): a fake context records what the ledger declares. Checks, in order:
declared once at first sight, a view names the same block, the block ends when the last view
dies and not before, a storage only autograd holds (a saved result) ends when backward releases
it, and a new storage at a reused address is a new block.

Exit status: 0 all checks hold, 1 one failed (it says which), 3 this PyTorch cannot follow a
storage's life (1.13: no PyObject preservation for storages), so the ledger is off.
"""
import gc
import sys

import torch

from adprof import _protocol as P
from adprof.torch import _device


class FakeContext:
    def __init__(self):
        self.calls = []

    def track_alloc(self, ptr, size, space, device):
        self.calls.append(("alloc", ptr, size, space, device))

    def track_free(self, ptr, space, device):
        self.calls.append(("free", ptr, space, device))


def check(ok, what):
    if not ok:
        print("device_blocks_check: FAILED: " + what)
        sys.exit(1)


def main():
    if not _device.supported():
        print("device_blocks_check: PyTorch %s keeps no storage's Python object alive with the "
              "storage; the ledger is off" % torch.__version__)
        return 3
    ctx = FakeContext()
    ledger = _device.DeviceBlocks(ctx)

    t = torch.zeros(1000)
    ptr = ledger.address(t)
    check(ptr == t.untyped_storage().data_ptr(), "the address is the storage's")
    check(ctx.calls == [("alloc", ptr, 4000, P.SPACE_DEVICE_BLOCK, 0)],
          "first sight declares one block of the storage's size: %r" % ctx.calls)
    view = t[100:200]
    check(ledger.address(view) == ptr and len(ctx.calls) == 1, "a view names the same block")
    del t
    gc.collect()
    check(len(ctx.calls) == 1, "the block outlives the tensor while a view holds the storage")
    del view
    gc.collect()
    check(ctx.calls[1:] == [("free", ptr, P.SPACE_DEVICE_BLOCK, 0)],
          "the block ends with the last view: %r" % ctx.calls)

    ctx.calls.clear()
    x = torch.randn(2000, requires_grad=True)
    y = x.exp()  # exp saves its result for backward
    saved = ledger.address(y)
    loss = y.sum()
    del y
    gc.collect()
    check(ctx.calls == [("alloc", saved, 8000, P.SPACE_DEVICE_BLOCK, 0)],
          "autograd's saved result stays a live block: %r" % ctx.calls)
    loss.backward()
    gc.collect()
    check(ctx.calls[1:] == [("free", saved, P.SPACE_DEVICE_BLOCK, 0)],
          "backward releasing the saved result ends the block: %r" % ctx.calls)

    ctx.calls.clear()
    blocks = []
    for _ in range(50):  # the allocator hands a freed address out again
        a = torch.empty(4096)
        blocks.append(ledger.address(a))
        del a
        gc.collect()
    allocs = [c for c in ctx.calls if c[0] == "alloc"]
    frees = [c for c in ctx.calls if c[0] == "free"]
    check(len(allocs) == 50 and len(frees) == 50 and not ledger.live,
          "each storage at a reused address is its own block: %d declared, %d ended, %d live"
          % (len(allocs), len(frees), len(ledger.live)))
    for i in range(0, len(ctx.calls), 2):
        check(ctx.calls[i][0] == "alloc" and ctx.calls[i + 1][0] == "free" and
              ctx.calls[i][1] == ctx.calls[i + 1][1], "alloc then free, by address")
    print("device_blocks_check: ok (%d storages followed, %d distinct addresses)"
          % (len(allocs) + 2, len(set(blocks))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
