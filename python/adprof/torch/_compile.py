"""Hook point 6, torch.compile (2.x).

Each compilation is an op scope, "torch.compile", role foreign, phase other. Dynamo compiles a
frame the first time it runs, in the middle of whatever the program does then: a compiled
training step compiles inside its optimizer step, and what dynamo and inductor allocate there
was the step's workspace (a report whose peak was "AdamW.step 33 MiB" in a model whose optimizer
state is 65 KiB). Dynamo's compile callbacks (torch._dynamo.callback_handler) bracket each
compilation.

Dynamo never compiles a frame of adprof's: while a compiled function runs, every Python frame
it starts is dynamo's to compile, the hooks autograd calls during a backward that the function
runs and the dispatch mode's calls among them, whose ctypes calls are graph breaks (each hook
was compiled again for each parameter's shape up to dynamo's recompile limit, with warnings
naming adprof's files). Their code objects are marked skipped, as torch._dynamo.skip does
(frames only: dynamo still inlines a module hook into the program's graph, where it does
nothing).

Both exist once the program has imported torch._dynamo, which torch.compile does (importing it
ourselves costs about 2 s), so they are set up after the first torch.compile call returns."""

import functools
import sys
import types

from .. import _protocol as P
from ._common import _guarded


class CompileHooks:
    """Instrumentation's compile hooks (a mixin: the state is Instrumentation's)."""

    def _wrap_compile(self, original):
        @functools.wraps(original)
        def compile(*args, **kwargs):
            result = original(*args, **kwargs)
            self._watch_compiles()
            return result
        compile.__adprof_wrapped__ = original
        return compile

    @_guarded()
    def _watch_compiles(self):
        """Once the program has imported dynamo: adprof's frames skipped, and the compile
        callbacks registered where this PyTorch has them. Again at each torch.compile call:
        torch._dynamo.reset() clears the callbacks."""
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is None:
            return
        skip_code = getattr(sys.modules.get("torch._dynamo.eval_frame"), "skip_code", None)
        if skip_code is not None:
            if self.own_code is None:
                self.own_code = _own_code()
            for code in self.own_code:
                skip_code(code)
        handler = getattr(dynamo, "callback_handler", None)
        if handler is None or not hasattr(handler, "register_start_callback") or \
                self._compile_start in handler.start_callbacks:
            return
        start = handler.register_start_callback(self._compile_start)
        end = handler.register_end_callback(self._compile_end)

        def undo():
            try:
                handler.remove_start_callback(start)
                handler.remove_end_callback(end)
            except ValueError:  # the program cleared them (torch._dynamo.reset)
                pass
        self._undo.append(undo)

    # Compilations are serialized (dynamo's compile lock) and not nested (the handler counts
    # them: the callbacks run for the outermost only), so one scope a thread is enough.
    @_guarded()
    def _compile_start(self, args):
        th = self.thread
        if th.compile_scope is not None:
            return
        ctx = self.ctx
        th.compile_scope = (ctx.set_role(P.ROLE_FOREIGN), th.phase)
        self._enter_phase(th, P.PHASE_OTHER)
        ctx.op_begin(ctx.name("torch.compile"), next(self.instances))

    @_guarded()
    def _compile_end(self, args):
        th = self.thread
        if th.compile_scope is None:
            return
        role, phase = th.compile_scope
        th.compile_scope = None
        ctx = self.ctx
        ctx.op_end()
        ctx.set_role(role)
        self._enter_phase(th, phase)


def _own_code():
    """The code objects of adprof's loaded modules: their functions, their classes' methods and
    what those define inside (closures, comprehensions)."""
    found, seen_classes = [], set()
    values = [value for name, module in list(sys.modules.items())
              if module is not None and (name == "adprof" or name.startswith("adprof."))
              for value in list(vars(module).values())]
    while values:
        value = values.pop()
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        elif isinstance(value, property):
            values.extend(f for f in (value.fget, value.fset, value.fdel) if f is not None)
            continue
        if isinstance(value, types.FunctionType):
            if (value.__module__ or "").startswith("adprof"):
                found.append(value.__code__)
        elif isinstance(value, type) and value.__module__.startswith("adprof") and \
                id(value) not in seen_classes:
            seen_classes.add(id(value))
            values.extend(vars(value).values())
    codes, seen = [], set()
    while found:
        code = found.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        codes.append(code)
        found.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return codes
