"""What the PyTorch hook points share: the thread's state, the guard that keeps an error of ours
out of the program, the dtype table, storage addresses, and a scope where our own tensor work
is seen by no dispatch mode."""

import functools
import sys
import threading

import torch

from .. import _protocol as P

Tensor = torch.Tensor

_DTYPES = {
    torch.float32: P.DTYPE_F32,
    torch.float64: P.DTYPE_F64,
    torch.int32: P.DTYPE_I32,
    torch.int64: P.DTYPE_I64,
    torch.bool: P.DTYPE_BOOL,
}

# True while torch.compile traces (the code it traces then runs as its graph, not as Python)
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)


def storage_ptr(t):
    """The address of the block that holds t's storage (its base's for a view), from the
    tensor's own data pointer: asking the storage itself (untyped_storage()) would give it a
    Python object that PyTorch then keeps for as long as the storage lives, and the thread that
    drops the storage last (a backend's) would need the GIL to release it (_ddp.py)."""
    ptr = t.data_ptr()
    return ptr - t.storage_offset() * t.element_size() if ptr else 0


def _call(fn, *args):
    return fn(*args)


class OutsideDynamo:
    """Calls the instrumentation where torch.compile never traces it: the dispatch mode, and the
    hooks a compiled function may call (the optimizer's step hooks when the program compiles its
    step), which would otherwise be traced, or compiled frame by frame around their graph
    breaks (our ctypes calls): that changed what the program computed and recompiled our
    functions. Under torch._dynamo.disable, and only once the program has imported
    torch._dynamo: before that no frame can be compiled (only dynamo sets the frame-evaluation
    callback it traces from), and importing it ourselves costs about 2 s and tens of MB."""

    __slots__ = ("trampoline",)

    def __init__(self):
        self.trampoline = None  # _call under torch._dynamo.disable, once needed

    def __call__(self, fn, *args):
        run = self.trampoline
        if run is None:
            disable = getattr(sys.modules.get("torch._dynamo"), "disable", None)
            if disable is None:
                return fn(*args)
            run = self.trampoline = disable(_call, recursive=True)
        return run(fn, *args)


class _NoDispatch:
    """No dispatch mode (ours or the program's) sees the ops run inside: the instrumentation's
    own tensor work. The guard is RAII on 1.13 (alive = on), a context manager on later ones."""

    __slots__ = ("guard",)

    def __enter__(self):
        self.guard = torch._C._DisableTorchDispatch()
        if hasattr(self.guard, "__enter__"):
            self.guard.__enter__()
        return self

    def __exit__(self, *exc):
        if hasattr(self.guard, "__exit__"):
            self.guard.__exit__(*exc)
        self.guard = None
        return False


def accumulate_grad_node(p):
    """The AccumulateGrad node of the leaf `p` (where its gradient is summed into p.grad),
    reached through a view's grad_fn as PyTorch's own DDP Reducer reaches it. The view is
    adprof's own work (no dispatch mode sees it; the caller has its thread's recording off). A
    node stays p's only while something holds it: the caller keeps it for as long as it must."""
    with _NoDispatch():
        return p.expand_as(p).grad_fn.next_functions[0][0]


def _guarded(fallback=None):
    """A hook method that never raises into the program: an error is reported once per hook
    (one line on stderr) and the hook returns `fallback`."""
    def wrap(method):
        @functools.wraps(method)
        def guarded(self, *args):
            try:
                return method(self, *args)
            except Exception as e:
                self._internal_error(method.__name__, e)
                return fallback
        return guarded
    return wrap


class _ThreadState(threading.local):
    """What one thread is doing. `phase` is what adprof was last told for this thread."""

    def __init__(self):
        self.phase = P.PHASE_OTHER
        self.modules = []  # (module, path, path name id), outermost first
        self.backward = 0  # nesting depth of backward calls on this thread
        self.optimizer = 0  # nesting depth of optimizer steps
        # > 0: a forward recomputed inside backward (checkpointing), recorded as forward
        self.recompute = 0
        self.recompute_depth = None  # module stack depth of a module-started recomputation
        self.capture = None  # list: the tensors made while a recomputation's pack hook runs
        # the saved_tensors_hooks scopes entered on this thread, innermost last:
        # (id of the program's hooks object, whether it opened a recomputation)
        self.hook_scopes = []
        self.off = 0  # > 0: the instrumentation's own tensor work, not recorded as ops
        # backward: the module path (name id) of the autograd node running on this thread, the
        # module whose forward made the node (0: none, or between nodes)
        self.node_label = 0
        # forward: the autograd nodes labelled since the top-level module was entered
        self.labelled_nodes = set()
        # 1.13: the mode set directly (raw), its twin for the stack, and which one is in use
        self.raw = None
        self.twin = None
        self.raw_active = False
        self.mode = None  # 2.x: the mode of this thread on the dispatch stack
        self.suspended = False  # the mode is off the stack (an optimizer step, _suspend_mode)
        # the role around the optimizer step's op scope, while one is open (_step_scope)
        self.step_scope = None
        self.in_collective = False  # a collective runs, our saved-tensor hooks off (_collective)
        self.compile_scope = None  # (role, phase) around a compilation's op scope (_compile.py)
        # A thread Python did not start (an autograd device thread): runs backward work.
        self.native = isinstance(threading.current_thread(), threading._DummyThread)


def _tensors_in(args):
    """The tensors among an op's arguments (one level of lists: aten::cat's inputs)."""
    out = []
    for a in args:
        if isinstance(a, Tensor):
            out.append(a)
        elif type(a) in (list, tuple):
            for b in a:
                if isinstance(b, Tensor):
                    out.append(b)
    return out
