"""What a collective's work keeps of adprof's (torch_job_test.cpp,
TorchJob.CollectiveWorkHoldsNoneOfAdprofsObjects).

PyTorch 2.x copies the calling thread's state (at::ThreadLocalState) into each gloo work, and
the backend's thread may drop the work last. A Python object in that copy (adprof's dispatch
mode, its saved-tensor hooks) is then released on that thread, which takes the GIL; once
finalization has begun that thread is ended inside a noexcept destructor and the rank dies of
std::terminate (SIGABRT). Kept works show the copies: the references they add to adprof's
objects are printed as JSON ({"mode": n, "pack_hook": n}); without adprof, {}. The works include
collectives made inside an optimizer step (ZeroRedundancyOptimizer's, a sharded optimizer's),
where adprof's mode would otherwise be off the stack (docs/PYTORCH.md).
"""

import json
import os
import sys
import tempfile
import threading

import torch
import torch.distributed as dist

store = os.path.join(tempfile.mkdtemp(), "store")
dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
try:
    import adprof.torch
    mode, hooks = adprof.torch.instrumentation()._modes[threading.get_ident()]
    held = {"mode": mode, "pack_hook": hooks.pack_hook}
except (ImportError, AttributeError, KeyError):
    held = {}
before = {k: sys.getrefcount(v) for k, v in held.items()}
x = torch.ones(1 << 10)
works = [dist.all_reduce(x, async_op=True) for _ in range(8)] + [dist.barrier(async_op=True)]


class AllReduceSGD(torch.optim.SGD):
    """Averages the gradients itself, in its step."""

    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                works.append(dist.all_reduce(p.grad, async_op=True))
        return super().step(closure)


model = torch.nn.Linear(8, 2)
optimizer = AllReduceSGD(model.parameters(), lr=0.1)
model(torch.randn(4, 8)).sum().backward()
optimizer.step()
for w in works:
    w.wait()
print(json.dumps({k: sys.getrefcount(v) - before[k] for k, v in held.items()}))
dist.destroy_process_group()
