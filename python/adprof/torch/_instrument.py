"""The PyTorch instrumentation: what autograd and the modules do, told to adprof as it happens.

One Instrumentation object per process (install()). Its parts, each a PyTorch hook point:
- a TorchDispatchMode: every ATen op runs in an op scope named as PyTorch names it
  ("aten::addmm"), with role workspace inside; the storages the op creates are then retagged
  to their role (activation in forward, adjoint in backward, duplicate for copies), labelled
  with the module path and described (dtype, shape);
- global module forward pre/post hooks: the module path ("model.layers.2.mlp.fc1"), the
  parameters (first seen: parameter role, labelled with their path), the batch (input role),
  the forward phase;
- saved-tensor hooks: exactly what autograd saves becomes forward_cache, and returns to
  activation when autograd drops it (a count per storage);
- wrappers of torch.autograd.backward/grad and Tensor.backward (backward phase), of
  Optimizer.step (optimizer phase, steps; global step hooks on PyTorch 2), of zero_grad, and a
  tracking dict for optimizer.state (optimizer_state role the moment a tensor is stored there).
Every call into the tape listener (_tape.py) is guarded: nothing here raises into the program.

Storage addresses: a CPU storage's data pointer is the block the interposer recorded
(posix_memalign in c10::alloc_cpu), which is what retag, label and describe name. A CUDA
storage is a block of the caching allocator's segments: _device.py declares it to adprof as a
device block the first time it is seen and ends it when the storage dies (PyTorch 2.x; on 1.13
device memory is recorded by segment only). _addr() gives the address to name either way.
"""

import collections
import functools
import inspect
import itertools
import sys
import threading
import weakref

import torch
import torch.utils._python_dispatch as _python_dispatch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import _protocol as P
from . import _device
from ._tape import TapeListener

Tensor = torch.Tensor

_DTYPES = {
    torch.float32: P.DTYPE_F32,
    torch.float64: P.DTYPE_F64,
    torch.int32: P.DTYPE_I32,
    torch.int64: P.DTYPE_I64,
    torch.bool: P.DTYPE_BOOL,
}
_NARROW_INDEX_DTYPES = (torch.int32, torch.int16, torch.int8, torch.uint8)

# What an op's new storages are, beyond its phase's role.
_OP_PLAIN, _OP_COPY, _OP_CAST = 0, 1, 2
_COPY_OPS = {"aten::clone": _OP_COPY, "aten::_to_copy": _OP_CAST, "aten::to": _OP_CAST,
             "aten::contiguous": _OP_COPY, "aten::lift_fresh_copy": _OP_COPY}

# Feature detection (PyTorch 1.13 vs 2.x).
if hasattr(Tensor, "untyped_storage"):  # 2.0+
    def storage_ptr(t):
        return t.untyped_storage().data_ptr()
else:  # 1.13: _storage() is the untyped storage (storage() builds a TypedStorage, 10x slower)
    def storage_ptr(t):
        return t._storage().data_ptr()



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


_HAS_POST_ACCUMULATE_HOOK = hasattr(Tensor, "register_post_accumulate_grad_hook")  # 2.1+
# 2.x: the autograd sequence number the next node made on this thread will have
_next_sequence_nr = getattr(torch._C._autograd, "_get_sequence_nr", None)
_optim_module = sys.modules.get("torch.optim.optimizer") or __import__(
    "torch.optim.optimizer", fromlist=["Optimizer"])
_HAS_GLOBAL_STEP_HOOKS = hasattr(_optim_module, "register_optimizer_step_pre_hook")  # 2.0+
# 1.13 runs a stack of dispatch modes through a Python helper mode that pops and pushes the
# stack around every op (about 11 us an op, half of the instrumentation's cost). There the mode
# is set directly as the C++-level mode while no other mode is pushed (see _RawMode).
_RAW_MODE = hasattr(_python_dispatch, "_TorchDispatchStackMode") and hasattr(
    torch._C, "_set_torch_dispatch_mode")


# torch.compile traces the global module hooks into its graphs: there ours do nothing (a call
# into adprof would break the graph, and a graph broken in two computes differently). The
# compiled model's wrapper is called eagerly: its hooks stand for the model's call (its path,
# parameters, batch, forward phase); the modules inside run as one compiled graph.
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)


def _compiled_wrapper_of(module):
    """The module a torch.compile wrapper (OptimizedModule) runs, or None. The wrapper is not a
    module of the user's model: it takes the path of the module it wraps."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    wrapper = getattr(eval_frame, "OptimizedModule", None) if eval_frame is not None else None
    if wrapper is not None and isinstance(module, wrapper):
        inner = getattr(module, "_orig_mod", None)
        return inner if isinstance(inner, torch.nn.Module) else None
    return None


def _parallel_wrapper_of(module):
    """The module DataParallel or DistributedDataParallel runs, or None: the wrapper takes the
    path of the module it wraps, so labels do not change when a script wraps its model."""
    parallel = getattr(torch.nn, "parallel", None)
    kinds = tuple(k for k in (getattr(torch.nn, "DataParallel", None),
                              getattr(parallel, "DistributedDataParallel", None)) if k)
    if kinds and isinstance(module, kinds):
        inner = getattr(module, "module", None)
        return inner if isinstance(inner, torch.nn.Module) else None
    return None


def _model_holding(main, module):
    """The largest model held by a variable of __main__ that has `module` among its submodules
    (not as itself), unwrapped (compile, DDP); None if none."""
    best, best_size = None, 0
    for key, value in list(vars(main).items()):
        if key.startswith("_") or not isinstance(value, torch.nn.Module):
            continue
        value = _compiled_wrapper_of(value) or _parallel_wrapper_of(value) or value
        if value is module:
            continue
        try:
            subs = [sub for _, sub in value.named_modules()]
        except Exception:  # a model whose named_modules fails is not the program's concern here
            continue
        if len(subs) > best_size and any(sub is module for sub in subs):
            best, best_size = value, len(subs)
    return best


def _call_kwargs(module):
    """The keyword arguments of the call of `module` whose global forward pre-hook is running.
    Global pre-hooks get the positional arguments alone, and Hugging Face models take their
    batch by keyword (model(input_ids=..., labels=...)): found in nn.Module's call frame (its
    `_call_impl`, or the `inner` closure 2.x runs the hooks in), never changed."""
    frame = sys._getframe(1)
    for _ in range(8):
        frame = frame.f_back
        if frame is None:
            break
        if frame.f_code.co_name in ("_call_impl", "inner"):
            local = frame.f_locals
            if local.get("self") is module:
                kwargs = local.get("kwargs")
                return kwargs if isinstance(kwargs, dict) else {}
    return {}


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
        # A thread Python did not start (an autograd device thread): runs backward work.
        self.native = isinstance(threading.current_thread(), threading._DummyThread)


class _Saved:
    """What the pack hook returns: holds the saved tensor; its death is autograd's release."""

    __slots__ = ("tensor", "ptr", "token", "owner")

    def __init__(self, tensor, ptr, token, owner):
        self.tensor = tensor
        self.ptr = ptr
        self.token = token
        self.owner = owner

    def __del__(self):
        owner = self.owner
        if owner is not None:
            try:
                owner._released(self)
            except Exception:  # at interpreter shutdown the modules may be half torn down
                pass


