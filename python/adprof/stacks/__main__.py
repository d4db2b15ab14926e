"""python3 .../adprof/stacks/__main__.py SCRIPT [ARGS...] | -m MODULE [ARGS...], as
`adprof run --stacks` starts a Python program: runs it as `python3 SCRIPT ARGS...` (or
`python3 -m MODULE ARGS...`) would, with Python frames in its call stacks
(adprof._pystacks; docs/STACKS.md, "Python frames").

The program runs as __main__ (runpy), with sys.argv and sys.path[0] as plain Python sets them;
its exit status and uncaught exceptions are plain Python's.
"""

import os
import runpy
import sys

if __name__ == "__main__" and not __package__:
    # Run by its path: adprof is imported from beside this file, whatever sys.path holds.
    _own_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
        sys.path[0] = _own_root  # the script's slot, which main() gives the program's script
    else:
        sys.path.insert(0, _own_root)

USAGE = "usage: python3 -m adprof.stacks SCRIPT [ARGS...] | -m MODULE [ARGS...]"


def main():
    args = sys.argv[1:]
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        sys.stderr.write(USAGE + "\n")
        return 2
    if args[0] == "-m" and len(args) < 2:
        sys.stderr.write("Argument expected for the -m option\n")
        return 2
    if args[0] != "-m" and not os.path.exists(args[0]):
        sys.stderr.write(f"{sys.executable}: can't open file {os.path.abspath(args[0])!r}: "
                         "[Errno 2] No such file or directory\n")
        return 2
    from adprof import _pystacks
    _pystacks.start()
    if args[0] == "-m":
        sys.argv = args[1:]
        sys.path[0] = os.getcwd()
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
        runpy.run_path(args[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
