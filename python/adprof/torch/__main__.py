"""python3 -m adprof.torch SCRIPT [ARGS...] (or python3 .../adprof/torch/__main__.py SCRIPT
[ARGS...], as `adprof run --torch` starts it): runs SCRIPT as `python3 SCRIPT ARGS...` would,
with the PyTorch instrumentation installed first (under adprof; plain otherwise).

The script runs as __main__ (runpy), with sys.argv = [SCRIPT, ARGS...] and its directory first
on sys.path; its exit status and its uncaught exceptions are what plain Python gives (the
traceback is printed by the interpreter and the status is 1; SystemExit passes through).
"""

import os
import runpy
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

USAGE = "usage: python3 -m adprof.torch SCRIPT [ARGS...] | -m MODULE [ARGS...]"


def main():
    args = sys.argv[1:]
    if args and args[0] == "--":
        args = args[1:]
    if not args or args[0] in ("-h", "--help"):
        sys.stderr.write(USAGE + "\n")
        return 2 if not args else 0
    if args[0] == "-m":
        return _run_module(args[1:])
    script = args[0]
    if not os.path.exists(script):
        # as python3 says it, with its status
        sys.stderr.write(f"{sys.executable}: can't open file {os.path.abspath(script)!r}: "
                         "[Errno 2] No such file or directory\n")
        return 2
    _python_frames()  # before `import torch`: its start-up is most of a short run's memory
    from adprof import torch as adprof_torch
    try:
        adprof_torch.check_torch()
    except adprof_torch.TorchUnavailable as e:
        sys.stderr.write(str(e) + "\n")
        return 1
    try:
        with open(script, "rb") as f:
            null_byte = b"\0" in f.read()
    except OSError as e:
        sys.stderr.write(f"{sys.executable}: can't open file {script!r}: [Errno {e.errno}] "
                         f"{e.strerror}\n")
        return 2
    if null_byte:  # compile() says ValueError here; python3 SCRIPT, a SyntaxError
        sys.stderr.write(f'  File "{os.path.abspath(script)}", line 1\n'
                         "SyntaxError: source code cannot contain null bytes\n")
        return 1
    adprof_torch.install()
    sys.argv = args
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    return _run_as_main(lambda: runpy.run_path(script, run_name="__main__"))


def _python_frames():
    """Python frames in the call stacks under `adprof run --torch --stacks` (else nothing)."""
    from adprof import _pystacks
    _pystacks.start()


def _run_module(args):
    """python3 -m adprof.torch -m MODULE ARGS: as python3 -m MODULE ARGS."""
    if not args:
        sys.stderr.write("Argument expected for the -m option\n")
        return 2
    _python_frames()  # before `import torch`: its start-up is most of a short run's memory
    from adprof import torch as adprof_torch
    try:
        adprof_torch.check_torch()
    except adprof_torch.TorchUnavailable as e:
        sys.stderr.write(str(e) + "\n")
        return 1
    adprof_torch.install()
    sys.argv = [args[0]] + args[1:]  # argv[0] becomes the module's file, as with -m
    sys.path[0] = os.getcwd()
    return _run_as_main(lambda: runpy.run_module(args[0], run_name="__main__", alter_sys=True))


def _run_as_main(run):
    """Runs the script or module; its uncaught exception is reported as `python3 SCRIPT`
    reports it: the traceback from the program's frames (not runpy's or ours), status 1."""
    try:
        run()
    except (SystemExit, KeyboardInterrupt):
        raise  # the interpreter ends as it would have (status, or death by SIGINT)
    except BaseException as e:
        tb = _script_frames(e.__traceback__)
        if tb is None and isinstance(e, ImportError):  # runpy's own: the module is not there
            sys.stderr.write(f"{sys.executable}: {e}\n")
            return 1
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        return 1
    return 0


def _script_frames(tb):
    """The traceback from its first frame outside runpy and this file (None for a
    SyntaxError of the script itself, which Python prints without a traceback)."""
    own = globals()
    while tb is not None and (tb.tb_frame.f_globals is own or
                              tb.tb_frame.f_globals.get("__name__") == "runpy"):
        tb = tb.tb_next
    return tb


if __name__ == "__main__":
    status = main()
    if status:
        sys.exit(status)
