"""ctypes binding of the adprof context API (profiler/include/adprof/context.h).

Under `adprof run`, libadprof_preload.so is preloaded and defines the adprof_* symbols in the
process, so they are found with ctypes.CDLL(None). When they are absent, or the interposer is
not recording (adprof_active() == 0), every function here is a no-op that allocates nothing:
code may call them unconditionally.

Functions take and return plain ints. Pointers are addresses (int), 0 for NULL.
"""

import ctypes
import os
import threading

from . import _protocol as P

_MAX_RANK = 32  # shapes longer than this are described by their first 32 extents
_MAX_VALUES = 32  # an annotation's values (context.h, adprof_annotate)


def _noop(*_args):
    return 0


class Context:
    """The context API of this process: real functions when recording, no-ops otherwise.

    Attributes op_begin, op_end, set_phase, set_role, retag, step, label, content_hash,
    track_alloc, track_free and device_memory_is_reserve are the C functions themselves (ctypes
    function pointers with their argument types set) so that hot callers can bind them to
    locals.
    """

    def __init__(self, lib=None):
        self._names = {}
        self._names_lock = threading.Lock()
        self._shape_buffers = threading.local()
        self._value_buffers = threading.local()
        self.active = False
        fns = _bind(lib) if lib is not None else _find()
        if fns is not None and fns["adprof_active"]() == 1:
            self.active = True
            self._fn = fns
            self._adprof_name = fns["adprof_name"]
            self.op_begin = fns["adprof_op_begin"]
            self.op_end = fns["adprof_op_end"]
            self.set_phase = fns["adprof_set_phase"]
            self.set_role = fns["adprof_set_role"]
            self.retag = fns["adprof_retag"]
            self.step = fns["adprof_step"]
            self.label = fns["adprof_label"]
            self.content_hash = fns["adprof_content_hash"]
            self.track_alloc = fns["adprof_track_alloc"]
            self.track_free = fns["adprof_track_free"]
            self.device_memory_is_reserve = fns["adprof_device_memory_is_reserve"]
            self._describe = fns["adprof_describe"]
            self._annotate = fns["adprof_annotate"]
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=self._after_fork_in_child)
        else:
            self.op_begin = self.op_end = self.set_phase = self.set_role = _noop
            self.retag = self.step = self.label = self.content_hash = _noop
            self.track_alloc = self.track_free = self.device_memory_is_reserve = _noop

    def _after_fork_in_child(self):
        """A fork child records into a trace of its own from the fork on (docs/RECORDING.md):
        these functions reach it as they are, and the name ids cached here stay valid (the
        child's trace defines every name its parent had). Only a lock another thread held at
        the fork (interning a name, the GIL released in the C call) would be held for good."""
        self._names_lock = threading.Lock()

    def name(self, text):
        """The name id of `text` (interned once per process; cached here). 0 when inert."""
        ident = self._names.get(text)
        if ident is None:
            if not self.active:
                return 0
            with self._names_lock:
                ident = self._names.get(text)
                if ident is None:
                    ident = self._adprof_name(text.encode("utf-8", "replace"))
                    self._names[text] = ident
        return ident

    def describe(self, ptr, dtype, shape):
        """dtype: a DTYPE_* value; shape: a sequence of ints (at most 32 are recorded)."""
        if not self.active or not ptr:
            return
        buf = getattr(self._shape_buffers, "buf", None)
        if buf is None:
            buf = self._shape_buffers.buf = (ctypes.c_int64 * _MAX_RANK)()
        rank = len(shape)
        if rank > _MAX_RANK:
            shape, rank = tuple(shape)[:_MAX_RANK], _MAX_RANK
        buf[:rank] = shape
        self._describe(ptr, dtype, rank, buf)

    def annotate(self, kind, values):
        """kind: a name (str) or a name id; values: up to 32 ints (a negative one is sent as
        its two's complement: ctypes stores an int in a c_uint64 modulo 2**64)."""
        if not self.active:
            return
        kind_id = self.name(kind) if isinstance(kind, str) else kind
        buf = getattr(self._value_buffers, "buf", None)
        if buf is None:  # one per thread: the C call copies the values into the trace
            buf = self._value_buffers.buf = (ctypes.c_uint64 * _MAX_VALUES)()
        count = len(values)
        if count > _MAX_VALUES:
            values, count = values[:_MAX_VALUES], _MAX_VALUES
        buf[:count] = values
        self._annotate(kind_id, buf, count)

    def describe_engine(self, name, version):
        """ad_protocol.h's adprof_ad_describe_engine: the "ad.engine" event."""
        self.annotate(P.AD_ENGINE, [P.AD_PROTOCOL_VERSION, self.name(name), self.name(version)])


_SIGNATURES = {
    # name: (restype, argtypes), as context.h declares them
    "adprof_active": (ctypes.c_int, []),
    "adprof_name": (ctypes.c_uint32, [ctypes.c_char_p]),
    "adprof_op_begin": (None, [ctypes.c_uint32, ctypes.c_uint64]),
    "adprof_op_end": (None, []),
    "adprof_set_phase": (ctypes.c_int, [ctypes.c_int]),
    "adprof_set_role": (ctypes.c_int, [ctypes.c_int]),
    "adprof_retag": (None, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]),
    "adprof_step": (None, [ctypes.c_uint64]),
    "adprof_label": (None, [ctypes.c_void_p, ctypes.c_uint32]),
    "adprof_describe": (None, [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32,
                               ctypes.POINTER(ctypes.c_int64)]),
    "adprof_content_hash": (None, [ctypes.c_void_p, ctypes.c_uint64]),
    "adprof_annotate": (None, [ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint32]),
    "adprof_track_alloc": (None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.c_uint32]),
    "adprof_track_free": (None, [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]),
    "adprof_device_memory_is_reserve": (None, []),
}


def _bind(lib):
    fns = {}
    try:
        for symbol, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, symbol)
            fn.restype = restype
            fn.argtypes = argtypes
            fns[symbol] = fn
    except AttributeError:
        return None
    return fns


def _find():
    try:
        return _bind(ctypes.CDLL(None))
    except OSError:
        return None


_process_context = None
_process_context_lock = threading.Lock()


def _renew_process_context_lock():
    global _process_context_lock  # a fork child's own (another thread may have held it)
    _process_context_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_process_context_lock)


def context():
    """The process's Context (made once)."""
    global _process_context  # the one binding of the process, made on first use
    if _process_context is None:
        with _process_context_lock:
            if _process_context is None:
                _process_context = Context()
    return _process_context
