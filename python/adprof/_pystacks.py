"""Python frames in the call stacks of `adprof run --stacks` (docs/STACKS.md, "Python frames").

start() asks the interposer (libadprof_preload.so, through ctypes with the GIL held) to keep a
shadow stack of this thread's Python frames with a C profile function, and does the same on
every thread the threading module starts later. Each allocation's stack then names the Python
functions, files and lines above its native frames. Outside a recording with stacks it does
nothing; on a CPython the interposer does not support, it says so once and the stacks keep
their native frames only.
"""

import ctypes
import sys
import threading

_on = False


def _thread_function():
    try:
        fn = ctypes.PyDLL(None).adprof_python_stacks_thread
    except (OSError, AttributeError):
        return None  # not under adprof
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def _say_unsupported():
    version = "%d.%d" % sys.version_info[:2]
    sys.stderr.write(f"adprof: Python {version} ({sys.implementation.name}): call stacks show "
                     "native frames only (Python frames need CPython 3.11 to 3.13)\n")


def start():
    """Python frames on this thread and on the threads started from now on. True when on."""
    global _on
    if _on:
        return True
    fn = _thread_function()
    if fn is None:
        return False
    if sys.implementation.name != "cpython":
        _say_unsupported()
        return False
    status = fn(0)
    if status == -1:
        _say_unsupported()
    if status != 1:
        return False
    _on = True

    def on_new_thread(frame, event, arg):
        # threading's profile hook, called on the new thread's first event: the C profile
        # function replaces it; this function's own frame never returns through it (skip 1).
        fn(1)

    threading.setprofile(on_new_thread)
    return True