def _empty_method(self, *args):
    pass


def _does_nothing(method):
    """True for a method whose body is `pass` (same bytecode as _empty_method's)."""
    code = getattr(getattr(method, "__func__", None), "__code__", None)
    empty = _empty_method.__code__
    return code is not None and code.co_code == empty.co_code and \
        code.co_consts[:1] == empty.co_consts[:1]


def _unpack(saved):
    return saved.tensor


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


_NUMBERS = (int, float, bool, complex)


def _wrapped_number(out, args):
    """1.13: a view of a "wrapped number" (the tensor a Python scalar operand becomes, which
    autograd saves, e.g. for `x * 0.5`) comes back from the op as a Python number, and a mode
    returning that fails the op ("detach returned invalid type float"). The view of such a
    tensor is the tensor itself (it never requires grad)."""
    if args and isinstance(args[0], Tensor) and args[0].dim() == 0:
        return args[0]
    return out


def _returns_tensor(func):
    """True for an op whose schema returns one Tensor (aten::item's returns a Scalar)."""
    try:
        returns = func._schema.returns
        return len(returns) == 1 and str(returns[0].type) == "Tensor"
    except Exception:
        return False


def _creates_storage(func):
    """False for an op that makes no storage of its own, from its schema: every Tensor it
    returns aliases an argument (a view, an in-place or out= op, detach), or it returns none."""
    try:
        schema = func._schema
        returns = schema.returns
        if "out" in schema.overload_name or "resize" in schema.name or \
                schema.name.endswith("set_"):
            return True  # may give the aliased tensor a new storage
    except Exception:
        return True
    for r in returns:
        if r.alias_info is None and "Tensor" in str(r.type):
            return True
    return False


def _any_requires_grad(args):
    for a in args:
        if isinstance(a, Tensor):
            if a.requires_grad:
                return True
        elif type(a) in (list, tuple):
            for b in a:
                if isinstance(b, Tensor) and b.requires_grad:
                    return True
    return False


class _Mode(TorchDispatchMode):
    def __init__(self, owner):
        super().__init__()
        self.owner = owner

    @classmethod
    def ignore_compile_internals(cls):
        # torch.compile compiles as it does without adprof (a mode that does not say this
        # makes it skip compiling: the program would run eagerly), and the mode sees what the
        # compiled code runs.
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.owner._dispatch(func, args, kwargs)


class _RawMode:
    """1.13: the C++-level dispatch mode itself, without the mode stack's helper. When the
    program pushes a mode of its own, the twin (_Mode) takes this one's place at the bottom of
    the stack until the program's modes are popped (Instrumentation._push_mode/_pop_mode)."""

    __slots__ = ("owner",)

    def __init__(self, owner):
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.owner._dispatch(func, args, kwargs)


class _ParamState(dict):
    """optimizer.state[p]: a tensor stored here is optimizer state from that moment on."""

    __slots__ = ("owner", "param")

    def __setitem__(self, key, value):
        dict.__setitem__(self, key, value)
        if isinstance(value, Tensor):
            self.owner._state_tensor(self.param, key, value)

    def __reduce__(self):  # pickles (optimizer checkpoints) as the plain dict it replaces
        return (dict, (dict(self),))


class _OptimizerState(collections.defaultdict):
    __slots__ = ("owner",)

    def __missing__(self, param):
        value = _ParamState()
        value.owner = self.owner
        value.param = param
        self[param] = value
        return value

    def __reduce__(self):
        return (collections.defaultdict, (dict,), None, None, iter(self.items()))


class _KeepingPack:
    """Stands in for a program's pack hook on autograd's stack of saved-tensor hooks: calls it
    and tells the instrumentation what it kept. Everything else is the program's hook's own:
    attributes read, set and deleted on the stand-in reach the hook (torch.utils.checkpoint
    sets `_user_hooks` on its hook while it is pushed and reads `_checkpoint_internal` off the
    stack's top), so code that walks the stack sees what it put there."""

    __slots__ = ("_adprof_owner", "_adprof_hook", "__weakref__")

    def __init__(self, owner, hook):
        object.__setattr__(self, "_adprof_owner", owner)
        object.__setattr__(self, "_adprof_hook", hook)

    @staticmethod
    def can_wrap(hook):
        # A module (compile's GraphModule hooks, recognised by type) is pushed as it is.
        return callable(hook) and not isinstance(hook, (torch.nn.Module, _KeepingPack))

    def __call__(self, t):
        return self._adprof_owner._kept_by_pack(self._adprof_hook, t)

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "_adprof_hook"), name)

    def __setattr__(self, name, value):
        setattr(self._adprof_hook, name, value)

    def __delattr__(self, name):
        delattr(self._adprof_hook, name)

    def __eq__(self, other):
        return self._adprof_hook == (other._adprof_hook if isinstance(other, _KeepingPack)
                                     else other)

    def __hash__(self):
        return hash(self._adprof_hook)

    def __repr__(self):
        return repr(self._adprof_hook)


