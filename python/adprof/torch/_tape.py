"""The tape listener: what the instrumentation tells the what-if (owner: the what-if work).

This version does nothing; the interface is docs/notes' "Listener interface". Every method is
called synchronously on the thread where it happens, and must never raise into the user's
program (the instrumentation guards the calls anyway).
"""


class TapeListener:
    def __init__(self, ctx):
        self.ctx = ctx

    def on_op(self, name, func, inputs, outputs, phase):
        pass

    def on_save(self, tensor):
        return None

    def on_release(self, token):
        pass

    def on_module_enter(self, path, module, inputs):
        pass

    def on_module_exit(self, path, module, outputs):
        pass

    def on_backward_begin(self, roots):
        pass

    def on_backward_end(self):
        pass

    def on_grad(self, param_path, param, grad):
        pass

    def on_grad_accumulated(self, param_path, param):
        pass

    def on_zero_grad(self, optimizer, set_to_none):
        pass

    def on_step_begin(self, optimizer, step):
        pass

    def on_step_end(self, optimizer, step):
        pass
