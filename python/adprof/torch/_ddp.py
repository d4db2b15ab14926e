"""DistributedDataParallel's internals, unseen: the ops DDP's C++ Reducer runs on tensors of its
own (its gradient buckets and their views) run with the instrumentation off this thread's
stacks (our dispatch mode and our saved-tensor hooks), so that those tensors get no Python
object from adprof (docs/PYTORCH.md, "Training jobs": what the instrumentation leaves alone).

Why: every tensor of an op a TorchDispatchMode sees is handed to Python, and PyTorch keeps the
Python object it made for as long as the C++ tensor lives (PyObject preservation). Without
adprof the Reducer's buckets have none. A bucket is held by the gloo work that reduces it, and
gloo's worker thread may drop the work last: with a Python object there, that thread must take
the GIL to release it, and one that asks for it after the interpreter began finalizing is ended
inside a noexcept destructor (std::terminate: "terminate called without an active exception",
a rank dead of SIGABRT at exit; pytorch/pytorch#190489). A profiler must not make that happen.

Where the Reducer runs ops, and how each is kept from our stacks:
- its methods called from Python (the constructor, which makes the buckets, _rebuild_buckets,
  prepare_for_forward/backward, _delay_all_reduce, ...) and DDP's module-level helpers
  (_broadcast_coalesced, _verify_params_across_processes): wrapped (`_Suspended`);
- its autograd hook, a post hook of each parameter's AccumulateGrad node: the constructor's
  wrapper first adds a post hook of ours to those nodes, which therefore runs just before the
  Reducer's (a node runs its post hooks in the order they were added) and takes the
  instrumentation off; the engine puts the thread's state back when the node ends (it sets
  the backward's thread-local state around each node). The node's own work, the gradient's
  accumulation, comes before its post hooks: it is seen;
- its finalize_backward, one of the backward's final callbacks: a callback of ours queued
  before it (from our hook) takes the instrumentation off, and one that callback queues in
  turn, after the Reducer's, puts it back.
What DDP allocates in there keeps the thread's role outside an op (foreign): it is DDP's, not
the model's. A comm hook the program registers runs inside the Reducer's hook, and a final
callback the program queues after its first gradient inside the bracket: their ops are not
seen either.
"""

import torch

from ._common import accumulate_grad_node
from ._dispatch import _Mode, _RawMode

# 2.x: the innermost saved-tensor hooks of this thread, (pack, unpack) or None
_TOP_HOOKS = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
_HAS_STACK = hasattr(torch._C, "_pop_torch_dispatch_stack") and hasattr(
    torch._C, "_get_dispatch_stack_at")
_CURRENT_NODE = getattr(torch._C, "_current_autograd_node", None)
_GRAPH_TASK_ID = getattr(torch._C, "_current_graph_task_id", None)

# DDP's module-level helpers that run collectives on buffers of their own (flattened copies).
_HELPERS = ("_broadcast_coalesced", "_verify_params_across_processes")


def _reducer_class():
    try:
        import torch.distributed as dist
        return dist.Reducer if dist.is_available() else None
    except (ImportError, AttributeError):
        return None


class _Suspended:
    """The scope of a Reducer call: the instrumentation off this thread's stacks, then back."""

    __slots__ = ("owner", "taken")

    def __init__(self, owner):
        self.owner = owner
        self.taken = None

    def __enter__(self):
        self.taken = self.owner._take_off()
        return self

    def __exit__(self, *exc):
        if self.taken is not None:
            self.owner._put_back(self.taken)
            self.taken = None
        return False


