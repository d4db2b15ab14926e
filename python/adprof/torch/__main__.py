"""python3 -m adprof.torch SCRIPT [ARGS...] (or python3 .../adprof/torch/__main__.py SCRIPT
[ARGS...], as `adprof run --torch` starts it): runs SCRIPT as `python3 SCRIPT ARGS...` would,
with the PyTorch instrumentation installed first (under adprof; plain otherwise).

The script runs as __main__ (runpy), with sys.argv = [SCRIPT, ARGS...] and its directory first
on sys.path; its exit status and its uncaught exceptions are what plain Python gives (the
traceback is printed by the interpreter and the status is 1; SystemExit passes through).
"""

import os
import sys

if __name__ == "__main__" and not __package__:
    # Run by its path (`adprof run --torch` does): adprof is imported from beside this file,
    # whatever the program's sys.path holds. `python3 -m adprof.torch` put the working directory
    # first, where an adprof.py or a package adprof/ of the user's was imported instead.
    _own_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
        sys.path[0] = _own_root  # the script's slot, which main() gives the program's script
    else:
        sys.path.insert(0, _own_root)

from adprof._run import run_program  # noqa: E402 (after the path above)

USAGE = "usage: python3 -m adprof.torch SCRIPT [ARGS...] | -m MODULE [ARGS...]"


def main():
    return run_program(sys.argv[1:], USAGE, _prepare)


def _prepare():
    """Python frames (under --stacks), then the instrumentation, before the program runs."""
    # The bootstrap of every Python process of the run (adprof/_bootstrap/sitecustomize.py)
    # would install on `import torch`: here, the hook installs after its own checks.
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "adprof_torch_hook", False)]
    from adprof import _pystacks
    _pystacks.start()  # before `import torch`: its start-up is most of a short run's memory
    from adprof import torch as adprof_torch
    try:
        adprof_torch.check_torch()
    except adprof_torch.TorchUnavailable as e:
        sys.stderr.write(str(e) + "\n")
        return 1
    adprof_torch.install()
    return None


if __name__ == "__main__":
    status = main()
    if status:
        sys.exit(status)
