"""adprof's JAX integration (docs/JAX.md).

Unmodified scripts:      adprof run --jax -- python3 train.py
                         adprof run -- python3 -m adprof.jax train.py
Explicit, in a script:   import adprof.jax; adprof.jax.install()   # before JAX's first computation
                         adprof.jax.mark(batch, "input")           # optional: override a role

Nothing happens unless the process runs under adprof: install() and mark() are then no-ops.
What it records: for every program JAX compiles and runs, XLA's own buffer assignment (its
dump, written into a directory of adprof's own), the temp arena of each call cut into its
logical buffers, and the roles of arguments and results. Feature-detected; made on JAX 0.10.
"""

MIN_VERSION = (0, 4)

_installed = None  # the process's Instrumentation, once installed


class JaxUnavailable(RuntimeError):
    """JAX is missing or too old; the message is the line to print."""


def check_jax():
    """Imports jax; raises JaxUnavailable with one clear line if it cannot be used."""
    from .._engine_import import import_engine
    return import_engine("jax", "JAX", MIN_VERSION, JaxUnavailable)


def install():
    """Instruments JAX in this process (idempotent). Returns the Instrumentation, or None when
    the process is not recorded by adprof (nothing is changed then). Call it before JAX's first
    computation: XLA reads its dump flags once, when its first backend starts."""
    global _installed  # one instrumentation per process
    if _installed is not None:
        return _installed
    from .._context import context
    ctx = context()
    if not ctx.active:
        return None
    import sys
    from ._instrument import Instrumentation, make_dump_dir
    started = "jax" in sys.modules and _backend_started(sys.modules["jax"])
    dump_dir, own = make_dump_dir()
    if started and own:
        sys.stderr.write("adprof.jax: JAX had started its backend before adprof.jax.install(): "
                         "XLA writes no buffer assignment for it (install first, or run with "
                         "adprof run --jax)\n")
    check_jax()
    ins = Instrumentation(ctx, dump_dir, own)
    ins.install()
    _installed = ins
    return ins


def _backend_started(jax):
    try:
        from jax._src import xla_bridge
        return bool(getattr(xla_bridge, "_backends", {}))
    except Exception:
        return False


def mark(tree, role):
    """Gives every array of `tree` the role `role` ("parameter", "input", "optimizer_state",
    ...) for the rest of the run, over the rule of docs/JAX.md ("Roles")."""
    from .. import _protocol as P
    if _installed is None:
        return
    if isinstance(role, str):
        role = P.ROLE_NAMES.index(role)
    _installed.mark(tree, role)


def instrumentation():
    """The installed Instrumentation, or None."""
    return _installed
