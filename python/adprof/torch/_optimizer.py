"""Hook point 5, optimizer: Optimizer.step (optimizer phase, steps; global step hooks on PyTorch
2, the class's step wrapped on 1.13), zero_grad (what it does to gradients), and a tracking dict
for optimizer.state (optimizer_state role the moment a tensor is stored there)."""

import collections
import functools
import inspect
import sys

from .. import _protocol as P
from ._common import _DTYPES, Tensor, _compiling, _guarded

_optim_module = sys.modules.get("torch.optim.optimizer") or __import__(
    "torch.optim.optimizer", fromlist=["Optimizer"])
_HAS_GLOBAL_STEP_HOOKS = hasattr(_optim_module, "register_optimizer_step_pre_hook")  # 2.0+


class _ParamState(dict):
    """optimizer.state[p]: a tensor stored here is optimizer state from that moment on."""

    __slots__ = ("owner", "param")

    def __setitem__(self, key, value):
        dict.__setitem__(self, key, value)
        if isinstance(value, Tensor):
            owner = self.owner
            owner.outside_dynamo(owner._state_tensor, self.param, key, value)

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



def _closure(args, kwargs):
    """The closure given to Optimizer.step(closure=None), or None."""
    closure = kwargs.get("closure") if kwargs else None
    return closure if closure is not None else (args[0] if args else None)


