"""adprof's Python side: the context API for Python programs and the PyTorch integration.

    import adprof
    adprof.active()          # True under `adprof run`

The PyTorch instrumentation is adprof.torch (docs/PYTORCH.md).
"""

__version__ = "0.1.0"


def active():
    """True when this process runs under adprof and is being recorded."""
    from ._context import context
    return context().active
