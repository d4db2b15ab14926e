"""The PyTorch instrumentation: what autograd and the modules do, told to adprof as it happens.

One Instrumentation object per process (install()). Its parts, each a PyTorch hook point in a
module of its own:
- _dispatch.py: a TorchDispatchMode; every ATen op in an op scope, its new storages retagged to
  their role, labelled with the module path and described (dtype, shape);
- _saved_tensors.py: saved-tensor hooks; what autograd saves is forward_cache until autograd
  drops it (also what a program's own pack hook keeps, and checkpointing's recomputation);
- _modules.py: global module forward pre/post hooks; module paths, parameters (and their
  gradient hooks), the batch, the forward phase;
- _backward.py: wrappers of torch.autograd.backward/grad and Tensor.backward (backward phase),
  and the gradients' labels;
- _optimizer.py: Optimizer.step (optimizer phase, steps), zero_grad, and optimizer.state;
- _ddp.py: what DistributedDataParallel's Reducer runs on tensors of its own, kept unseen;
- _compile.py: torch.compile's compilations, each an op scope of their own.
This module holds what they share: installing and removing the hooks, each thread's dispatch
mode and saved-tensor hooks, the listener (_tape.py), addresses and phases. Every call into the
tape listener is guarded: nothing here raises into the program.

Storage addresses: a CPU storage's data pointer is the block the interposer recorded
(posix_memalign in c10::alloc_cpu), which is what retag, label and describe name. A CUDA
storage is a block of the caching allocator's segments: _device.py declares it to adprof as a
device block the first time it is seen and ends it when the storage dies (PyTorch 2.x; on 1.13
device memory is recorded by segment only). _addr() gives the address to name either way.
"""

import inspect
import itertools
import sys
import threading
import weakref

import torch
import torch.utils._python_dispatch as _python_dispatch

from .. import _protocol as P
from . import _device
from ._backward import BackwardHooks
from ._compile import CompileHooks
from ._common import OutsideDynamo, _ThreadState, storage_ptr
from ._ddp import DataParallelHooks
from ._dispatch import _RAW_MODE, DispatchHooks, _does_nothing, _Mode, _RawMode
from ._modules import ModuleHooks
from ._optimizer import _HAS_GLOBAL_STEP_HOOKS, OptimizerHooks, _optim_module
from ._saved_tensors import SavedTensorHooks, _unpack
from ._tape import TapeListener

Tensor = torch.Tensor


class Instrumentation(DispatchHooks, SavedTensorHooks, ModuleHooks, BackwardHooks,
                      OptimizerHooks, DataParallelHooks, CompileHooks):
    def __init__(self, ctx, listener=None):
        self.ctx = ctx
        # The engine first: a tape listener that describes the engine further (its policies, a
        # later protocol version) comes after, and its description is the last word.
        ctx.describe_engine("pytorch", torch.__version__)
        self._on_op_wanted = True
        self.listener = listener if listener is not None else TapeListener(ctx)
        self.thread = _ThreadState()
        self.outside_dynamo = OutsideDynamo()  # hooks a compiled function may call
        self.instances = itertools.count(1)
        self.ops = {}  # id(OpOverload) -> _op_info's tuple
        self.paths = weakref.WeakKeyDictionary()  # module -> (path, path name id)
        self.root_labels = {}  # id(root module) -> its label (_root_label)
        self.params = {}  # storage address -> weakref to the parameter
        self.param_paths = {}  # id(parameter) -> (weakref to it, path); see _param_path
        self.inputs = {}  # storage address -> weakref to the tensor given to a top-level module
        self.saved = {}  # storage address -> number of live saved references (forward_cache)
        self.saved_lock = threading.Lock()
        # weakrefs to what other pack hooks kept (their release), by id: two live weakrefs to
        # one tensor compare by the tensor's ==, which is elementwise (a set's lookup raised)
        self.kept_refs = {}
        # AccumulateGrad nodes whose hooks we hold (1.13: kept alive), by the module whose
        # parameters they accumulate: released with it.
        self.grad_nodes = weakref.WeakKeyDictionary()
        self.hooked_params = weakref.WeakSet()
        # (id(parameter), key) -> (id(tensor), storage address) of the optimizer state tagged
        self.tagged_state = {}
        self.steps = 0  # optimizer steps done
        self.pending_step = 0  # the step number to mark when the next iteration starts
        # At most one automatic step mark between two top-level forwards: one optimizer per
        # parameter stepped from the gradient hooks (a fused step) is still one training step.
        self.next_mark = 0
        self.marked_since_forward = False
        self.saw_forward = False  # a program without modules: backward begins an iteration
        self.backward_active = 0  # backward calls in progress, all threads
        self.manual_steps = False  # profile().step() was called
        self.own_code = None  # adprof's code objects, for dynamo to skip (_compile.py)
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
            pre = _optim_module.register_optimizer_step_pre_hook(
                self._step_pre_hook_outside_dynamo)
            post = _optim_module.register_optimizer_step_post_hook(
                self._step_post_hook_outside_dynamo)
            self._undo.append(lambda: (pre.remove(), post.remove()))
            if hasattr(optim, "profile_hook_step"):
                self._patch(optim, "profile_hook_step",
                            staticmethod(self._wrap_profile_hook_step(optim.profile_hook_step)))
        hooks_cls = torch.autograd.graph.saved_tensors_hooks
        self._patch(hooks_cls, "__enter__", self._wrap_hooks_enter(hooks_cls.__enter__))
        self._patch(hooks_cls, "__exit__", self._wrap_hooks_exit(hooks_cls.__exit__))
        self._patch(threading.Thread, "_bootstrap_inner",
                    self._wrap_thread_start(threading.Thread._bootstrap_inner))
        self._install_ddp()
        if hasattr(torch, "compile"):
            self._patch(torch, "compile", self._wrap_compile(torch.compile))
            self._watch_compiles()  # (where the program imported dynamo before)
        self._patch(_python_dispatch, "_push_mode",
                    self._wrap_push_mode(_python_dispatch._push_mode))
        if _RAW_MODE:
            self._patch(_python_dispatch, "_pop_mode",
                        self._wrap_pop_mode(_python_dispatch._pop_mode))

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
            th.mode = mode
        hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        hooks.__enter__()
        self._modes[threading.get_ident()] = (mode, hooks)

    def _leave_thread(self):
        mode, hooks = self._modes.pop(threading.get_ident(), (None, None))
        if hooks is None:
            return
        hooks.__exit__(None, None, None)
        th = self.thread
        self._leave_step_scope(th)
        if th.raw_active:
            torch._C._set_torch_dispatch_mode(None)
            th.raw_active = False
        elif th.twin is None:
            mode.__exit__(None, None, None)
        th.raw = th.twin = th.mode = None

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
        self._enter_phase(th, phase)

    def _enter_phase(self, th, phase):
        """This thread's phase from now on; adprof is told only when it changes (_dispatch,
        the hot path, does the same inline)."""
        if phase != th.phase:
            self.ctx.set_phase(phase)
            th.phase = phase

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
