"""A DataLoader worker's steps under a step window (`adprof run --steps A:B`; docs/PYTORCH.md,
"Training jobs", and docs/RECORDING.md, "Step windows").

A worker never steps an optimizer, so it would mark no step, and a process that marks none is
recorded whole for its whole life: a worker's trace would grow with every batch it loads. Here
the worker marks a step each time it takes a batch from its index queue, so the window bounds
its trace as it bounds its rank's.

The hook point is the function a DataLoader iterator starts each worker process with,
torch.utils.data._utils.worker._worker_loop (PyTorch 1.13 and 2.x look it up on the module when
they start a worker; its third argument is the index queue, whose items are (idx, index): the
batch's number in the epoch and its sample indices). It is replaced in the rank by a WorkerLoop
that calls the original with an index queue that marks the steps. A forked worker runs that
WorkerLoop as it was at the fork; a spawned (or forkserver) worker is sent one through pickle,
rebuilt in the worker by _spawned_worker_loop around the original function of its own module.

The step numbers: a batch is numbered by the rank's step that will consume it, the rank's step
when its epoch began (the rank's optimizer steps done, the number of its next automatic step
mark) plus idx (batch idx of an epoch is the rank's step that many steps after the epoch began,
when each batch is one optimizer step). The first epoch began when the worker started. A
persistent worker (persistent_workers=True) serves every epoch: the rank begins the next one by
putting a _ResumeIteration into each worker's index queue, and that object carries the rank's
step then (an attribute set where the rank makes it, _EPOCH_STEP, pickled with it), from which
the worker numbers the epoch's batches. (Before, the worker added its own last idx + 1 at each
new epoch: the batches of the epoch that went to the other workers were not its, and its
numbers drifted by up to workers - 1 an epoch from the rank's.) A _ResumeIteration without it
(a PyTorch whose _ResumeIteration takes no attribute) falls back to that count, so the numbers
still only rise within the process (the window opens at the first mark at or past its first step and closes at the
first at or past its end: time order).

Only under a step window (ADPROF_STEPS set): without one a worker's trace is as it was. The
program's own behaviour is untouched: the same items come out of the queue, in the same order;
a _ResumeIteration holds one attribute more, which neither PyTorch's code nor its fields (seed)
see.
"""

import functools
import os
import sys

_STEPS_ENV = "ADPROF_STEPS"
# The attribute of a _ResumeIteration that says the rank's step when it began the epoch.
_EPOCH_STEP = "_adprof_epoch_step"


def _worker_module():
    try:
        import torch.utils.data._utils.worker as module
    except Exception:  # noqa: BLE001 (a PyTorch without it: the old behaviour, said once)
        return None
    return module


