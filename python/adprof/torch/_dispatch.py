"""Hook point 1, dispatch: a TorchDispatchMode sees every ATen op. Each runs in an op scope
named as PyTorch names it ("aten::addmm"), with role workspace inside; the storages it creates
are then retagged to their role (activation in forward, adjoint in backward, duplicate for
copies), labelled with the module path (in backward: the module whose forward made the
autograd node) and described (dtype, shape)."""

import threading

import torch
import torch.utils._python_dispatch as _python_dispatch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import _protocol as P
from ._common import _DTYPES, Tensor, _compiling, _tensors_in

_NARROW_INDEX_DTYPES = (torch.int32, torch.int16, torch.int8, torch.uint8)

# What an op's new storages are, beyond its phase's role.
_OP_PLAIN, _OP_COPY, _OP_CAST = 0, 1, 2
_COPY_OPS = {"aten::clone": _OP_COPY, "aten::_to_copy": _OP_CAST, "aten::to": _OP_CAST,
             "aten::contiguous": _OP_COPY, "aten::lift_fresh_copy": _OP_COPY}

# 1.13 runs a stack of dispatch modes through a Python helper mode that pops and pushes the
# stack around every op (about 11 us an op, half of the instrumentation's cost). There the mode
# is set directly as the C++-level mode while no other mode is pushed (see _RawMode).
_RAW_MODE = hasattr(_python_dispatch, "_TorchDispatchStackMode") and hasattr(
    torch._C, "_set_torch_dispatch_mode")


def _empty_method(self, *args):
    pass


def _does_nothing(method):
    """True for a method whose body is `pass` (same bytecode as _empty_method's)."""
    code = getattr(getattr(method, "__func__", None), "__code__", None)
    empty = _empty_method.__code__
    return code is not None and code.co_code == empty.co_code and \
        code.co_consts[:1] == empty.co_consts[:1]


_NUMBERS = (int, float, bool, complex)

# 2.x: the innermost saved-tensor hooks of this thread, (pack, unpack) or None (DispatchHooks.
# _collective); 1.13 has no such call, and its collectives keep no copy of the thread's state.
_TOP_HOOKS = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)


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

    # __torch_dispatch__: _dispatch_outside_dynamo, set after the class body (a method defined in
    # it is wrapped by TorchDispatchMode.__init_subclass__ on 2.x).


def _dispatch_outside_dynamo(mode, func, types, args=(), kwargs=None):
    """_Mode.__torch_dispatch__ (on 1.13 only while a mode of the program's is pushed: the twin
    of _RawMode). TorchDispatchMode (2.x) wraps a subclass's __torch_dispatch__ in
    torch._disable_dynamo, so that torch.compile never traces into the mode; that wrapper
    imports torch._dynamo at the first op (about 2 s and tens of MB: sympy, inductor), which a
    program that never compiles never imports. Here the mode runs through the instrumentation's
    OutsideDynamo, which disables dynamo only once the program has imported it. owner._dispatch
    is looked up at each op (a test's oracle replaces it)."""
    owner = mode.owner
    return owner.outside_dynamo(owner._dispatch, func, args, kwargs)


_Mode.__torch_dispatch__ = _dispatch_outside_dynamo


class _RawMode:
    """1.13: the C++-level dispatch mode itself, without the mode stack's helper. When the
    program pushes a mode of its own, the twin (_Mode) takes this one's place at the bottom of
    the stack until the program's modes are popped (Instrumentation._push_mode/_pop_mode)."""

    __slots__ = ("owner",)

    def __init__(self, owner):
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.owner._dispatch(func, args, kwargs)


