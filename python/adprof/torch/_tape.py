"""The tape listener: PyTorch's autograd told to the what-if through the AD protocol.

profiler/include/adprof/ad_protocol.h (version 3) is the contract; docs/WHATIF.md ("Engines with
layers") says what the analysis does with these events. The mapping onto autograd:

  a generation        one forward with grad enabled and the backward that reads it:
                      ad.tape.begin at the first top-level module call when none is open,
                      ad.tape.end when the outermost backward returns
  layers              every module call inside a generation: ad.tape.layer_begin / layer_end
                      (label: the module path, parent: the enclosing module call, the storages
                      of its first tensor input and output); a hook on the output tells when its
                      gradient arrives (ad.tape.layer_backward: a checkpointed segment ending
                      there would be recomputed at that moment)
  saves, releases     the saved-tensor hooks: ad.tape.save_storage / release_storage
                      (autograd's nodes are not numbered; the analysis matches a release to its
                      save by storage)
  backward            ad.tape.backward_begin (torch.autograd.backward / Tensor.backward)
  parameters          ids stable for the run: ad.tape.grad_arrived (the gradient a backward
                      delivers, from the tensor hook), ad.tape.grad_ready (.grad complete, from
                      AccumulateGrad's post hook), ad.tape.grad_zeroed (zero_grad with
                      set_to_none=False, per gradient buffer it zeroes in place)
  optimizer           ad.tape.optimizer_begin / optimizer_end around Optimizer.step

Addresses are storage data pointers (the block PyTorch's CPU allocator malloc'd), so views share
their base's address. The engine's policies are described with what a PyTorch user writes
(ad.policy); the checkpointing wording uses the protocol's placeholders ({parent}, {first},
{last}, {segments}), which the analysis fills with the chain it picked.

Every method is called synchronously on the thread where it happens and never raises into the
user's program.
"""

import threading

from .. import _protocol as P

_NONE = P.AD_NONE

# ad_protocol.h: kinds and policy ids (_protocol.py, held to the header by a test)
_TAPE_BEGIN = P.AD_TAPE_BEGIN
_TAPE_END = P.AD_TAPE_END
_SAVE = P.AD_TAPE_SAVE_STORAGE
_RELEASE = P.AD_TAPE_RELEASE_STORAGE
_BACKWARD_BEGIN = P.AD_TAPE_BACKWARD_BEGIN
_LAYER_BEGIN = P.AD_TAPE_LAYER_BEGIN
_LAYER_END = P.AD_TAPE_LAYER_END
_LAYER_BACKWARD = P.AD_TAPE_LAYER_BACKWARD
_GRAD_ARRIVED = P.AD_TAPE_GRAD_ARRIVED
_GRAD_READY = P.AD_TAPE_GRAD_READY
_GRAD_ZEROED = P.AD_TAPE_GRAD_ZEROED
_OPTIMIZER_BEGIN = P.AD_TAPE_OPTIMIZER_BEGIN
_OPTIMIZER_END = P.AD_TAPE_OPTIMIZER_END
_BACKWARD_TO_LEAF_GRADS = P.AD_BACKWARD_TO_LEAF_GRADS
_POLICY_FUSED_OPTIMIZER = P.AD_POLICY_FUSED_OPTIMIZER
_POLICY_CHECKPOINTING = P.AD_POLICY_CHECKPOINTING
_POLICY_NO_INDEX_WIDENING = P.AD_POLICY_NO_INDEX_WIDENING
_POLICY_FREE_GRADIENTS = P.AD_POLICY_FREE_GRADIENTS
# ad_protocol.h, "Schedule" (a number its comment defines, no macro): every block of a
# container, each on its own
_SCHEDULE_BLOCKS = 1

