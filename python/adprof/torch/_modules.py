"""Hook point 3, modules and parameters: global module forward pre/post hooks give the module
path ("model.layers.2.mlp.fc1"), the parameters (first seen: parameter role, labelled with their
path, with gradient hooks), the batch (input role) and the forward phase; each top-level
forward begins an iteration."""

import functools
import itertools
import sys
import weakref

import torch

from .. import _protocol as P
from ._common import _DTYPES, Tensor, _compiling, _guarded, _tensors_in, accumulate_grad_node

_HAS_POST_ACCUMULATE_HOOK = hasattr(Tensor, "register_post_accumulate_grad_hook")  # 2.1+
# 2.x: the autograd sequence number the next node made on this thread will have
_next_sequence_nr = getattr(torch._C._autograd, "_get_sequence_nr", None)



# torch.compile traces the global module hooks into its graphs: there ours do nothing (a call
# into adprof would break the graph, and a graph broken in two computes differently). The
# compiled model's wrapper is called eagerly: its hooks stand for the model's call (its path,
# parameters, batch, forward phase); the modules inside run as one compiled graph.


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



class ModuleHooks:
    """Instrumentation's module and parameter hooks (a mixin: the state is Instrumentation's)."""

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
        label = self._root_label(module)
        variable = None  # the __main__ variable that holds the root: only for printed fix code
        if main is not None:
            for key, value in list(vars(main).items()):
                if value is module and not key.startswith("_"):
                    variable = key
                    break
        self._register_tree(module, label)
        if not self._listener_failed:
            self._tell("on_root", module, label, variable)

    def _root_label(self, module):
        """A root module's label: its class name, lower case ("net" for a Net), so that labels,
        and `adprof diff` across two versions of a script, do not change when the script renames
        the variable that holds the model (they were named after it). A second root of a class
        already seen (a teacher and its student) is "net#2", by order of first call."""
        base = type(module).__name__.lower()
        roots = self.root_labels
        label, n = base, 1
        while label in roots.values():
            n += 1
            label = f"{base}#{n}"
        roots[id(module)] = label
        weakref.finalize(module, roots.pop, id(module), None)
        return label

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
            self._adopt_param(p, prefix + "." + name, module)

    def _adopt_param(self, p, path, owner):
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
            self._hook_grads(p, path, owner)

    def _param_path(self, p):
        """The path a parameter was adopted with (None: not adopted; an id reused by a new
        tensor after the old one died is not its)."""
        entry = self.param_paths.get(id(p))
        return entry[1] if entry is not None and entry[0]() is p else None

    def _hook_grads(self, p, path, owner):
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
            else:
                # 1.13: the AccumulateGrad node, kept alive so that it stays p's, for as long as
                # the module adopted with lives (the node holds p: kept by adprof alone, every
                # parameter of a deleted model stayed alive).
                node = accumulate_grad_node(p)
                node.register_hook(accumulated)
                self.grad_nodes.setdefault(owner, []).append(node)
        finally:
            th.off -= 1

    @_guarded()
    def _module_pre(self, module, inputs):
        if _compiling():
            return
        th = self.thread
        if th.suspended:
            self._resume_mode(th)  # a forward inside the optimizer step: its ops are recorded
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
            self._enter_phase(th, P.PHASE_FORWARD)

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
