"""Optimizer steps on the CPU (tests/python/torch_test.cpp): a step runs as one op scope,
"<class>.step", without the dispatch mode (docs/PYTORCH.md); what runs the model inside a step
(LBFGS's closure, a forward without one) and a mode the program pushes inside a step are
recorded op by op; a step that raises ends there (the program goes on, its later steps are
steps); and the program computes and sees what it does without adprof."""
import torch
from torch.utils._python_dispatch import TorchDispatchMode

torch.manual_seed(0)
torch.set_num_threads(1)


class Counter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.name() != "aten::detach":  # (autograd's unpacking: see modes_threads.py)
            self.n += 1
        return func(*args, **(kwargs or {}))


class CountedSGD(torch.optim.SGD):
    """A step that pushes a mode of the program's (a mode pushed inside the step)."""

    def step(self, closure=None):
        with Counter() as counter:
            out = super().step(closure)
        print("the program's mode saw", counter.n, "ops in CountedSGD.step")
        return out


class LookAround(torch.optim.SGD):
    """A step that runs the model without a closure."""

    def __init__(self, params, model, x):
        super().__init__(params, lr=0.01)
        self.model, self.x = model, x

    def step(self, closure=None):
        with torch.no_grad():
            print("LookAround saw", float(self.model(self.x).sum()))
        return super().step(closure)


class Flaky(torch.optim.SGD):
    """A step that raises the second time, as a step that meets a bad batch or runs out of
    memory, which the program catches and goes on."""

    calls = 0

    def step(self, closure=None):
        Flaky.calls += 1
        if Flaky.calls == 2:
            raise FloatingPointError("a bad batch")
        return super().step(closure)


def model_and_batch():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 1))
    return model, torch.randn(8, 16), torch.randn(8, 1)


def train(name, make_optimizer, steps=2):
    model, x, y = model_and_batch()
    opt = make_optimizer(model, x)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if isinstance(opt, torch.optim.LBFGS):
            def closure():
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                return loss
            opt.step(closure)
        else:
            try:
                opt.step()
            except FloatingPointError as e:
                print(name, "step raised:", e)
    print(name, "loss %.6f" % float(torch.nn.functional.mse_loss(model(x), y)),
          "weights %.6f" % float(sum(p.sum() for p in model.parameters())))


train("Adam", lambda m, x: torch.optim.Adam(m.parameters(), lr=0.01))
train("LBFGS", lambda m, x: torch.optim.LBFGS(m.parameters(), lr=0.1, max_iter=3))
train("CountedSGD", lambda m, x: CountedSGD(m.parameters(), lr=0.01, momentum=0.9))
train("LookAround", lambda m, x: LookAround(m.parameters(), m, x))
train("Flaky", lambda m, x: Flaky(m.parameters(), lr=0.01), steps=4)