# What a PyTorch user writes to switch each policy on, and what the recorded script does.
_WORDS = {
    _POLICY_FUSED_OPTIMIZER: (
        "step each parameter in backward and drop its gradient there: one optimizer per "
        "parameter, stepped and zero_grad(set_to_none=True) in a hook "
        "(param.register_post_accumulate_grad_hook; on 1.13 a hook on the parameter's "
        "AccumulateGrad node, param.expand_as(param).grad_fn.next_functions[0][0]"
        ".register_hook), no optimizer.step() after loss.backward()",
        "optimizer.step() after loss.backward()"),
    # Checkpointing, schedule "blocks" (ad_protocol.h): each block of the container the
    # what-if picks checkpointed on its own. Code that runs on any model, without editing its
    # forward: each block's forward wrapped in torch.utils.checkpoint.
    _POLICY_CHECKPOINTING: (
        "import functools, torch.utils.checkpoint\n"
        "for block in {container}:\n"
        "    block.forward = functools.partial(torch.utils.checkpoint.checkpoint, "
        "block.forward, use_reentrant=False)",
        "{container} without torch.utils.checkpoint"),
    # The instrumentation labels an int64 copy of a narrower index tensor (ad.index_widened).
    _POLICY_NO_INDEX_WIDENING: (
        "pass the int32 index as it is, without .long() / .to(torch.int64): nn.Embedding, "
        "F.embedding, index_select and index_add take int32 indices (gather and scatter take "
        "int64 only)",
        "int32 indices widened with .long()"),
    _POLICY_FREE_GRADIENTS: (
        "optimizer.zero_grad(set_to_none=True) (or model.zero_grad(set_to_none=True))",
        "zero_grad(set_to_none=False)"),
}


def _storage_address(t):
    """The address of the block that holds t's storage (its base's for a view); 0 if none."""
    try:
        ptr = t.data_ptr()
        return ptr - t.storage_offset() * t.element_size() if ptr else 0
    except Exception:  # not a strided tensor (sparse, meta, ...)
        return 0


def _nbytes(t):
    try:
        return t.numel() * t.element_size()
    except Exception:
        return 0


def _first_tensor(values):
    import torch
    for v in values if isinstance(values, (list, tuple)) else (values,):
        if isinstance(v, torch.Tensor):
            return v
    return None


def _main_variable(obj):
    """The name of the __main__ global that holds `obj` (the script's variable), or None."""
    import sys
    main = sys.modules.get("__main__")
    for key, value in list(vars(main).items()) if main is not None else ():
        if value is obj and not key.startswith("_"):
            return key
    return None


def _free_gradients_code(owner, call):
    """zero_grad's fix as a line that replaces the script's own call."""
    return f"{owner}.zero_grad(set_to_none=True)  # in place of {owner}.{call}"


def _fused_optimizer_code(opt):
    """The fused optimizer as code pasted right after the script makes `opt`: one optimizer of
    the same class per parameter (with its group's settings that the class takes: 2.x's AdamW
    keeps Adam's decoupled_weight_decay in them), stepped and its gradient freed in
    a hook when the parameter's gradient is complete; opt.step and opt.zero_grad then do
    nothing."""
    import torch
    if hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):  # 2.1+
        hook = "    _p.register_post_accumulate_grad_hook(_step_now)\n"
    else:  # the parameter's AccumulateGrad node, kept alive so that it stays the parameter's
        hook = ("    _nodes.append(_p.expand_as(_p).grad_fn.next_functions[0][0])\n"
                "    _nodes[-1].register_hook(lambda *_, p=_p: _step_now(p))\n")
    return (f"# right after {opt} is made (a learning-rate scheduler of {opt} would not reach "
            "these):\n"
            "import inspect\n"
            f"_settings = set(inspect.signature(type({opt})).parameters) - {{\"params\"}}\n"
            f"_fused = {{p: type({opt})([p], **{{k: v for k, v in g.items() if k in _settings}})\n"
            f"          for g in {opt}.param_groups for p in g[\"params\"]}}\n"
            "def _step_now(p):\n"
            "    _fused[p].step()\n"
            "    _fused[p].zero_grad(set_to_none=True)\n"
            + ("" if "_nodes" not in hook else "_nodes = []\n") +
            "for _p in _fused:\n" + hook +
            f"{opt}.step = {opt}.zero_grad = lambda *args, **kwargs: None  # stepped in backward")


