"""Runs a Python program as `python3 SCRIPT ARGS...` or `python3 -m MODULE ARGS...` would, for
adprof's hooks (adprof/torch/__main__.py, adprof/stacks/__main__.py): as __main__ (runpy), with
sys.argv and sys.path[0] as plain Python sets them; its exit status and uncaught exceptions are
plain Python's (the traceback from the program's frames, not runpy's or adprof's; status 1;
SystemExit and KeyboardInterrupt pass through)."""

import os
import runpy
import sys


def run_program(args, usage, prepare):
    """args: SCRIPT ARGS... or -m MODULE ARGS... (a leading "--" dropped). prepare(): called
    once the program is known to be runnable, right before it runs; a status it returns (not
    None) ends the run there. Returns the exit status."""
    if args and args[0] == "--":
        args = args[1:]
    if not args or args[0] in ("-h", "--help"):
        sys.stderr.write(usage + "\n")
        return 2 if not args else 0
    if args[0] == "-m":
        if len(args) < 2:
            sys.stderr.write("Argument expected for the -m option\n")
            return 2
        status = prepare()
        if status is not None:
            return status
        sys.argv = args[1:]  # argv[0] becomes the module's file, as with -m
        sys.path[0] = os.getcwd()
        return _run_as_main(lambda: runpy.run_module(args[1], run_name="__main__",
                                                     alter_sys=True))
    script = args[0]
    if not os.path.exists(script):  # as python3 says it, with its status
        sys.stderr.write(f"{sys.executable}: can't open file {os.path.abspath(script)!r}: "
                         "[Errno 2] No such file or directory\n")
        return 2
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
    status = prepare()
    if status is not None:
        return status
    sys.argv = args
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    return _run_as_main(lambda: runpy.run_path(script, run_name="__main__"))


def _run_as_main(run):
    try:
        run()
    except (SystemExit, KeyboardInterrupt):
        raise  # the interpreter ends as it would have (status, or death by SIGINT)
    except BaseException as e:
        tb = _program_frames(e.__traceback__)
        if tb is None and isinstance(e, ImportError):  # runpy's own: the module is not there
            sys.stderr.write(f"{sys.executable}: {e}\n")
            return 1
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        return 1
    return 0


def _program_frames(tb):
    """The traceback from its first frame outside runpy and this file (None for a
    SyntaxError of the script itself, which Python prints without a traceback)."""
    own = globals()
    while tb is not None and (tb.tb_frame.f_globals is own or
                              tb.tb_frame.f_globals.get("__name__") == "runpy"):
        tb = tb.tb_next
    return tb
