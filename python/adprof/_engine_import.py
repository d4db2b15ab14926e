"""An engine's module imported for adprof's integration of it (adprof.torch, adprof.jax), with
one clear line when it cannot be used: missing, broken, or older than the integration needs."""

import importlib


def parse_version(text):
    """(major, minor) of a version string such as "2.15.0+cu132" or "0.10.2rc1"."""
    parts = []
    for piece in text.split("+")[0].split(".")[:2]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        parts.append(int(digits or 0))
    return tuple(parts)


def import_engine(module, display, min_version, unavailable):
    """Imports `module`; raises `unavailable` (an exception class) with one line naming
    `display` (e.g. "PyTorch") if it is missing, broken or older than `min_version`."""
    try:
        engine = importlib.import_module(module)
    except ImportError as e:
        if getattr(e, "name", None) not in (None, module):  # there, but broken
            raise unavailable(f"adprof.{module}: {display} cannot be imported: {e}") from e
        raise unavailable(f"adprof.{module}: {display} is not installed") from e
    version = getattr(engine, "__version__", "0")
    if parse_version(str(version)) < min_version:
        raise unavailable(f"adprof.{module}: needs {display} >= {min_version[0]}."
                          f"{min_version[1]} (this is {version})")
    return engine