class DispatchHooks:
    """Instrumentation's part that runs each op (a mixin: the state is Instrumentation's)."""

    # ---------------------------------------------------------------- the mode on the stack
    def _suspend_mode(self, th):
        """Takes this thread's mode off the dispatch stack, as PyTorch's _pop_mode_temporarily
        does; False where it is not the innermost mode (a mode of the program's is above it),
        is already off, or a listener wants every op. _resume_mode puts it back; a mode the
        program pushes meanwhile is pushed after ours, as it would have been (_push_mode)."""
        if th.suspended or self._on_op_wanted:
            return False
        if _RAW_MODE:  # 1.13: only the mode set directly (the twin is under the program's)
            if th.raw is None or not th.raw_active:
                return False
            torch._C._set_torch_dispatch_mode(None)
        else:
            depth = torch._C._len_torch_dispatch_stack()
            if th.mode is None or depth == 0 or \
                    torch._C._get_dispatch_stack_at(depth - 1) is not th.mode:
                return False
            _python_dispatch._pop_mode()  # (the C function's arguments vary across 2.x)
        th.suspended = True
        return True

    def _resume_mode(self, th):
        if not th.suspended:
            return
        th.suspended = False
        if _RAW_MODE:
            if th.raw_active:  # (else the program pushed a mode: the twin took our place)
                torch._C._set_torch_dispatch_mode(th.raw)
        else:
            torch._C._push_on_torch_dispatch_stack(th.mode)

    def _wrap_push_mode(self, original):
        def _push_mode(mode, *args):
            th = self.thread
            if th.suspended:
                self._resume_mode(th)  # ours below the program's, as always
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

    # ---------------------------------------------------------------- ops
    def _op_info(self, func):
        try:
            name = func.name()
        except Exception:
            name = str(func)
        # func last: the table holds the op, so its id() stays its own (an op's __hash__ is
        # Python code: the table is keyed by id)
        info = (self.ctx.name(name), name, _COPY_OPS.get(name, _OP_PLAIN),
                _creates_storage(func), _returns_tensor(func),
                _TOP_HOOKS is not None and getattr(func, "namespace", "") == "c10d", func)
        self.ops[id(func)] = info
        return info

    def _dispatch(self, func, args, kwargs):
        """Every op of the program, on its thread: read top to bottom for the common case (an
        op that makes storage, one Tensor out); the rest is out of line."""
        th = self.thread
        if th.off:
            return func(*args, **kwargs) if kwargs else func(*args)
        info = self.ops.get(id(func))
        if info is None:
            info = self._op_info(func)
        if info[5] and not th.in_collective:
            return self._collective(func, args, kwargs, th)
        if not info[3] and not self._on_op_wanted:
            # A view, an in-place op, detach: no storage of its own to tag, no op scope.
            out = func(*args, **kwargs) if kwargs else func(*args)
            if info[4] and type(out) in _NUMBERS:
                out = _wrapped_number(out, args)
            if th.capture is not None and isinstance(out, Tensor):
                th.capture.append(out)
            return out
        if _compiling():  # torch.compile's tracing runs ops on fake tensors: no storage
            return func(*args, **kwargs) if kwargs else func(*args)
        ctx = self.ctx
        # The op's phase; adprof is told only when it changes on this thread (_enter_phase,
        # inline on this hot path).
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
                        if isinstance(out, Tensor):
                            self._outputs(info, phase, args, (out,), th)
                        elif type(out) in (tuple, list):
                            self._outputs(info, phase, args,
                                          [o for o in out if isinstance(o, Tensor)], th)
                    except Exception as e:  # never into the program
                        self._internal_error("_outputs", e)
                finally:
                    ctx.set_role(previous)
            else:
                out = func(*args, **kwargs) if kwargs else func(*args)
            if self._on_op_wanted and not self._listener_failed:
                self._tell_op(info, func, args, out, phase)
        finally:
            ctx.op_end()
        if info[4] and type(out) in _NUMBERS:
            out = _wrapped_number(out, args)
        if th.capture is not None and isinstance(out, Tensor):
            th.capture.append(out)
        return out

    def _tell_op(self, info, func, args, out, phase):
        outs = [out] if isinstance(out, Tensor) else (
            [o for o in out if isinstance(o, Tensor)] if type(out) in (tuple, list) else [])
        self._tell("on_op", info[1], func, _tensors_in(args), outs, phase)

    def _collective(self, func, args, kwargs, th):
        """A collective (c10d::allreduce_, barrier...) runs without our saved-tensor hooks on
        this thread's stack. PyTorch 2.x copies the thread's state into the work it hands to the
        backend's threads (at::ThreadLocalState in gloo's AsyncWork): our pack hook there is a
        Python object a backend thread must release with the GIL, and one that does so after
        finalization has begun is ended inside a noexcept destructor: std::terminate, the rank
        dies of SIGABRT. Inside this handler our mode is already off the stack; a collective
        saves no tensor."""
        top = _TOP_HOOKS(False)
        ours = self._modes.get(threading.get_ident(), (None, None))[1]
        popped = top is not None and ours is not None and top[0] is ours.pack_hook
        if popped:
            torch._C._autograd._pop_saved_tensors_default_hooks()
        th.in_collective = True
        try:
            return self._dispatch(func, args, kwargs)
        finally:
            th.in_collective = False
            if popped:
                torch._C._autograd._push_saved_tensors_default_hooks(top[0], top[1])

    def _outputs(self, info, phase, args, outs, th):
        """Retags, labels and describes the storages the op created among `outs`: not an
        argument returned (an in-place op), nor a tensor over an argument's storage
        (_unsafe_view, whose schema says no alias)."""
        ctx = self.ctx
        kind = info[2]
        input_ptrs = None
        for o in outs:
            for a in args:
                if o is a:
                    break
            else:
                if input_ptrs is None:  # before the output: a CUDA input seen first is older
                    input_ptrs = [self._addr(a) for a in _tensors_in(args)]
                ptr = self._addr(o)
                if not ptr or ptr in input_ptrs:
                    continue  # a view or an in-place result: not born here
                dtype = o.dtype
                if phase == P.PHASE_BACKWARD:
                    label = th.node_label
                    ctx.retag(ptr, P.ROLE_ADJOINT, 0)
                else:
                    label = th.modules[-1][2] if th.modules else 0
                    if kind != _OP_PLAIN:
                        src = _tensors_in(args)
                        source = src[0] if src else None
                        ctx.retag(ptr, P.ROLE_DUPLICATE,
                                  self._addr(source) if source is not None else 0)
                        if kind == _OP_CAST and dtype == torch.int64 and source is not None \
                                and source.dtype in _NARROW_INDEX_DTYPES:
                            label = ctx.name(P.AD_LABEL_INDEX_WIDENED)
                    elif phase != P.PHASE_OPTIMIZER:  # the step's scratch stays workspace;
                        ctx.retag(ptr, P.ROLE_ACTIVATION, 0)  # its state is tagged when stored
                if label:
                    ctx.label(ptr, label)
                ctx.describe(ptr, _DTYPES.get(dtype, P.DTYPE_UNKNOWN), o.shape)
