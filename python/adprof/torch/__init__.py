"""adprof's PyTorch integration (docs/PYTORCH.md).

Unmodified scripts:      adprof run --torch -- python3 train.py
                         adprof run -- python3 -m adprof.torch train.py
Explicit, in a script:   with adprof.torch.profile(model, optimizer) as prof:
                             for batch in data: ...; prof.step()   # optional step marks

Nothing happens unless the process runs under adprof: install() and profile() are then no-ops.
Needs PyTorch >= 1.13; works with 2.x (feature detection in _instrument.py).
"""

import sys as _sys

MIN_VERSION = (1, 13)

_installed = None  # the process's Instrumentation, once installed


class TorchUnavailable(RuntimeError):
    """PyTorch is missing or too old; the message is the line to print."""


def check_torch():
    """Imports torch; raises TorchUnavailable with one clear line if it cannot be used."""
    from .._engine_import import import_engine
    return import_engine("torch", "PyTorch", MIN_VERSION, TorchUnavailable)


def install(listener=None):
    """Instruments PyTorch in this process (idempotent). Returns the Instrumentation, or None
    when the process is not recorded by adprof (nothing is changed then)."""
    global _installed  # one instrumentation per process
    if _installed is not None:
        return _installed
    from .._context import context
    ctx = context()
    if not ctx.active:
        return None
    check_torch()
    from ._instrument import Instrumentation
    ins = Instrumentation(ctx, listener)
    ins.install()
    from . import _job
    _job.announce(ins, check_torch())  # what this process is in a job (launcher, rank, worker)
    from . import _workers
    _workers.install(ins)  # a DataLoader worker's batches are its steps (under --steps)
    _installed = ins
    return ins


def instrumentation():
    """The installed Instrumentation, or None."""
    return _installed


class profile:
    """Context manager: instruments PyTorch for its scope (if not already), adopts `model`
    (its parameters and module paths) and `optimizer` (its steps), and lets the caller mark
    steps with step(). Inert when not under adprof."""

    def __init__(self, model=None, optimizer=None, name=None):
        self.model = model
        self.optimizer = optimizer
        self.name = name
        self._ins = None
        self._owns = False

    def __enter__(self):
        global _installed  # the process's instrumentation, shared with install()
        owned = _installed is None
        ins = install()
        if ins is None:
            return self
        self._ins, self._owns = ins, owned
        if self.model is not None:
            ins.adopt_model(self.model, self.name)
        if self.optimizer is not None:
            ins._adopt_optimizer(self.optimizer)
        return self

    def step(self, step=None):
        """Marks the start of a training step (numbered from 0 by default)."""
        if self._ins is not None:
            self._ins.mark_step(step)

    def __exit__(self, *exc):
        global _installed  # uninstalled with the scope that installed it
        if self._ins is not None and self._owns:
            self._ins.uninstall()
            _installed = None
        return False
