"""python3 .../adprof/stacks/__main__.py SCRIPT [ARGS...] | -m MODULE [ARGS...], as
`adprof run --stacks` starts a Python program: runs it as `python3 SCRIPT ARGS...` (or
`python3 -m MODULE ARGS...`) would, with Python frames in its call stacks
(adprof._pystacks; docs/STACKS.md, "Python frames").

The program runs as __main__ (runpy), with sys.argv and sys.path[0] as plain Python sets them;
its exit status and uncaught exceptions are plain Python's.
"""

import os
import sys

if __name__ == "__main__" and not __package__:
    # Run by its path: adprof is imported from beside this file, whatever sys.path holds.
    _own_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
        sys.path[0] = _own_root  # the script's slot, which main() gives the program's script
    else:
        sys.path.insert(0, _own_root)

from adprof._run import run_program  # noqa: E402 (after the path above)

USAGE = "usage: python3 -m adprof.stacks SCRIPT [ARGS...] | -m MODULE [ARGS...]"


def main():
    return run_program(sys.argv[1:], USAGE, _prepare)


def _prepare():
    from adprof import _pystacks
    _pystacks.start()
    return None


if __name__ == "__main__":
    sys.exit(main())