class DataParallelHooks:
    """Instrumentation's part that keeps DDP's internals unseen (a mixin: the state is
    Instrumentation's: _modes, thread, _patch)."""

    def _install_ddp(self):
        reducer = _reducer_class()
        if reducer is None:
            return
        self.ddp_final_task = None  # the graph task whose final callbacks are bracketed
        for name, method in list(reducer.__dict__.items()):
            if callable(method) and (name == "__init__" or not name.startswith(
                    ("__", "_pybind11"))):
                self._patch(reducer, name, self._unseen(method, name == "__init__"))
        import torch.distributed as dist
        for name in _HELPERS:
            helper = getattr(dist, name, None)
            if callable(helper):
                self._patch(dist, name, self._unseen(helper, False))

    def _unseen(self, method, constructor):
        def run_unseen(*args, **kwargs):
            # The constructor adds the Reducer's hooks to its parameters' AccumulateGrad nodes:
            # ours go first (held until then: a node lives as long as someone holds it).
            nodes = self._hook_reducer_turn(args, kwargs) if constructor else None
            with _Suspended(self):
                out = method(*args, **kwargs)
            del nodes
            return out
        run_unseen.__name__ = getattr(method, "__name__", "reducer_method")
        run_unseen.__doc__ = getattr(method, "__doc__", None)
        return run_unseen

    def _hook_reducer_turn(self, args, kwargs):
        """Adds _reducer_turn as a post hook of the AccumulateGrad node of each parameter a
        Reducer is about to hook (its constructor's first argument); returns the nodes."""
        nodes = []
        try:
            params = args[1] if len(args) > 1 else kwargs.get("params", ())
            th = self.thread
            th.off += 1
            try:
                for p in params:
                    if isinstance(p, torch.Tensor) and p.requires_grad and p.is_leaf:
                        nodes.append(accumulate_grad_node(p))
            finally:
                th.off -= 1
            for node in nodes:
                node.register_hook(self._reducer_turn)
        except Exception as e:  # a Reducer we do not know: its backward part stays seen
            self._internal_error("_hook_reducer_turn", e)
        return nodes

    # ---------------------------------------------------------------- our stacks
    def _take_off(self):
        """Takes our dispatch mode and saved-tensor hooks off this thread's stacks where they
        are on top (a program's mode or hooks above ours: left as they are, and seen). On a
        thread Python did not start (autograd's device threads) they are the ones the backward
        copied from its caller's. Returns what _put_back needs, or None when nothing was taken;
        never raises into the program."""
        try:
            taken_mode = None
            th = self.thread
            if th.raw_active:  # 1.13: our mode set directly
                torch._C._set_torch_dispatch_mode(None)
                taken_mode = th.raw
            elif _HAS_STACK:
                n = torch._C._len_torch_dispatch_stack()
                top = torch._C._get_dispatch_stack_at(n - 1) if n else None
                if isinstance(top, _Mode) and top.owner is self:
                    taken_mode = torch._C._pop_torch_dispatch_stack(None)
            taken_hooks = None
            if _TOP_HOOKS is not None:
                top = _TOP_HOOKS(False)
                if top is not None and top[0] == self._pack:
                    torch._C._autograd._pop_saved_tensors_default_hooks()
                    taken_hooks = top
        except Exception as e:
            self._internal_error("_take_off", e)
            return None
        if taken_mode is None and taken_hooks is None:
            return None
        return taken_mode, taken_hooks

    def _put_back(self, taken):
        try:
            mode, hooks = taken
            if hooks is not None:
                torch._C._autograd._push_saved_tensors_default_hooks(hooks[0], hooks[1])
            if mode is None:
                return
            if isinstance(mode, _RawMode):
                torch._C._set_torch_dispatch_mode(mode)
            else:
                torch._C._push_on_torch_dispatch_stack(mode)
        except Exception as e:
            self._internal_error("_put_back", e)

    # ---------------------------------------------------------------- backward
    def _reducer_turn(self, grad_inputs, grad_outputs):
        """A post hook of a DDP parameter's AccumulateGrad node, just before the Reducer's:
        the rest of this node runs without our stacks."""
        try:
            if _CURRENT_NODE is not None and _CURRENT_NODE() is None:
                return  # not in the engine's node (compiled autograd): nothing would put
                # our stacks back
            if self._take_off() is None:
                return
            # (no _put_back: the engine restores the thread's state when this node ends)
            task = _GRAPH_TASK_ID() if _GRAPH_TASK_ID is not None else None
            if task is None or task != self.ddp_final_task:
                # The Reducer queues its finalize_backward when its last bucket is ready,
                # after this: our bracket goes first.
                self.ddp_final_task = task
                torch.autograd.Variable._execution_engine.queue_callback(self._final_off)
        except Exception as e:
            self._internal_error("_reducer_turn", e)

    def _final_off(self):
        taken = self._take_off()  # (never raises)
        if taken is not None:
            # Queued now, it runs after every callback the backward queued: the Reducer's too.
            torch.autograd.Variable._execution_engine.queue_callback(
                lambda: self._put_back(taken))
