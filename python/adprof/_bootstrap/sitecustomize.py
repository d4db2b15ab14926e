"""adprof's bootstrap for every Python process of a job (docs/PYTORCH.md, "Training jobs").

`adprof run --torch` puts this file's directory first on PYTHONPATH, so that each Python
process the run starts (the program, torchrun's ranks, the children multiprocessing spawns, a
DataLoader's spawned workers) imports it at start-up, as `site` imports any sitecustomize:

1. Under adprof only (ADPROF_RUN_ID set), a finder goes first on sys.meta_path: it lets
   `import torch` run as it always does and installs adprof's PyTorch instrumentation right
   after (adprof.torch.install(), which also says what the process is in the job). A process
   that never imports torch imports nothing more than this file.
2. The sitecustomize this one shadows (the next one on sys.path: Debian's, a venv's, the
   user's) is imported in its place, as it would have been without adprof; its errors reach
   `site` as they would have.

This directory leaves sys.path again (the program sees the sys.path it would have); its
children find it through PYTHONPATH.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(_HERE))  # the directory holding adprof/


class _TorchImportHook:
    """A one-shot meta path finder: the spec of `torch` as the other finders give it, with a
    loader that installs the instrumentation once torch's module has run."""

    adprof_torch_hook = True  # adprof/torch/__main__.py removes it: it installs by itself

    def __init__(self):
        self._finding = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self._finding:
            return None
        self._finding = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        finally:
            self._finding = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _InstrumentingLoader(spec.loader, self)
        return spec


class _InstrumentingLoader:
    def __init__(self, loader, hook):
        self._loader = loader
        self._hook = hook

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        # torch's module and spec name its own loader, as without adprof.
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        _remove_hooks()
        _instrument()

    def __getattr__(self, name):  # anything else a loader offers
        return getattr(self._loader, name)


def _remove_hooks():
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "adprof_torch_hook", False)]


def _instrument():
    """adprof.torch.install() in this process; a failure is one line on stderr, never an
    exception in the program."""
    try:
        if "adprof" not in sys.modules:  # adprof's own package, whatever sys.path holds
            sys.path.insert(0, _PACKAGE_ROOT)
            try:
                import adprof  # noqa: F401
            finally:
                sys.path.remove(_PACKAGE_ROOT)
        from adprof import torch as adprof_torch
        adprof_torch.install()
    except Exception as e:  # noqa: BLE001 (the program must run as without adprof)
        sys.stderr.write(f"adprof: process {os.getpid()} is not instrumented: "
                         f"{type(e).__name__}: {e}\n")


def _start_python_frames():
    try:
        sys.path.insert(0, _PACKAGE_ROOT)
        try:
            from adprof import _pystacks
        finally:
            sys.path.remove(_PACKAGE_ROOT)
        _pystacks.start()
    except Exception:  # noqa: BLE001 (native frames only, as without the hook)
        pass


def _chain():
    """Imports the sitecustomize this file shadows, if there is one, in its place."""
    ours = sys.modules.get("sitecustomize")
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401  (the next one on sys.path)
    except ImportError as e:
        if getattr(e, "name", None) != "sitecustomize":
            raise  # the environment's own failed: site says so, as without adprof
        if ours is not None:
            sys.modules["sitecustomize"] = ours
    finally:
        # This directory leaves sys.path; whatever the other one added stays.
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]


if os.environ.get("ADPROF_RUN_ID"):
    if os.environ.get("ADPROF_STACKS") == "1":
        _start_python_frames()  # before anything imports torch, as adprof/torch/__main__.py
    if "torch" in sys.modules:
        _instrument()
    else:
        sys.meta_path.insert(0, _TorchImportHook())
_chain()