def _index_queue_position(original):
    """Where the index queue is among the original's positional parameters (None: unknown)."""
    import inspect
    try:
        names = list(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        return None
    return names.index("index_queue") if "index_queue" in names else None


class _StepMarkingQueue:
    """The worker's index queue as the worker loop uses it: each batch taken marks a step."""

    def __init__(self, queue, steps):
        self._queue = queue
        self._steps = steps

    def get(self, *args, **kwargs):
        item = self._queue.get(*args, **kwargs)
        if type(item) is tuple and len(item) == 2 and type(item[0]) is int:
            self._steps.batch(item[0])
        elif type(item).__name__ == "_ResumeIteration":  # a persistent worker's next epoch
            self._steps.epoch(getattr(item, "__dict__", {}).get(_EPOCH_STEP))
        return item

    def __getattr__(self, name):  # everything else is the queue's own (close, cancel_join_thread)
        return getattr(self._queue, name)


class _WorkerSteps:
    """The step numbers of one worker process (see the module's docstring)."""

    def __init__(self, ctx, first_step):
        self._ctx = ctx
        self._offset = first_step
        self._last_idx = -1

    def epoch(self, first_step):
        """The next epoch began at the rank's step `first_step` (None: not said)."""
        if type(first_step) is int:
            self._offset = first_step
            self._last_idx = -1

    def batch(self, idx):
        if idx <= self._last_idx:  # a new epoch whose start said no step: counted on
            self._offset += self._last_idx + 1
        self._last_idx = idx
        try:
            self._ctx.step(self._offset + idx)
        except Exception:  # noqa: BLE001 (never break the worker for a mark)
            pass


def _rank_step(ins):
    """The number of the rank's next step mark as its instrumentation counts them."""
    return getattr(ins, "steps", 0) if ins is not None else 0


class WorkerLoop:
    """Stands for torch.utils.data._utils.worker._worker_loop in the rank (see the docstring)."""

    def __init__(self, original, ins=None, first_step=None):
        self.__wrapped__ = original
        self._ins = ins
        self._first_step = first_step
        self._queue_at = _index_queue_position(original)
        functools.update_wrapper(self, original)

    def __call__(self, *args, **kwargs):
        args, kwargs = self._marking(args, kwargs)
        return self.__wrapped__(*args, **kwargs)

    def _marking(self, args, kwargs):
        """The arguments with the index queue replaced by one that marks steps; as they were
        when anything is missing (no recording here, an unknown signature)."""
        try:
            from .. import _context
            ctx = _context.context()
            if not ctx.active or not os.environ.get(_STEPS_ENV):
                return args, kwargs
            first = self._first_step
            if first is None:  # forked: the rank's instrumentation as it was at the fork
                first = _rank_step(self._ins)
            from . import instrumentation
            ins = instrumentation()
            if ins is not None:
                ins.manual_steps = True  # the worker's steps are its batches, marked here
            steps = _WorkerSteps(ctx, first)
            if "index_queue" in kwargs:
                kwargs = dict(kwargs, index_queue=_StepMarkingQueue(kwargs["index_queue"], steps))
            elif self._queue_at is not None and self._queue_at < len(args):
                args = list(args)
                args[self._queue_at] = _StepMarkingQueue(args[self._queue_at], steps)
                args = tuple(args)
        except Exception as e:  # noqa: BLE001 (the worker runs as it would have)
            sys.stderr.write(f"adprof.torch: a DataLoader worker's steps are not marked ({e!r}); "
                             "it is recorded whole\n")
        return args, kwargs

    def __reduce__(self):
        # Sent to a spawned worker: rebuilt there around its own module's original function,
        # with the rank's step now (the worker is being started).
        return (_spawned_worker_loop, (_rank_step(self._ins),))


def _spawned_worker_loop(first_step):
    module = _worker_module()
    original = module._worker_loop
    while isinstance(original, WorkerLoop):  # the worker's own instrumentation replaced it too
        original = original.__wrapped__
    return WorkerLoop(original, None, first_step)


def _tag_epochs(ins, module):
    """Each _ResumeIteration the rank makes (a persistent worker's next epoch) carries the
    rank's step then (_EPOCH_STEP). Under a step window only."""
    cls = getattr(module, "_ResumeIteration", None)
    if cls is None or not os.environ.get(_STEPS_ENV):
        return
    original = cls.__init__
    if getattr(original, "_adprof_tags_epochs", False):
        return

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        try:  # a frozen dataclass: set as its own __init__ sets its fields
            object.__setattr__(self, _EPOCH_STEP, _rank_step(ins))
        except Exception:  # noqa: BLE001 (the worker counts on by itself)
            pass
    __init__._adprof_tags_epochs = True
    ins._patch(cls, "__init__", __init__)


def install(ins):
    """Replaces the worker loop in this process (undone with `ins`); one line on stderr and
    nothing changed when this PyTorch has no such hook point."""
    module = _worker_module()
    original = getattr(module, "_worker_loop", None) if module is not None else None
    if original is None or _index_queue_position(original) is None:
        if not os.environ.get(_STEPS_ENV):
            return  # it matters only under a step window
        sys.stderr.write("adprof.torch: this PyTorch has no DataLoader worker loop to follow "
                         "(torch.utils.data._utils.worker._worker_loop(..., index_queue, ...)); "
                         "under --steps its DataLoader workers are recorded whole\n")
        return
    if isinstance(original, WorkerLoop):
        return
    ins._patch(module, "_worker_loop", WorkerLoop(original, ins))
    _tag_epochs(ins, module)
