"""Runs one of the JAX test scripts on JAX's default device and adds the device's own account
to its side file, for the GPU checks of issue 32 (cuda_jax_test.cpp).

    cuda_jax.py SCRIPT SIDE.json [ARGS...]

SCRIPT (jax_gather.py, jax_mlp.py) runs as `python SCRIPT ...` would run it, with its own
arguments: jax_gather.py takes `grads SIDE.json CALLS`, jax_mlp.py `SIDE.json [WORD...]`; the
side file is the one named among them (SIDE.json, repeated here so that this script finds it).
After it ends, SIDE.json gets "device": the platform and kind of jax.devices()[0], its
memory_stats() (None on the CPU; on a GPU XLA's allocator's bytes_in_use, peak_bytes_in_use,
bytes_limit, ...), and XLA_PYTHON_CLIENT_PREALLOCATE as the process saw it.
"""
import json
import os
import runpy
import sys


def main():
    script, side = sys.argv[1], sys.argv[2]
    sys.argv = [script] + sys.argv[3:]
    runpy.run_path(script, run_name="__main__")
    import jax

    d = jax.devices()[0]
    stats = d.memory_stats()
    with open(side) as f:
        account = json.load(f)
    account["device"] = {
        "platform": d.platform,
        "kind": getattr(d, "device_kind", ""),
        "memory_stats": {k: int(v) for k, v in stats.items()} if stats else None,
        "preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "(default: true)"),
    }
    with open(side, "w") as f:
        json.dump(account, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
