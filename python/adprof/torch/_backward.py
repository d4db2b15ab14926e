"""Hook point 4, backward: the wrappers of torch.autograd.backward/grad and Tensor.backward (the
backward phase), and the labels of gradients (the module whose forward made each autograd
node)."""

import functools

from .. import _protocol as P
from ._common import Tensor


class BackwardHooks:
    """Instrumentation's backward hooks (a mixin: the state is Instrumentation's)."""

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

    # ---------------------------------------------------------------- backward
    def _wrap_backward(self, original, method=False):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            th = self.thread
            if th.suspended:
                self._resume_mode(th)  # a backward inside the optimizer step
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
            self._enter_phase(th, P.PHASE_BACKWARD)
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
