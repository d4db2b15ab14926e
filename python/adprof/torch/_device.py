"""CUDA storages as adprof device blocks, each with its role.

PyTorch's caching allocator takes segments from cudaMalloc and cuts a block out of them for
each storage; no C-level call marks a block's birth or death. The instrumentation tells the
interposer (adprof_device_memory_is_reserve) to record PyTorch's cudaMalloc calls as
DEVICE_SEGMENT, reserved memory, so that a segment's bytes are not counted again beside its
blocks; without the ledger they stay DEVICE_RAW, the only device memory known. This ledger
declares each CUDA storage as an ADPROF_SPACE_DEVICE_BLOCK block (adprof_track_alloc) the first
time the instrumentation sees it, so that retag, label and describe name it like a CPU storage,
and declares its end (adprof_track_free) when the storage itself dies, from a weak reference to
its Python object.

That needs PyTorch to keep a storage's Python object for as long as the storage lives, whoever
holds it (autograd's saved variables hold storages from C++): PyObject preservation for
storages, PyTorch 2.x. `supported()` checks that property itself rather than a version. Without
it (1.13) CUDA storages are not declared, and their memory is recorded by segment only.
"""

import gc
import threading
import weakref

import torch

from .. import _protocol as P


def supported():
    """True when a storage's Python object lives exactly as long as the storage."""
    if not hasattr(torch.Tensor, "untyped_storage"):
        return False
    t = torch.empty(1)
    ref = weakref.ref(t.untyped_storage())
    gc.collect()
    kept = ref() is not None  # no Python reference left to the object, the tensor alive
    del t
    gc.collect()
    return kept and ref() is None  # and it went with the storage


class DeviceBlocks:
    """The device storages declared to adprof and not yet dead: address -> (device, weakref)."""

    def __init__(self, ctx, space=P.SPACE_DEVICE_BLOCK):
        self.ctx = ctx
        self.space = space
        self.live = {}
        self.lock = threading.Lock()

    def address(self, t):
        """The storage address of `t`, declared as a block (in the thread's current context)
        the first time it is seen; 0 for a storage without memory."""
        s = t.untyped_storage()
        ptr = s.data_ptr()
        if not ptr:
            return 0
        with self.lock:
            if ptr in self.live:
                return ptr
            device = t.get_device()
            device = device if device >= 0 else 0
            self.live[ptr] = (device, weakref.ref(s, self._dead_callback(ptr)))
        self.ctx.track_alloc(ptr, s.nbytes(), self.space, device)
        return ptr

    def _dead_callback(self, ptr):
        def dead(ref):
            with self.lock:
                entry = self.live.get(ptr)
                if entry is None or entry[1] is not ref:
                    return  # a later storage at the same address is not this one
                del self.live[ptr]
            try:
                self.ctx.track_free(ptr, self.space, entry[0])
            except Exception:  # at interpreter shutdown ctypes may be half torn down
                pass
        return dead
