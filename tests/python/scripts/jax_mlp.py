"""A 2-layer MLP trained with optax Adam for a few steps, one jitted step
(value_and_grad + opt.update + apply_updates). argv: SIDE.json [WORD...]; SIDE.json gets
JAX's own account: the parameters' and Adam moments' nbytes, the residuals JAX lists for the
gradient (jax.ad_checkpoint.saved_residuals), and memory_analysis of the step. Words:
`checkpoint` wraps the loss in jax.checkpoint(policy=nothing_saveable), `dots` in
jax.checkpoint(policy=dots_saveable); `donate` jits the step
with donate_argnums=(0, 1) (params and optimizer state); `wide` makes the parameters the larger
part (2048-2048-16, batch 1024) where they are 1 MiB of a 64 MiB arena otherwise."""
import json
import sys
import time

import jax
import jax.numpy as jnp
import optax
from jax._src import ad_checkpoint  # saved_residuals: what print_saved_residuals prints

words = set(sys.argv[2:])
policy = ("nothing_saveable" if "checkpoint" in words else
          "dots_saveable" if "dots" in words else None)
sizes, batch = ([2048, 2048, 16], 1024) if "wide" in words else ([256, 1024, 16], 8192)


def init(key, sizes):
    params = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        key, k = jax.random.split(key)
        params[f"w{i}"] = jax.random.normal(k, (a, b), jnp.float32) * 0.05
        params[f"b{i}"] = jnp.zeros((b,), jnp.float32)
    return params


def loss(p, x, y):
    h = jnp.tanh(x @ p["w0"] + p["b0"])
    out = h @ p["w1"] + p["b1"]
    return jnp.mean((out - y) ** 2)


if policy:
    loss = jax.checkpoint(loss, policy=getattr(jax.checkpoint_policies, policy))

params = init(jax.random.PRNGKey(0), sizes)
opt = optax.adam(1e-3)
state = opt.init(params)


def step(p, s, x, y):
    value, grads = jax.value_and_grad(loss)(p, x, y)
    updates, s = opt.update(grads, s, p)
    return optax.apply_updates(p, updates), s, value


step = jax.jit(step, donate_argnums=(0, 1)) if "donate" in words else jax.jit(step)

x = jax.random.normal(jax.random.PRNGKey(1), (batch, sizes[0]), jnp.float32)
y = jax.random.normal(jax.random.PRNGKey(2), (batch, sizes[-1]), jnp.float32)

# JAX's own account first (its tracing and compiling allocate too: before the steps, whose peak
# the test reads).
residuals = ad_checkpoint.saved_residuals(loss, params, x, y)
res_bytes = 0
for aval, why in residuals:
    if "from the argument" in why:  # an argument kept as it is: no new buffer
        continue
    res_bytes += aval.size * aval.dtype.itemsize
leaves = jax.tree_util.tree_leaves
m = step.lower(params, state, x, y).compile().memory_analysis()
moments = [leaf for leaf in leaves(state) if getattr(leaf, "ndim", 0) > 0]
with open(sys.argv[1], "w") as out:
    json.dump({"parameter_bytes": sum(int(v.nbytes) for v in leaves(params)),
               "moment_bytes": sum(int(v.nbytes) for v in moments),
               "residual_bytes": res_bytes,
               "residuals": [[str(a), w] for a, w in residuals],
               "temp": m.temp_size_in_bytes, "arguments": m.argument_size_in_bytes,
               "output": m.output_size_in_bytes, "jax": jax.__version__}, out)
del moments, residuals  # the initial state's leaves: not kept past the first step

for _ in range(3):
    params, state, value = step(params, state, x, y)
    jax.block_until_ready(value)
    # XLA's CPU runtime frees a call's arena and the arrays the program dropped a little after
    # the call returned, on its own threads: without a pause, the next step's peak may hold two
    # steps' arenas (adprof shows that as it is); the test compares one step with JAX's account.
    time.sleep(0.3)