class TapeListener:
    def __init__(self, ctx):
        self.ctx = ctx
        self._active = bool(getattr(ctx, "active", False))
        self._lock = threading.Lock()
        self._thread = None       # the thread of the open generation
        self._gen = -1            # the open generation (-1: none)
        self._open = False
        self._backward_depth = 0  # nested backward calls (a checkpoint's own backward)
        self._layers = []         # ids of the open layers (innermost last)
        self._next_layer = 0
        self._params = {}         # id(param) -> parameter id
        self._free_gradients = None  # what the program's zero_grad does (None: not seen yet)
        self._free_words = None  # zero_grad's fix, naming the script's variable
        self._roots = {}  # root label -> (__main__ variable or None, class name, HF switch)
        self._fused_described = False  # the fused optimizer's fix names the optimizer
        if self._active:
            self._describe()

    # ---- emission ----
    def _emit(self, kind, values):
        self.ctx.annotate(kind, values)

    def _describe(self):
        import torch
        ctx = self.ctx
        ctx.annotate(P.AD_ENGINE, [P.AD_PROTOCOL_VERSION, ctx.name("pytorch"),
                                   ctx.name(torch.__version__)])
        for policy in (_POLICY_FUSED_OPTIMIZER, _POLICY_NO_INDEX_WIDENING):
            on_words, off_words = _WORDS[policy]
            ctx.annotate(P.AD_POLICY, [policy, 0, ctx.name(on_words), ctx.name(off_words)])
        self._describe_checkpointing(_WORDS[_POLICY_CHECKPOINTING])
        self._describe_free_gradients(False)

    def _describe_checkpointing(self, words, note=""):
        on_words, off_words = words
        self.ctx.annotate(P.AD_POLICY, [_POLICY_CHECKPOINTING, 0, self.ctx.name(note + on_words),
                                        self.ctx.name(off_words), _SCHEDULE_BLOCKS])

    def on_root(self, module, label, variable):
        """A model's root module was first seen: labelled `label` (its class's name, which does
        not change when the script renames its variables), held by the __main__ variable
        `variable` (None: none, e.g. a local of main()). The checkpointing wording in its
        library's terms, as code that names the model as the program holds it. A root without
        parameters (a loss module called at the top level) has no blocks to checkpoint and
        changes nothing: the wording stays the model's."""
        if not self._active:
            return
        try:
            if not any(True for _ in module.parameters()):
                return
        except Exception:  # a module whose parameters() fails: not the program's concern here
            return
        switch = None  # transformers' own (5.x renames it; the old name warns it is deprecated)
        if getattr(module, "supports_gradient_checkpointing", False):
            switch = next((name for name in ("activation_checkpointing_enable",
                                              "gradient_checkpointing_enable")
                           if callable(getattr(module, name, None))), None)
        # (what the words need, not the module: the listener keeps no model alive)
        self._roots[label] = (variable, type(module).__name__, switch)
        self._describe_checkpointing(*self._checkpointing_words())

    def _checkpointing_words(self):
        """(on, off, note): the checkpointing code for the roots seen so far. The chain the
        what-if picks lies in one of them ({root}, its label): the code names that model by the
        script's variable (several: a dict from label to variable) and the container by its path
        below the root ({container_path}; get_submodule("") is the model itself)."""
        on_words, off_words = _WORDS[_POLICY_CHECKPOINTING]
        roots = list(self._roots.items())
        if all(variable is not None for _, (variable, _, _) in roots):
            model = roots[0][1][0] if len(roots) == 1 else "{%s}[\"{root}\"]" % ", ".join(
                f'"{label}": {variable}' for label, (variable, _, _) in roots)
            on_words = on_words.replace("for block in {container}:",
                                        f'for block in {model}.get_submodule("{{container_path}}"):')
        label, (variable, class_name, switch) = roots[-1]
        if len(roots) == 1 and switch is not None:
            on_words = f"{variable or '{root}'}.{switch}()"
            off_words = f"{{root}} without {switch}()"
        note = f"(with {label} your {class_name}, as this program holds it) " \
            if len(roots) == 1 and variable is None else ""
        return (on_words, off_words), note

    def _describe_free_gradients(self, on):
        on_words, off_words = _WORDS[_POLICY_FREE_GRADIENTS]
        self.ctx.annotate(P.AD_POLICY, [_POLICY_FREE_GRADIENTS, 1 if on else 0,
                                        self.ctx.name(self._free_words or on_words),
                                        self.ctx.name(off_words)])

    def _bits(self):
        return 1 << _POLICY_FREE_GRADIENTS if self._free_gradients else 0

    def _param_id(self, param):
        key = id(param)
        pid = self._params.get(key)
        if pid is None:
            pid = self._params[key] = len(self._params)
        return pid

    def _mine(self):
        return self._open and threading.get_ident() == self._thread

    # ---- the listener interface (docs: the notes' "Listener interface") ----
    def on_op(self, name, func, inputs, outputs, phase):
        pass

    def on_save(self, tensor):
        if not self._active or not self._mine():
            return None
        addr = _storage_address(tensor)
        if not addr:
            return None
        self._emit(_SAVE, [addr, _nbytes(tensor)])
        return (self._gen, addr)

    def on_release(self, token):
        if not token or not self._open or token[0] != self._gen:
            return
        self._emit(_RELEASE, [token[1]])

    def on_module_enter(self, path, module, inputs):
        if not self._active:
            return
        import torch
        if not self._open:
            if self._layers or not torch.is_grad_enabled():
                return
            with self._lock:
                self._gen += 1
                self._open = True
                self._thread = threading.get_ident()
                self._next_layer = 0
            self._emit(_TAPE_BEGIN, [1, self._gen, self._bits()])
        if not self._mine():
            return
        lid = self._next_layer
        self._next_layer += 1
        parent = self._layers[-1] if self._layers else _NONE
        t = _first_tensor(inputs)
        addr = _storage_address(t) if t is not None else 0
        self._emit(_LAYER_BEGIN, [lid, self.ctx.name(path), parent, addr or _NONE])
        self._layers.append(lid)

    def on_module_exit(self, path, module, outputs):
        if not self._mine() or not self._layers:
            return
        lid = self._layers.pop()
        t = _first_tensor(outputs)
        addr = _storage_address(t) if t is not None else 0
        self._emit(_LAYER_END, [lid, addr or _NONE])
        if t is not None and t.requires_grad and self._backward_depth == 0:
            gen, emit = self._gen, self._emit

            def arrived(_grad, gen=gen, lid=lid):
                if self._open and self._gen == gen:
                    emit(_LAYER_BACKWARD, [lid])

            try:
                t.register_hook(arrived)
            except Exception:  # a tensor that takes no hooks: no backward mark for it
                pass

    def on_backward_begin(self, roots):
        self._backward_depth += 1
        if self._backward_depth == 1 and self._mine():
            self._emit(_BACKWARD_BEGIN, [_NONE, 0, self._bits(), _BACKWARD_TO_LEAF_GRADS])

    def on_backward_end(self):
        self._backward_depth = max(0, self._backward_depth - 1)
        if self._backward_depth == 0 and self._mine():
            self._emit(_TAPE_END, [1, self._gen])
            self._open = False
            self._layers = []

    def on_grad(self, param_path, param, grad):
        if not self._active or grad is None:
            return
        addr = _storage_address(grad)
        if addr:
            self._emit(_GRAD_ARRIVED, [self._param_id(param), addr, _nbytes(grad)])

    def on_grad_accumulated(self, param_path, param):
        if not self._active:
            return
        g = param.grad
        addr = _storage_address(g) if g is not None else 0
        if addr:
            self._emit(_GRAD_READY, [self._param_id(param), addr, _nbytes(g)])

    def on_zero_grad(self, optimizer, set_to_none, call="zero_grad()"):
        if not self._active:
            return
        free = bool(set_to_none)
        if not free and self._free_words is None:
            owner = _main_variable(optimizer)
            if owner is not None:  # the fix as code: the line that replaces the script's call
                self._free_words = _free_gradients_code(owner, call)
                self._free_gradients = None  # described again below, with these words
        if free != self._free_gradients:
            self._free_gradients = free
            self._describe_free_gradients(free)
        if free:
            return
        for p in _parameters_of(optimizer):
            g = p.grad
            addr = _storage_address(g) if g is not None else 0
            if addr:
                self._emit(_GRAD_ZEROED, [self._param_id(p), addr, _nbytes(g)])

    def on_step_begin(self, optimizer, step):
        if not self._active:
            return
        if not self._fused_described:
            self._fused_described = True
            name = _main_variable(optimizer)
            if name is not None and getattr(optimizer, "param_groups", None):
                self.ctx.annotate(P.AD_POLICY, [
                    _POLICY_FUSED_OPTIMIZER, 0,
                    self.ctx.name(_fused_optimizer_code(name)),
                    self.ctx.name(_WORDS[_POLICY_FUSED_OPTIMIZER][1])])
        self._emit(_OPTIMIZER_BEGIN, [step])

    def on_step_end(self, optimizer, step):
        if self._active:
            self._emit(_OPTIMIZER_END, [step])


def _parameters_of(owner):
    """The parameters an Optimizer.zero_grad or a Module.zero_grad resets."""
    groups = getattr(owner, "param_groups", None)
    if groups is not None:
        return [p for group in groups for p in group["params"]]
    parameters = getattr(owner, "parameters", None)
    return list(parameters()) if callable(parameters) else []
