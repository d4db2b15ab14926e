"""python3 -m adprof.jax SCRIPT [ARGS...] (or python3 .../adprof/jax/__main__.py SCRIPT
[ARGS...], as `adprof run --jax` starts it): runs SCRIPT as `python3 SCRIPT ARGS...` would,
with the JAX instrumentation installed first (under adprof; plain otherwise).

The script runs as __main__ (runpy), with sys.argv = [SCRIPT, ARGS...] and its directory first
on sys.path; its exit status and its uncaught exceptions are what plain Python gives (the
traceback is printed by the interpreter and the status is 1; SystemExit passes through).
"""

import os
import sys

if __name__ == "__main__" and not __package__:
    # Run by its path (`adprof run --jax` does): adprof is imported from beside this file,
    # whatever the program's sys.path holds. `python3 -m adprof.jax` put the working directory
    # first, where an adprof.py or a package adprof/ of the user's was imported instead.
    _own_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
        sys.path[0] = _own_root  # the script's slot, which main() gives the program's script
    else:
        sys.path.insert(0, _own_root)

from adprof._run import run_program  # noqa: E402 (after the path above)

USAGE = "usage: python3 -m adprof.jax SCRIPT [ARGS...] | -m MODULE [ARGS...]"


def main():
    return run_program(sys.argv[1:], USAGE, _prepare)


def _prepare():
    """Python frames (under --stacks), then the instrumentation, before the program runs."""
    from adprof import _pystacks
    _pystacks.start()  # before `import jax`: its start-up is most of a short run's memory
    from adprof import jax as adprof_jax
    try:
        adprof_jax.check_jax()
    except adprof_jax.JaxUnavailable as e:
        sys.stderr.write(str(e) + "\n")
        return 1
    adprof_jax.install()
    return None


if __name__ == "__main__":
    status = main()
    if status:
        sys.exit(status)
