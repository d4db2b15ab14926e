"""PyTorch's own account of a training step's memory by role, for the exactness tests.

The oracle wraps the instrumentation's op entry (so it sees each op adprof records, first; a
dispatch mode of its own would miss the ops autograd's engine runs to unpack saved tensors) and
sets autograd node hooks. It never asks adprof what a tensor is: before each op of the backward pass
and of the optimizer step it computes, from PyTorch's objects alone,
  parameter        the unique storages of model.parameters()
  optimizer_state  the unique storages of the tensors in optimizer.state
  forward_cache    the unique storages autograd still holds for backward (every `_saved_*`
                   tensor of the nodes reachable from the loss; a node that ran has released
                   its own, and reading them raises), less parameters and the model's inputs
  adjoint          the unique storages of the gradients alive: every parameter's .grad, the
                   gradients a node returned that the node they flow to has not yet run
                   (its post hook consumes them), what the running node made so far, and
                   the seed backward() made (held by its frame until it returns)
and keys it by the instance number adprof's op scope for that op will carry
(adprof.torch.instrumentation().ops_seen() + 1; the aten::detach that reading a saved tensor
runs is kept out of the recording).
It also computes the same account right after each such op returns ("after": what the op
left). An optimizer step on the CPU runs as one op scope without the dispatch mode
(docs/PYTORCH.md): its account is made before the step (keyed by the scope's instance, the next
one) and after each tensor the step stores in optimizer.state ("stores": the k-th account is
the state after k stores). At exit it writes {"views": {instance: {role: bytes}}, "after":
{instance: {...}}, "stores": {instance: [{...}, ...]}} to the side file given on the command
line; the test compares the view of the op open at the report's peak with the report (or, when
that op is a step that had stored k tensors before the peak, stores[k - 1]), or, when the peak
falls between two ops (PyTorch 2.x: a small allocation of Python's or of autograd's engine,
foreign bytes, can top the plateau the last op left), the "after" account of the op that ended
last on that thread.

Byte counts are storage sizes (nbytes of the storage), which is what the interposer records for
a CPU storage (c10's posix_memalign of exactly that size).
"""

import json
import sys

import torch
import adprof.torch as adprof_torch

if hasattr(torch.Tensor, "untyped_storage"):
    def _storage(t):
        s = t.untyped_storage()
        return s.data_ptr(), s.nbytes()
else:
    def _storage(t):
        s = t._storage()
        return s.data_ptr(), s.nbytes()


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