class OptimizerHooks:
    """Instrumentation's optimizer hooks (a mixin: the state is Instrumentation's)."""

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
        cls = type(opt)
        step = cls.step
        if not _HAS_GLOBAL_STEP_HOOKS:  # 1.13: wrap step of this optimizer's class
            if not hasattr(step, "__adprof_wrapped__"):
                cls.step = self._wrap_step(step)
                self._undo.append(lambda: setattr(cls, "step", step))
        elif getattr(step, "hooked", False) and not hasattr(step, "__adprof_ends_raised__"):
            # a class PyTorch hooked before adprof was installed (the explicit API's optimizer,
            # made before profile()): its step ends a step that raises too
            cls.step = self._end_raised_steps(step)
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
            self._step_begin(opt, _closure(args, kwargs))
            try:
                return original(opt, *args, **kwargs)
            finally:
                self._step_end(opt)
        step.__adprof_wrapped__ = original
        return step

    def _wrap_profile_hook_step(self, original):
        """2.x: Optimizer.profile_hook_step makes the step each optimizer class runs, the one
        that calls the step hooks; ours ends a step that raises (_end_raised_steps)."""
        def profile_hook_step(func):
            return self._end_raised_steps(original(func))
        return profile_hook_step

    def _end_raised_steps(self, hooked):
        """`hooked`, a step that calls the step hooks, ending a step that raises: the post hooks
        never run then, so the wrapper ends it, as 1.13's wrapped step does in its finally
        (before, its scope stayed open over the rest of the run and the thread's open steps
        never emptied again: the program's later steps, after it caught the exception, were no
        steps). Nothing of adprof's runs on the step's way when it returns."""
        @functools.wraps(hooked)
        def step(*args, **kwargs):
            try:
                return hooked(*args, **kwargs)
            except BaseException:
                self._step_post_hook_outside_dynamo(args[0] if args else None, args, kwargs)
                raise
        step.__adprof_ends_raised__ = True
        return step

    # 2.x: the global step hooks, called outside torch.compile's tracing (a compiled step).
    def _step_pre_hook_outside_dynamo(self, opt, args, kwargs):
        self.outside_dynamo(self._step_pre_hook, opt, args, kwargs)

    def _step_post_hook_outside_dynamo(self, opt, args, kwargs):
        self.outside_dynamo(self._step_post_hook, opt, args, kwargs)

    @_guarded()
    # A subclass whose step calls its base's runs them twice, one call inside the other: only
    # the outermost begins and ends the step.
    def _step_pre_hook(self, opt, args, kwargs):
        th = self.thread
        stack = getattr(th, "steps_open", None)
        if stack is None:
            stack = th.steps_open = []
        if stack and stack[-1] is not opt:
            stack.clear()  # a step whose post hook never ran (it raised)
        stack.append(opt)
        if len(stack) == 1:
            self._step_begin(opt, _closure(args[1:], kwargs))  # (args: the step's, self first)

    # Also the end of a step that raised (_end_raised_steps): its post hook did not run.
    def _step_post_hook(self, opt, args, kwargs):
        stack = getattr(self.thread, "steps_open", None)
        if stack:
            stack.pop()
            if not stack:
                self._step_end(opt)

    def _step_begin(self, opt, closure):
        th = self.thread
        th.optimizer = 1  # also resets a step whose post hook never ran (it raised)
        self._leave_step_scope(th)  # (the same)
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
        self._enter_phase(th, P.PHASE_OPTIMIZER)
        self._enter_step_scope(opt, closure, th)
        self._tell("on_step_begin", opt, self.steps)

    @_guarded()
    def _enter_step_scope(self, opt, closure, th):
        """A step on the CPU runs as one op scope, "<class>.step", without the dispatch mode:
        every op would pay the mode's round trip (Adam: ten a parameter, half the ops of a
        small model's training step), and what they allocate is the step's scratch (workspace,
        as in an op scope) or state (optimizer_state the moment it is stored). Not with a
        closure (it runs the model), nor with a parameter on a GPU (the mode declares CUDA
        blocks), nor in a process of a torch.distributed job (a collective in the step, a
        sharded optimizer's, must run through the mode: _collective keeps our saved-tensor hooks
        out of the work gloo keeps), nor in a step torch.compile traces (the dispatch stack is
        its own then), nor where the mode cannot leave the stack (_suspend_mode). The mode comes
        back at the step's end, or earlier for a module's forward or a backward run inside it."""
        if closure is not None or _compiling():
            return
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            return
        for group in opt.param_groups:
            for p in group["params"]:
                if p.is_cuda:
                    return
        if not self._suspend_mode(th):
            return
        ctx = self.ctx
        th.step_scope = ctx.set_role(P.ROLE_WORKSPACE)
        ctx.op_begin(ctx.name(type(opt).__name__ + ".step"), next(self.instances))

    def _leave_step_scope(self, th):
        if th.step_scope is not None:
            ctx = self.ctx
            ctx.op_end()
            ctx.set_role(th.step_scope)
            th.step_scope = None
        self._resume_mode(th)

    @_guarded()
    def _step_end(self, opt):
        th = self.thread
        step = self.steps
        try:
            for param, values in list(opt.state.items()):
                if isinstance(values, dict):
                    for key, value in values.items():
                        if isinstance(value, Tensor):
                            self._state_tensor(param, key, value, True)
        except Exception:
            pass
        self._leave_step_scope(th)
        self.steps += 1
        if self.pending_step is None:
            self.pending_step = self.next_mark
        th.optimizer = 0
        self._leave_scope(th)
        self._tell("on_step_end", opt, step)

    @_guarded()
    def _state_tensor(self, param, key, value, unless_tagged=False):
        """`value`, stored as optimizer.state[param][key], is optimizer state. unless_tagged:
        not again when that entry already held this tensor over this storage when it was last
        tagged (the end of each step tags the whole state: a tensor stored without __setitem__
        is found there)."""
        ptr = self._addr(value)
        if not ptr:
            return
        entry = (id(param), key)
        tagged = (id(value), ptr)
        if unless_tagged and self.tagged_state.get(entry) == tagged:
            return
        self.tagged_state[entry] = tagged  # one entry per parameter and key, replaced
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
            # the call as the script wrote it: the fix names the line it replaces
            call = "zero_grad(%s)" % ", ".join(
                [repr(a) for a in args] + ["%s=%r" % kv for kv in kwargs.items()])
            # (a compiled function that calls it: a graph break here, not deep in the listener)
            self.outside_dynamo(self._tell, "on_zero_grad", owner, bool(set_to_none), call)
            return original(owner, *args, **kwargs)
        zero_grad.__adprof_wrapped__ = original
        return zero_grad
