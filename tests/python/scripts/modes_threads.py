"""A program's own dispatch mode and a training thread (tests/python/torch_test.cpp): the
program's mode sees its ops as without adprof, and adprof still records them; a backward in a
thread Python started is recorded there, in the backward phase."""
import threading, torch
from torch.utils._python_dispatch import TorchDispatchMode
class Counter(TorchDispatchMode):
    def __init__(self):
        super().__init__(); self.n = 0
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # Autograd unpacks saved tensors through an aten::detach when saved-tensor hooks are
        # set (adprof's are): those differ with and without adprof, every other op is the same.
        if func.name() != "aten::detach":
            self.n += 1
        return func(*args, **(kwargs or {}))
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
x = torch.randn(4, 8)
with Counter() as c:
    model(x).sum().backward()
print("user mode saw", c.n, "ops besides aten::detach")
def work():
    loss = model(torch.randn(4, 8)).pow(2).sum()
    loss.backward()
t = threading.Thread(target=work, name="trainer"); t.start(); t.join()
model(x).sum().backward()
print("done")