class RolesOracle:
    def __init__(self, model, optimizer, side_file):
        self.model = model
        self.optimizer = optimizer
        self.side_file = side_file
        self.phase = None  # "backward" / "optimizer" while the script says so
        self.loss = None
        self.inputs = {}  # storage -> bytes of the tensors given to the model
        self.in_flight = {}  # gradients returned by a node, not yet consumed
        self.node_outputs = {}  # storages the running backward node made so far
        self.seeds = None  # the gradients backward() starts from, alive until it returns
        self.views = {}
        self.after = {}
        self.stores = {}
        self._saved_names = {}  # node class -> its _saved_* attribute names
        self._released = {}  # node -> its saved attributes autograd released (this backward)
        self.ins = adprof_torch.instrumentation()
        if self.ins is None:
            sys.exit("roles_oracle: not under adprof with the PyTorch instrumentation")

    # -- what the script tells the oracle
    def forward_input(self, *tensors):
        self.inputs = dict(_storage(t) for t in tensors)

    def begin_backward(self, loss):
        self.loss = loss
        self._released = {}
        self.in_flight = {}
        self.node_outputs = {}
        self.seeds = None
        seen = set()
        stack = [loss.grad_fn]
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            node.register_hook(self._node_done)
            stack.extend(n for n, _ in node.next_functions)
        self.phase = "backward"

    def end_phase(self):
        self.phase = None
        self.seeds = None

    def begin_step(self):
        self.phase = "optimizer"
        # The step's first op scope (one for the whole step when it runs without the mode)
        self.views[self.ins.ops_seen() + 1] = self._unrecorded_view()

    def _node_done(self, grad_inputs, grad_outputs):
        if self.seeds is None:
            # What the first node consumed, made in this backward, is the seed
            # (torch.autograd.backward's ones_like for a scalar loss): its Python frame holds
            # it until backward returns.
            consumed = {_storage(g)[0] for g in _tensors(grad_outputs) if not g.is_cuda}
            self.seeds = {p: n for p, n in self.node_outputs.items() if p in consumed}
        for g in _tensors(grad_outputs):
            if not g.is_cuda:
                self.in_flight.pop(_storage(g)[0], None)
        self.node_outputs = {}
        for g in _tensors(grad_inputs):
            if not g.is_cuda:
                ptr, size = _storage(g)
                self.in_flight[ptr] = size

    def __enter__(self):
        self._recorded = self.ins._dispatch
        self.ins._dispatch = self._dispatch
        self._recorded_state = self.ins._state_tensor
        self.ins._state_tensor = self._state_tensor
        return self

    def __exit__(self, *exc):
        self.ins._dispatch = self._recorded
        self.ins._state_tensor = self._recorded_state
        return False

    def _state_tensor(self, param, key, value, unless_tagged=False):
        # A tensor stored in optimizer.state (__setitem__: unless_tagged is False) is retagged;
        # the account after it, in the op scope open then (the step's, without the mode).
        self._recorded_state(param, key, value, unless_tagged)
        if self.phase == "optimizer" and not unless_tagged:
            self.stores.setdefault(self.ins.ops_seen(), []).append(self._unrecorded_view())

    # -- PyTorch's view before and after each op
    def _dispatch(self, func, args, kwargs):
        if self.ins.thread.off or self.phase is None:
            return self._recorded(func, args, kwargs)
        instance = self.ins.ops_seen() + 1
        self.views[instance] = self._unrecorded_view()
        out = self._recorded(func, args, kwargs)
        if self.phase == "backward":
            inputs = {_storage(t)[0] for a in args for t in _tensors(a)}
            for t in _tensors(out):
                ptr, size = _storage(t)
                if ptr and ptr not in inputs:
                    self.node_outputs[ptr] = size
        self.after[instance] = self._unrecorded_view()
        return out

    def _unrecorded_view(self):
        # Reading saved tensors runs aten::detach: not ops of the program, so not recorded.
        self.ins.thread.off += 1
        try:
            return self._view()
        finally:
            self.ins.thread.off -= 1

    def _view(self):
        params = dict(_storage(p) for p in self.model.parameters())
        state = {}
        for values in self.optimizer.state.values():
            for v in values.values():
                if isinstance(v, torch.Tensor):
                    ptr, size = _storage(v)
                    state[ptr] = size
        cache = {}
        scalars = set()  # 0-dim saved tensors: Python numbers autograd saved (see below)
        if self.loss is not None:
            seen = set()
            stack = [self.loss.grad_fn]
            while stack:
                node = stack.pop()
                if node is None or node in seen:
                    continue
                seen.add(node)
                stack.extend(n for n, _ in node.next_functions)
                released = self._released.get(node)
                for attr in self._saved_attributes(node):
                    if released is not None and attr in released:
                        continue
                    try:
                        value = getattr(node, attr)
                    except RuntimeError:  # released: the node ran
                        # (1.13 builds each such error's C++ backtrace: a millisecond; asked
                        # once per node)
                        self._released.setdefault(node, set()).add(attr)
                        continue
                    for t in _tensors(value):
                        ptr, size = _storage(t)
                        if ptr and ptr not in params and ptr not in self.inputs:
                            cache[ptr] = size
                            if t.dim() == 0:
                                scalars.add(ptr)
        grads = dict(self.in_flight)
        grads.update(self.node_outputs)
        grads.update(self.seeds or {})
        for p in self.model.parameters():
            if p.grad is not None:
                ptr, size = _storage(p.grad)
                grads[ptr] = size
        # A Python number an op turned into a tensor ("wrapped number": the 0.5 of `x * 0.5`)
        # and autograd saved is saved without the saved-tensor hooks, and no dispatch mode sees
        # it (the mode gets the number back): PyTorch holds it, adprof cannot see it saved.
        # Such saves are 0-dim; their bytes are given apart, so that a test can allow them.
        return {"parameter": sum(params.values()), "optimizer_state": sum(state.values()),
                "forward_cache": sum(cache.values()), "adjoint": sum(grads.values()),
                "forward_cache_scalars": sum(cache[p] for p in scalars)}

    def _saved_attributes(self, node):
        """The `_saved_*` attribute names of a node's class (dir() of every node for every op
        was most of the oracle's time); a custom autograd Function's node (reentrant
        checkpoint's, torch.compile's) holds what it saved as `saved_tensors`."""
        names = self._saved_names.get(type(node))
        if names is None:
            names = [a for a in dir(node) if a.startswith("_saved_")]
            if not names and hasattr(type(node), "saved_tensors"):
                names = ["saved_tensors"]
            self._saved_names[type(node)] = names
        return names

    def write(self):
        with open(self.side_file, "w") as f:
            json.dump({"views": self.views, "after": self.after, "stores": self.stores}, f)
