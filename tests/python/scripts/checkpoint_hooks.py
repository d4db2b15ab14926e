"""Checkpointing and the program's own saved-tensor hooks, as PyTorch runs them without adprof
(tests/python/torch_test.cpp, TorchRecording.CheckpointingLeavesTheProgramAsItIs).

torch.utils.checkpoint reads and writes attributes of the pack hooks on autograd's stack (2.x:
`_user_hooks`, `_checkpoint_internal`), nests checkpoints inside checkpoints, and runs the
program's own hooks (save_on_cpu) inside its own. Each way of running three blocks must give
the gradients of the plain run, bit for bit, and a pack hook the program pushed is the one its
hooks object holds. Prints one line per mode; the test compares the lines with and without
adprof."""
import torch
import torch.utils.checkpoint as cp

torch.manual_seed(0)
torch.set_num_threads(1)
blocks = torch.nn.ModuleList(
    torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16))
    for _ in range(3))
x0 = torch.randn(4, 16)


def nested(block, h):
    return cp.checkpoint(lambda t: cp.checkpoint(block, t, use_reentrant=False), h,
                         use_reentrant=False)


def run(mode):
    for p in blocks.parameters():
        p.grad = None
    x = x0.clone().requires_grad_()
    h = x
    for block in blocks:
        if mode == "plain":
            h = block(h)
        elif mode == "checkpoint":
            h = cp.checkpoint(block, h, use_reentrant=False)
        elif mode == "checkpoint_reentrant":
            h = cp.checkpoint(block, h, use_reentrant=True)
        elif mode == "nested":
            h = nested(block, h)
        elif mode == "save_on_cpu_around_checkpoint":
            with torch.autograd.graph.save_on_cpu():
                h = cp.checkpoint(block, h, use_reentrant=False)
        elif mode == "own_hooks":
            def pack(t):
                return t * 1.0

            def unpack(t):
                return t
            pack.tag = "the program's"
            hooks = torch.autograd.graph.saved_tensors_hooks(pack, unpack)
            with hooks:
                if hooks.pack_hook is not pack or hooks.pack_hook.tag != "the program's":
                    raise SystemExit("the hooks object no longer holds the program's pack hook")
                h = block(h)
            if hooks.pack_hook is not pack:
                raise SystemExit("the hooks object no longer holds the program's pack hook")
    h.square().sum().backward()
    return [x.grad] + [p.grad for p in blocks.parameters()]


reference = run("plain")
for mode in ("plain", "checkpoint", "checkpoint_reentrant", "nested",
             "save_on_cpu_around_checkpoint", "own_hooks"):
    grads = run(mode)
    same = all(torch.equal(a, b) for a, b in zip(reference, grads))
    total = float(sum(g.double().sum() for g in grads))
    print(f"{mode}: {'same' if same else 'DIFFERENT'} gradients {total.hex()}")