class Instrumentation:
    def __init__(self, ctx, listener=None):
        self.ctx = ctx
        # The engine first: a tape listener that describes the engine further (its policies, a
        # later protocol version) comes after, and its description is the last word.
        ctx.describe_engine("pytorch", torch.__version__)
        self._on_op_wanted = True
        self.listener = listener if listener is not None else TapeListener(ctx)
        self.thread = _ThreadState()
        self.instances = itertools.count(1)
        self.ops = {}  # OpOverload -> (name id, name, kind)
        self.paths = weakref.WeakKeyDictionary()  # module -> (path, path name id)
        self.params = {}  # storage address -> weakref to the parameter
        self.param_paths = {}  # id(parameter) -> (weakref to it, path); see _param_path
        self.inputs = {}  # storage address -> weakref to the tensor given to a top-level module
        self.saved = {}  # storage address -> number of live saved references (forward_cache)
        self.saved_lock = threading.Lock()
        # weakrefs to what other pack hooks kept (their release), by id: two live weakrefs to
        # one tensor compare by the tensor's ==, which is elementwise (a set's lookup raised)
        self.kept_refs = {}
        self.grad_nodes = []  # AccumulateGrad nodes whose hooks we hold (1.13: kept alive)
        self.hooked_params = weakref.WeakSet()
        self.steps = 0  # optimizer steps done
        self.pending_step = 0  # the step number to mark when the next iteration starts
        # At most one automatic step mark between two top-level forwards: one optimizer per
        # parameter stepped from the gradient hooks (a fused step) is still one training step.
        self.next_mark = 0
        self.marked_since_forward = False
        self.saw_forward = False  # a program without modules: backward begins an iteration
        self.backward_active = 0  # backward calls in progress, all threads
        self.manual_steps = False  # profile().step() was called
        self.installed = False
        self._undo = []  # callables that remove what install() added, last first
        self._listener_failed = False
        self._errors_reported = set()
        self._modes = {}
        self._node_hooks = {}  # module path name id -> the (pre, post) hooks of its nodes
        # CUDA storages as device blocks (None: this PyTorch cannot tell when one dies)
        self.device_blocks = _device.DeviceBlocks(ctx) if _device.supported() else None
        if self.device_blocks is not None:
            # The caching allocator's cudaMalloc calls are its segments: reserved, not live
            # (the blocks declared above are what is live).
            ctx.device_memory_is_reserve()

    @property
    def listener(self):
        return self._listener

    @listener.setter
    def listener(self, listener):
        self._listener = listener
        # A listener whose on_op does nothing costs no argument lists per op.
        self._on_op_wanted = not _does_nothing(getattr(listener, "on_op", None))

    # ---------------------------------------------------------------- install / uninstall
    def install(self):
        if self.installed:
            return
        self.installed = True
        self._enter_thread()
        self._undo.append(self._leave_thread)
        mod = torch.nn.modules.module
        post_options = {}
        try:  # 2.x: also called when forward raises, so the module stack stays true
            if "always_call" in inspect.signature(mod.register_module_forward_hook).parameters:
                post_options["always_call"] = True
        except (TypeError, ValueError):
            pass
        handles = [mod.register_module_forward_pre_hook(self._module_pre),
                   mod.register_module_forward_hook(self._module_post, **post_options)]
        self._undo.append(lambda: [h.remove() for h in handles])
        if hasattr(mod, "_has_any_global_hook"):
            # torch.compile(module) warns when global module hooks exist (they would fire for
            # its wrapper too): ours skip the wrapper, so only the program's own hooks count.
            self._patch(mod, "_has_any_global_hook",
                        self._wrap_has_any_global_hook(mod._has_any_global_hook, handles))
        self._patch(torch.autograd, "backward", self._wrap_backward(torch.autograd.backward))
        self._patch(torch.autograd, "grad", self._wrap_backward(torch.autograd.grad))
        self._patch(Tensor, "backward", self._wrap_backward(Tensor.backward, method=True))
        optim = torch.optim.Optimizer
        self._patch(optim, "__init__", self._wrap_optimizer_init(optim.__init__))
        self._patch(optim, "zero_grad", self._wrap_zero_grad(optim.zero_grad))
        self._patch(optim, "state_dict", self._wrap_state_dict(optim.state_dict))
        self._patch(torch.nn.Module, "zero_grad", self._wrap_zero_grad(torch.nn.Module.zero_grad))
        if _HAS_GLOBAL_STEP_HOOKS:
            pre = _optim_module.register_optimizer_step_pre_hook(self._step_pre_hook)
            post = _optim_module.register_optimizer_step_post_hook(self._step_post_hook)
            self._undo.append(lambda: (pre.remove(), post.remove()))
        hooks_cls = torch.autograd.graph.saved_tensors_hooks
        self._patch(hooks_cls, "__enter__", self._wrap_hooks_enter(hooks_cls.__enter__))
        self._patch(hooks_cls, "__exit__", self._wrap_hooks_exit(hooks_cls.__exit__))
        self._patch(threading.Thread, "_bootstrap_inner",
                    self._wrap_thread_start(threading.Thread._bootstrap_inner))
        if _RAW_MODE:
            self._patch(_python_dispatch, "_push_mode",
                        self._wrap_push_mode(_python_dispatch._push_mode))
            self._patch(_python_dispatch, "_pop_mode",
                        self._wrap_pop_mode(_python_dispatch._pop_mode))

    @staticmethod
    def _wrap_has_any_global_hook(original, handles):
        ours = {h.id for h in handles}  # hook ids are unique across all hook dicts
        names = ("_global_backward_pre_hooks", "_global_backward_hooks",
                 "_global_forward_pre_hooks", "_global_forward_hooks",
                 "_global_forward_hooks_always_called", "_global_forward_hooks_with_kwargs")

        @functools.wraps(original)
        def _has_any_global_hook():
            if not original():
                return False
            mod = torch.nn.modules.module
            return any(k not in ours for name in names for k in getattr(mod, name, None) or ())
        return _has_any_global_hook

    def uninstall(self):
        if not self.installed:
            return
        while self._undo:
            self._undo.pop()()
        self.installed = False

    def _patch(self, owner, attr, value):
        had = attr in owner.__dict__
        old = owner.__dict__.get(attr)
        setattr(owner, attr, value)

        def undo():
            if had:
                setattr(owner, attr, old)
            else:
                delattr(owner, attr)
        self._undo.append(undo)

    def _enter_thread(self):
        th = self.thread
        mode = _Mode(self)
        if _RAW_MODE and _python_dispatch._len_torch_dispatch_stack() == 0:
            th.raw, th.twin, th.raw_active = _RawMode(self), mode, True
            torch._C._set_torch_dispatch_mode(th.raw)
        else:
            mode.__enter__()
        hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        hooks.__enter__()
        self._modes[threading.get_ident()] = (mode, hooks)

    def _leave_thread(self):
        mode, hooks = self._modes.pop(threading.get_ident(), (None, None))
        if hooks is None:
            return
        hooks.__exit__(None, None, None)
        th = self.thread
        if th.raw_active:
            torch._C._set_torch_dispatch_mode(None)
            th.raw_active = False
        elif th.twin is None:
            mode.__exit__(None, None, None)
        th.raw = th.twin = None

    def _wrap_push_mode(self, original):
        def _push_mode(mode, *args):
            th = self.thread
            if th.raw_active and mode is not th.twin and \
                    _python_dispatch._len_torch_dispatch_stack() == 0:
                th.raw_active = False
                original(th.twin)  # the stack's helper replaces the raw mode: ours goes first
            return original(mode, *args)
        return _push_mode

    def _wrap_pop_mode(self, original):
        def _pop_mode(*args):
            old = original(*args)
            th = self.thread
            twin = th.twin
            if twin is not None and old is not twin and not th.raw_active and \
                    _python_dispatch._len_torch_dispatch_stack() == 1 and \
                    _python_dispatch._get_dispatch_stack_at(0) is twin:
                original()  # only ours is left: set directly again
                torch._C._set_torch_dispatch_mode(th.raw)
                th.raw_active = True
            return old
        return _pop_mode

    # ---------------------------------------------------------------- recomputation
    # Checkpointing (torch.utils.checkpoint) runs a segment's forward again inside backward.
    # Its ops are forward work (activations; what they save is forward cache until autograd
    # releases it), not gradients. Recognised two ways: a saved_tensors_hooks scope opened
    # inside backward (the non-reentrant checkpoint's recomputation, 1.13 and 2.x), and a module
    # forward with grad enabled inside backward (the reentrant one).
    #
    # Only the innermost saved_tensors_hooks pair applies, so inside the program's own pair
    # (save_on_cpu, offloading, compression; checkpoint's forward) ours is not called: there
    # what the program's pack hook keeps is the forward cache (save_on_cpu's CPU copy), found
    # the same way as the recomputation's, and checkpoint's forward, which keeps nothing, has
    # none.
    def _wrap_hooks_enter(self, original):
        @functools.wraps(original)
        def __enter__(hooks):
            th = self.thread
            recompute = False
            pack = hooks.pack_hook
            try:
                if th.backward or (th.native and self.backward_active):
                    recompute = True
                    th.recompute += 1
                if pack is not self._pack and _KeepingPack.can_wrap(pack):
                    # Pushed in place of the program's hook for the push alone: the program's
                    # object keeps its own pack_hook (checkpoint reads and deletes attributes
                    # on it; compile inlines GraphModule hooks by type, never wrapped).
                    hooks.pack_hook = _KeepingPack(self, pack)
            except Exception as e:
                self._internal_error("saved_tensors_hooks", e)
            th.hook_scopes.append((id(hooks), recompute))
            try:
                return original(hooks)
            except BaseException:
                self._hooks_scope_closed(hooks)
                raise
            finally:
                if hooks.pack_hook is not pack:
                    hooks.pack_hook = pack
        return __enter__

    def _wrap_hooks_exit(self, original):
        @functools.wraps(original)
        def __exit__(hooks, *exc):
            try:
                return original(hooks, *exc)
            finally:
                self._hooks_scope_closed(hooks)
        return __exit__

    def _hooks_scope_closed(self, hooks):
        """The innermost saved_tensors_hooks scope this thread opened ends (scopes close in
        order: autograd's stack of hooks is a stack)."""
        th = self.thread
        scopes = th.hook_scopes
        if not scopes or scopes[-1][0] != id(hooks):
            return  # entered before install(), or not through __enter__
        _, recompute = scopes.pop()
        if recompute:
            th.recompute = max(0, th.recompute - 1)
            self._leave_scope(th)

    def _kept_by_pack(self, pack_hook, t):
        """Runs a pack hook of the program's (or checkpoint's recomputation's, innermost): what
        it keeps is forward cache until that dies (autograd dropped it: the backward that needed
        it ran). What it keeps: the tensors it returns (alone, or in a tuple or list:
        save_on_cpu's (device, copy)), or else the last tensor it made (a handle to a stored
        tensor)."""
        th = self.thread
        outer = th.capture
        th.capture = []
        try:
            packed = pack_hook(t)
        finally:
            made, th.capture = th.capture, outer
        try:
            kept = [packed] if isinstance(packed, Tensor) else (
                _tensors_in(packed) if type(packed) in (tuple, list) else [])
            if not kept and made:
                kept = made[-1:]
            for k in kept:
                self._kept_saved(k)
        except Exception as e:
            self._internal_error("_keeping_pack", e)
        return packed

    def _kept_saved(self, kept):
        ptr = self._addr(kept)
        if not ptr or self._is_param_or_input(ptr):
            return
        with self.saved_lock:
            n = self.saved.get(ptr, 0)
            self.saved[ptr] = n + 1
        if n == 0:
            self.ctx.retag(ptr, P.ROLE_FORWARD_CACHE, 0)
        refs = self.kept_refs

        def released(ref):
            refs.pop(id(ref), None)
            self._release_ptr(ptr)
        ref = weakref.ref(kept, released)
        refs[id(ref)] = ref

    def _wrap_thread_start(self, original):
        def _bootstrap_inner(thread):
            try:
                self._enter_thread()
            except Exception:  # never stop a thread from starting
                pass
            try:
                original(thread)
            finally:
                self._leave_thread()
        return _bootstrap_inner

    # ---------------------------------------------------------------- the listener
    def _tell(self, method, *args):
        if self._listener_failed:
            return None
        try:
            fn = getattr(self._listener, method, None)  # (a listener of an older interface)
            return fn(*args) if fn is not None else None
        except Exception as e:  # the listener must never break the program
            self._listener_failed = True
            sys.stderr.write(f"adprof.torch: the tape listener failed in {method} ({e!r}); "
                             "tape events stop here\n")
            return None

    def _internal_error(self, where, error):
        if where not in self._errors_reported:
            self._errors_reported.add(where)
            sys.stderr.write(f"adprof.torch: internal error in {where} ({error!r}); the "
                             "recording of roles may be incomplete, the program goes on\n")

    # ---------------------------------------------------------------- ops
    def _op_info(self, func):
        try:
            name = func.name()
        except Exception:
            name = str(func)
        info = (self.ctx.name(name), name, _COPY_OPS.get(name, _OP_PLAIN),
                _creates_storage(func), _returns_tensor(func))
        self.ops[func] = info
        return info

    def _dispatch(self, func, args, kwargs):
        th = self.thread
        if th.off:
            return func(*args, **kwargs) if kwargs else func(*args)
        info = self.ops.get(func)
        if info is None:
            info = self._op_info(func)
        if not info[3] and not self._on_op_wanted:
            # A view, an in-place op, detach: no storage of its own to tag, no op scope.
            out = func(*args, **kwargs) if kwargs else func(*args)
            if type(out) in _NUMBERS and info[4]:
                out = _wrapped_number(out, args)
            if th.capture is not None and isinstance(out, Tensor):
                th.capture.append(out)
            return out
        ctx = self.ctx
        # The op's phase; adprof is told only when it changes on this thread.
        if th.recompute:
            phase = P.PHASE_FORWARD  # checkpointing's forward, run again inside backward
        elif th.backward or (th.native and self.backward_active):
            phase = P.PHASE_BACKWARD
        elif th.optimizer:
            phase = P.PHASE_OPTIMIZER
        elif torch.is_grad_enabled() and (th.modules or _any_requires_grad(args)):
            phase = P.PHASE_FORWARD  # a module's forward, or the loss after it
        else:
            phase = P.PHASE_OTHER
        if phase != th.phase:
            ctx.set_phase(phase)
            th.phase = phase
        recorded = phase != P.PHASE_OTHER or th.modules  # outside AD, roles stay foreign
        ctx.op_begin(info[0], next(self.instances))
        try:
            if recorded:
                # What the op allocates is workspace until its outputs are told apart. A CUDA
                # output is declared to adprof in _outputs, so that runs under the same role:
                # the optimizer's scratch was declared foreign (the role outside the op) on CUDA
                # and workspace on the CPU.
                previous = ctx.set_role(P.ROLE_WORKSPACE)
                try:
                    out = func(*args, **kwargs) if kwargs else func(*args)
                    try:
                        self._outputs(info, phase, args, out, th)
                    except Exception as e:  # never into the program
                        self._internal_error("_outputs", e)
                finally:
                    ctx.set_role(previous)
            else:
                out = func(*args, **kwargs) if kwargs else func(*args)
            if self._on_op_wanted and not self._listener_failed:
                outs = [out] if isinstance(out, Tensor) else (
                    [o for o in out if isinstance(o, Tensor)] if type(out) in (tuple, list)
                    else [])
                self._tell("on_op", info[1], func, _tensors_in(args), outs, phase)
        finally:
            ctx.op_end()
        if type(out) in _NUMBERS and info[4]:
            out = _wrapped_number(out, args)
        if th.capture is not None and isinstance(out, Tensor):
            th.capture.append(out)
        return out

    def _outputs(self, info, phase, args, out, th):
        """Retags, labels and describes the storages the op created."""
        if isinstance(out, Tensor):
            outs = (out,)
        elif type(out) in (tuple, list):
            outs = [o for o in out if isinstance(o, Tensor)]
            if not outs:
                return
        else:
            return
        if phase == P.PHASE_BACKWARD:
            role = P.ROLE_ADJOINT
        elif phase == P.PHASE_OPTIMIZER:
            role = None  # scratch of the step stays workspace; state is tagged when stored
        else:
            role = P.ROLE_ACTIVATION
        kind = info[2] if phase != P.PHASE_BACKWARD else _OP_PLAIN
        ctx = self.ctx
        input_ptrs = None
        label = th.node_label if phase == P.PHASE_BACKWARD else (
            th.modules[-1][2] if th.modules else 0)
        for o in outs:
            for a in args:
                if o is a:
                    break
            else:
                if input_ptrs is None:  # before the output: a CUDA input seen first is older
                    input_ptrs = {self._addr(a) for a in _tensors_in(args)}
                ptr = self._addr(o)
                if not ptr or ptr in input_ptrs:
                    continue  # a view or an in-place result: not born here
                dtype = o.dtype
                if kind != _OP_PLAIN:
                    src = _tensors_in(args)
                    source = src[0] if src else None
                    src_ptr = self._addr(source) if source is not None else 0
                    ctx.retag(ptr, P.ROLE_DUPLICATE, src_ptr)
                    if kind == _OP_CAST and dtype == torch.int64 and source is not None and \
                            source.dtype in _NARROW_INDEX_DTYPES:
                        ctx.label(ptr, ctx.name(P.AD_LABEL_INDEX_WIDENED))
                    elif label:
                        ctx.label(ptr, label)
                else:
                    if role is not None:
                        ctx.retag(ptr, role, 0)
                    if label:
                        ctx.label(ptr, label)
                ctx.describe(ptr, _DTYPES.get(dtype, P.DTYPE_UNKNOWN), o.shape)

    # ---------------------------------------------------------------- backward labels
    # A gradient is labelled with the module whose forward made the autograd node that computes
    # it. Ops run below autograd (the dispatch mode sees no grad_fn), so the nodes are found when
    # a module's forward returns: the graph from its outputs back to its inputs, less what an
    # inner module labelled already. Hooks on each node tell its thread the label while it runs.
    # 2.x numbers nodes in order of making (`since`: the number at the module's entry), so the
    # walk stops exactly at what existed before; on 1.13 it stops at the module's positional
    # inputs (a tensor passed by keyword leads it on to older nodes not yet labelled).
    def _label_module_nodes(self, label, since, inputs, outs, th):
        stop = {t.grad_fn for t in inputs if t.grad_fn is not None}
        labelled = th.labelled_nodes
        todo = [t.grad_fn for t in outs if t.grad_fn is not None]
        seen = set()
        while todo:
            node = todo.pop()
            if node in seen or node in stop:
                continue
            seen.add(node)
            if type(node).__name__ == "AccumulateGrad":
                continue  # a parameter's, or a leaf's: not made here
            if since >= 0 and node._sequence_nr() < since:
                continue  # made before the module was entered
            if node not in labelled:
                labelled.add(node)
                self._label_node(node, label)
            todo.extend(n for n, _ in node.next_functions if n is not None)

    def _label_node(self, node, label):
        hooks = self._node_hooks.get(label)
        if hooks is None:
            thread = self.thread

            def begins(grad_outputs):
                thread.node_label = label

            def ends(grad_inputs, grad_outputs):
                thread.node_label = 0
            hooks = self._node_hooks[label] = (begins, ends)
        node.register_prehook(hooks[0])
        node.register_hook(hooks[1])

    # ---------------------------------------------------------------- saved tensors
    def _pack(self, t):
        try:
            return self._pack_recorded(t)
        except Exception as e:
            self._internal_error("_pack", e)
            return _Saved(t, 0, None, None)

    def _pack_recorded(self, t):
        th = self.thread
        ptr = self._addr(t)
        if ptr:
            if not self._is_param_or_input(ptr):
                with self.saved_lock:
                    n = self.saved.get(ptr, 0)
                    self.saved[ptr] = n + 1
                if n == 0:
                    self.ctx.retag(ptr, P.ROLE_FORWARD_CACHE, 0)
            else:
                ptr = 0
        token = self._tell("on_save", t) if not self._listener_failed else None
        # An output saved by its own node would make a cycle through the packed object
        # (tensor -> grad_fn -> saved -> tensor) that no collector sees: keep a detached alias.
        if t.grad_fn is not None:
            th.off += 1
            try:
                with _NoDispatch():  # the program's own dispatch modes never see our ops
                    t = t.detach()
            finally:
                th.off -= 1
        return _Saved(t, ptr, token, self)

    def _released(self, saved):
        if saved.token is not None:
            self._tell("on_release", saved.token)
        if saved.ptr:
            self._release_ptr(saved.ptr)

    def _release_ptr(self, ptr):
        if ptr:
            with self.saved_lock:
                n = self.saved.get(ptr, 0) - 1
                if n > 0:
                    self.saved[ptr] = n
                else:
                    self.saved.pop(ptr, None)
            if n <= 0:  # autograd dropped its last reference: an activation again (or freed)
                self.ctx.retag(ptr, P.ROLE_ACTIVATION, 0)

    def _addr(self, t):
        """The address adprof knows `t`'s storage by; 0 for none (a meta tensor, a device
        whose storages cannot be followed, a storage without memory). A CUDA storage is
        declared as a device block here the first time it is seen."""
        if t.is_cuda:
            return self.device_blocks.address(t) if self.device_blocks is not None else 0
        if not t.is_cpu:  # meta, and devices adprof cannot follow
            return 0
        return storage_ptr(t)

    def _is_param_or_input(self, ptr):
        for table in (self.params, self.inputs):
            ref = table.get(ptr)
            if ref is not None:
                t = ref()
                if t is not None and storage_ptr(t) == ptr:
                    return True
                # That tensor died, or has another storage now (p.data = ...): the address
                # may be another's.
                table.pop(ptr, None)
        return False

    # ---------------------------------------------------------------- modules
    def _register_root(self, module):
        inner = _compiled_wrapper_of(module) or _parallel_wrapper_of(module)
        if inner is not None:  # torch.compile(model), DDP(model): the paths are the model's own
            self._path_of(inner)
            self.paths[module] = self.paths[inner]
            return
        main = sys.modules.get("__main__")
        holder = _model_holding(main, module) if main is not None else None
        if holder is not None:
            # A module of a model the program holds, called on its own (a script that wraps
            # net.lstm in checkpoint in its loop): its path from that model's root, as when the
            # model calls it (it was "lstm", and "net.lstm" before the edit).
            holder_path = self._path_of(holder)[0]
            if module not in self.paths:  # added to the model after it was first seen
                for sub_name, sub in holder.named_modules():
                    if sub is module:
                        self._register_tree(module, holder_path + "." + sub_name)
                        break
            if module in self.paths:
                return
        name = None
        if main is not None:
            for key, value in list(vars(main).items()):
                if value is module and not key.startswith("_"):
                    name = key
                    break
        is_variable = name is not None
        if name is None:
            name = type(module).__name__.lower()
        self._register_tree(module, name)
        if not self._listener_failed:
            self._tell("on_root", module, name, is_variable)

    def _register_tree(self, module, prefix):
        ctx = self.ctx
        for sub_name, sub in module.named_modules():
            if sub not in self.paths:
                path = prefix + "." + sub_name if sub_name else prefix
                self.paths[sub] = (path, ctx.name(path))
        self._adopt_params(module, prefix)

    def _path_of(self, module):
        entry = self.paths.get(module)
        if entry is not None:
            return entry
        th = self.thread
        if th.modules:  # a child added after its parent was first seen
            parent, parent_path = th.modules[-1][:2]
            for child_name, child in parent._modules.items():
                if child is module:
                    self._register_tree(module, parent_path + "." + child_name)
                    break
            else:
                self._register_tree(module, parent_path + "." + type(module).__name__.lower())
        else:
            self._register_root(module)
        return self.paths[module]

    def _adopt_params(self, module, prefix):
        """Parameters first seen: parameter role, labelled with their path; gradient hooks."""
        for name, p in module.named_parameters():
            self._adopt_param(p, prefix + "." + name)

    def _adopt_param(self, p, path):
        ptr = self._addr(p)
        if not ptr:
            return
        ref = self.params.get(ptr)
        if ref is not None and ref() is p:
            return
        ctx = self.ctx
        self.params[ptr] = weakref.ref(p)
        self.param_paths[id(p)] = (weakref.ref(p), path)
        ctx.retag(ptr, P.ROLE_PARAMETER, 0)
        ctx.label(ptr, ctx.name(path))
        ctx.describe(ptr, _DTYPES.get(p.dtype, P.DTYPE_UNKNOWN), p.shape)
        if p.requires_grad and p not in self.hooked_params:
            self.hooked_params.add(p)
            self._hook_grads(p, path)

    def _param_path(self, p):
        """The path a parameter was adopted with (None: not adopted; an id reused by a new
        tensor after the old one died is not its)."""
        entry = self.param_paths.get(id(p))
        return entry[1] if entry is not None and entry[0]() is p else None

    def _hook_grads(self, p, path):
        param_ref = weakref.ref(p)

        def on_grad(grad):
            param = param_ref()
            if param is not None:
                self._tell("on_grad", path, param, grad)

        def accumulated(*_):
            try:
                note_accumulated()
            except Exception as e:
                self._internal_error("accumulated", e)

        def note_accumulated():
            param = param_ref()
            if param is None:
                return
            grad = param.grad
            ptr = self._addr(grad) if grad is not None else 0
            if ptr:
                self.ctx.retag(ptr, P.ROLE_ADJOINT, 0)
                self.ctx.label(ptr, self.ctx.name(path + ".grad"))
            self._tell("on_grad_accumulated", path, param)

        th = self.thread
        th.off += 1
        try:
            p.register_hook(on_grad)
            if _HAS_POST_ACCUMULATE_HOOK:
                p.register_post_accumulate_grad_hook(accumulated)
            else:  # 1.13: the AccumulateGrad node, kept alive so that it stays p's
                with _NoDispatch():
                    node = p.expand_as(p).grad_fn.next_functions[0][0]
                node.register_hook(accumulated)
                self.grad_nodes.append(node)
        finally:
            th.off -= 1

    @_guarded()
    def _module_pre(self, module, inputs):
        if _compiling():
            return
        th = self.thread
        if th.modules and _compiled_wrapper_of(th.modules[-1][0]) is module:
            return  # the compiled model inside its wrapper: the wrapper's call is its call
        path, path_id = self._path_of(module)
        if th.backward and not th.recompute and torch.is_grad_enabled():
            th.recompute += 1  # a forward inside backward: reentrant checkpointing's
            th.recompute_depth = len(th.modules)
        elif not th.modules:
            self._top_level_enter(module, path, inputs, th)
        # (the autograd sequence number at entry: the nodes made inside have it or later; 2.x)
        th.modules.append((module, path, path_id, _next_sequence_nr() if _next_sequence_nr else -1))
        if not self._listener_failed:
            self._tell("on_module_enter", path, module, _tensors_in(inputs))

    def _top_level_enter(self, module, path, inputs, th):
        ctx = self.ctx
        self._adopt_params(module, path)  # parameters replaced since (p.data = ...)
        kwargs = _call_kwargs(module)
        for t in itertools.chain(_tensors_in(inputs), _tensors_in(list(kwargs.values()))):
            if t.grad_fn is None and not t.requires_grad:
                ptr = self._addr(t)
                if ptr and ptr not in self.params:
                    ref = self.inputs.get(ptr)
                    if ref is None or ref() is not t:
                        self.inputs[ptr] = weakref.ref(t, self._input_died(ptr))
                        ctx.retag(ptr, P.ROLE_INPUT, 0)
                        ctx.label(ptr, ctx.name(path + ".input"))
                        ctx.describe(ptr, _DTYPES.get(t.dtype, P.DTYPE_UNKNOWN), t.shape)
        if torch.is_grad_enabled() and not th.backward and not th.optimizer:
            self.saw_forward = True
            self.marked_since_forward = False
            self._start_iteration()
            if th.phase != P.PHASE_FORWARD:
                ctx.set_phase(P.PHASE_FORWARD)
                th.phase = P.PHASE_FORWARD

    def _input_died(self, ptr):
        """The weakref callback that forgets an input when its tensor dies (one a step)."""
        inputs = self.inputs

        def died(ref):
            if inputs.get(ptr) is ref:
                inputs.pop(ptr, None)
        return died

    @_guarded()
    def _module_post(self, module, inputs, output):
        if _compiling():
            return
        th = self.thread
        if th.modules and _compiled_wrapper_of(th.modules[-1][0]) is module:
            return
        stack = th.modules
        # Pop to this module: a child whose forward raised (and was caught) left its entry.
        label, since = 0, -1
        while stack:
            top = stack.pop()
            if top[0] is module:
                label, since = top[2], top[3]
                break
        outs = [output] if isinstance(output, Tensor) else (
            _tensors_in(output) if type(output) in (tuple, list) else [])
        if label and outs and torch.is_grad_enabled() and not th.optimizer:
            try:
                self._label_module_nodes(label, since, _tensors_in(inputs), outs, th)
            except Exception as e:  # a graph the walk does not know: gradients unlabelled
                self._internal_error("_label_module_nodes", e)
        if not stack:
            th.labelled_nodes = set()  # the graph is the program's from here on
        if th.recompute_depth is not None and len(stack) <= th.recompute_depth:
            th.recompute_depth = None
            th.recompute = max(0, th.recompute - 1)
            self._leave_scope(th)
        if not self._listener_failed:
            path = self.paths.get(module, ("", 0))[0]
            self._tell("on_module_exit", path, module, outs)

    def _start_iteration(self):
        if self.pending_step is not None and not self.manual_steps:
            self.ctx.step(self.pending_step)
            self.next_mark = self.pending_step + 1
            self.pending_step = None
            self.marked_since_forward = True

    def _leave_scope(self, th):
        """Back to the phase of what encloses a backward or an optimizer step."""
        if th.recompute:
            phase = P.PHASE_FORWARD
        elif th.backward:
            phase = P.PHASE_BACKWARD
        elif th.optimizer:
            phase = P.PHASE_OPTIMIZER
        elif th.modules and torch.is_grad_enabled():
            phase = P.PHASE_FORWARD
        else:
            phase = P.PHASE_OTHER
        if phase != th.phase:
            self.ctx.set_phase(phase)
            th.phase = phase

    # ---------------------------------------------------------------- backward
    def _wrap_backward(self, original, method=False):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            th = self.thread
            if th.backward:
                return original(*args, **kwargs)
            try:
                roots = args[0] if args else kwargs.get("tensors", kwargs.get("outputs"))
                roots = [roots] if isinstance(roots, Tensor) else list(roots or ())
            except Exception:  # the original reports what is wrong with its arguments
                roots = []
            th.backward += 1
            if not self.saw_forward:
                self.marked_since_forward = False
            with self.saved_lock:
                self.backward_active += 1
            if th.phase != P.PHASE_BACKWARD:
                self.ctx.set_phase(P.PHASE_BACKWARD)
                th.phase = P.PHASE_BACKWARD
            self._tell("on_backward_begin", roots)
            try:
                return original(*args, **kwargs)
            finally:
                th.backward -= 1
                th.node_label = 0  # a node that raised never ran its post hook
                with self.saved_lock:
                    self.backward_active -= 1
                self._tell("on_backward_end")
                self._leave_scope(th)
        wrapper.__adprof_wrapped__ = original
        return wrapper

    # ---------------------------------------------------------------- optimizer
    def _wrap_optimizer_init(self, original):
        @functools.wraps(original)
        def __init__(opt, *args, **kwargs):
            original(opt, *args, **kwargs)
            try:
                self._adopt_optimizer(opt)
            except Exception as e:
                sys.stderr.write(f"adprof.torch: cannot follow optimizer {type(opt).__name__} "
                                 f"({e!r})\n")
        return __init__

    @_guarded()
    def _adopt_optimizer(self, opt):
        if not _HAS_GLOBAL_STEP_HOOKS:  # 1.13: wrap step of this optimizer's class
            cls = type(opt)
            step = cls.step
            if not hasattr(step, "__adprof_wrapped__"):
                cls.step = self._wrap_step(step)
                self._undo.append(lambda: setattr(cls, "step", step))
        self._track_state(opt)

    def _track_state(self, opt):
        state = opt.state
        if type(state) is _OptimizerState:
            return
        tracked = _OptimizerState(dict)
        tracked.owner = self
        for param, values in state.items():
            if type(values) is dict:
                wrapped = _ParamState(values)
                wrapped.owner = self
                wrapped.param = param
                values = wrapped
            dict.__setitem__(tracked, param, values)
        opt.state = tracked

    def _wrap_state_dict(self, original):
        """state_dict() hands out the state's inner dicts: plain ones, not the tracking dicts,
        so that a checkpoint never names an adprof class (torch.load(weights_only=True))."""
        @functools.wraps(original)
        def state_dict(opt, *args, **kwargs):
            result = original(opt, *args, **kwargs)
            state = result.get("state") if isinstance(result, dict) else None
            if isinstance(state, dict):
                for key, value in list(state.items()):
                    if type(value) is _ParamState:
                        state[key] = dict(value)
            return result
        return state_dict

    def _wrap_step(self, original):
        @functools.wraps(original)
        def step(opt, *args, **kwargs):
            th = self.thread
            if th.optimizer:  # a subclass's step calling its base's
                return original(opt, *args, **kwargs)
            self._step_begin(opt)
            try:
                return original(opt, *args, **kwargs)
            finally:
                self._step_end(opt)
        step.__adprof_wrapped__ = original
        return step

    @_guarded()
    # 2.x: the global step hooks. A subclass whose step calls its base's runs them twice, one
    # call inside the other: only the outermost begins and ends the step.
    def _step_pre_hook(self, opt, args, kwargs):
        th = self.thread
        stack = getattr(th, "steps_open", None)
        if stack is None:
            stack = th.steps_open = []
        if stack and stack[-1] is not opt:
            stack.clear()  # a step whose post hook never ran (it raised)
        stack.append(opt)
        if len(stack) == 1:
            self._step_begin(opt)

    def _step_post_hook(self, opt, args, kwargs):
        stack = getattr(self.thread, "steps_open", None)
        if stack:
            stack.pop()
            if not stack:
                self._step_end(opt)

    def _step_begin(self, opt):
        th = self.thread
        th.optimizer = 1  # also resets a step whose post hook never ran (it raised)
        if not self.marked_since_forward:
            self._start_iteration()
        try:
            self._track_state(opt)
            for group in opt.param_groups:
                for p in group["params"]:
                    if self._param_path(p) is None:
                        self._adopt_param(p, "param%d" % len(self.param_paths))
        except Exception:
            pass
        if th.phase != P.PHASE_OPTIMIZER:
            self.ctx.set_phase(P.PHASE_OPTIMIZER)
            th.phase = P.PHASE_OPTIMIZER
        self._tell("on_step_begin", opt, self.steps)

    @_guarded()
    def _step_end(self, opt):
        th = self.thread
        step = self.steps
        try:
            for param, values in list(opt.state.items()):
                if isinstance(values, dict):
                    for key, value in values.items():
                        if isinstance(value, Tensor):
                            self._state_tensor(param, key, value)
        except Exception:
            pass
        self.steps += 1
        if self.pending_step is None:
            self.pending_step = self.next_mark
        th.optimizer = 0
        self._leave_scope(th)
        self._tell("on_step_end", opt, step)

    @_guarded()
    def _state_tensor(self, param, key, value):
        ptr = self._addr(value)
        if not ptr:
            return
        ctx = self.ctx
        ctx.retag(ptr, P.ROLE_OPTIMIZER_STATE, 0)
        path = self._param_path(param) or "param"
        ctx.label(ptr, ctx.name(path + "." + str(key)))
        ctx.describe(ptr, _DTYPES.get(value.dtype, P.DTYPE_UNKNOWN), value.shape)

    # ---------------------------------------------------------------- zero_grad
    def _wrap_zero_grad(self, original):
        try:
            default = inspect.signature(original).parameters["set_to_none"].default
        except (KeyError, ValueError, TypeError):
            default = False

        @functools.wraps(original)
        def zero_grad(owner, *args, **kwargs):
            set_to_none = kwargs.get("set_to_none", args[0] if args else default)
            self._tell("on_zero_grad", owner, bool(set_to_none))
            return original(owner, *args, **kwargs)
        zero_grad.__adprof_wrapped__ = original
        return zero_grad

    # ---------------------------------------------------------------- explicit API
    def adopt_model(self, model, name=None):
        if name is None:
            self._path_of(model)
        elif model not in self.paths:
            self._register_tree(model, name)

    def mark_step(self, step=None):
        if step is None:
            step = self.steps
        self.ctx.step(step)
        self.pending_step = None
        self.manual_steps = True  # the program marks its steps: no automatic marks from now

    def ops_seen(self):
        """How many op scopes were opened so far (the instance of the last one)."""
        # itertools.count has no peek: its repr is "count(N)" with N the next value.
        return int(repr(self.instances)[6:-1]) - 1
