"""The seed's gather (../shared/seeds: "Investigating Memory Inflation In JAX Gradients With
Gather Operations") at a small scale: x f32 64^3, idx (2^21, 3) int32, jax.jit of the function or
of its gradient, run CALLS times (4). argv: grads|nograds SIDE.json [CALLS] [VARIANT];
VARIANT: jnp (the seed's indexing, default), int16 (idx int16, as the seed tried), lax
(jax.lax.gather on idx itself, promised in bounds: the fix adprof's finding quotes). SIDE.json
gets XLA's
own account of the executable (memory_analysis, and the total of its memory-usage report, the
figure the seed compared)."""
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

grads = sys.argv[1] == "grads"
calls = int(sys.argv[3]) if len(sys.argv) > 3 else 4
variant = sys.argv[4] if len(sys.argv) > 4 else "jnp"
rows = 1 << 21
index_dtype = jnp.int16 if variant == "int16" else jnp.int32
rng = np.random.default_rng(0)
x = jnp.asarray(rng.standard_normal((64, 64, 64), dtype=np.float32))


# idx made where it lives (a host array and its device copy would be the run's peak, before the
# program the test looks at): pseudo-random indices in [0, 64), int32.
@jax.jit
def make_idx():
    i = jnp.arange(rows * 3, dtype=jnp.uint32)
    return ((i * jnp.uint32(2654435761)) >> 26).astype(index_dtype).reshape(rows, 3)


idx = make_idx()


def function_using_idx(x, idx):
    if variant == "lax":
        dims = jax.lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0, 1, 2),
                                              start_index_map=(0, 1, 2))
        gathered = jax.lax.gather(x, idx, dims, slice_sizes=(1, 1, 1),
                                  mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS)
        return jnp.sum(gathered * 2.5)
    tuples = tuple(jnp.split(idx, indices_or_sections=3, axis=-1))
    gathered = x[tuples][..., 0]
    return jnp.sum(gathered * 2.5)


f = jax.grad(function_using_idx, argnums=0) if grads else function_using_idx
jf = jax.jit(f)
for _ in range(calls):
    jax.block_until_ready(jf(x, idx))
    time.sleep(0.3)  # the runtime frees the call's arena on its own thread (jax_mlp.py)
m = jf.lower(x, idx).compile().memory_analysis()
with open(sys.argv[2], "w") as out:
    json.dump({"temp": m.temp_size_in_bytes, "arguments": m.argument_size_in_bytes,
               "output": m.output_size_in_bytes, "alias": m.alias_size_in_bytes,
               "idx_bytes": int(idx.nbytes), "x_bytes": int(x.nbytes),
               "jax": jax.__version__}, out)
