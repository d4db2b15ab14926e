"""An MLP whose forward runs inside torch.autograd.graph.save_on_cpu: the program's own
saved-tensor hooks, inside which adprof's are not called. What those hooks keep (on a CPU
tensor, save_on_cpu keeps the tensor itself: the two ReLU outputs and the last Linear's output;
the input and the weights are the batch and parameters) is the forward cache.
Run under `adprof run --torch`."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                            torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                            torch.nn.Linear(1024, 10))
x = torch.randn(128, 256)
with torch.autograd.graph.save_on_cpu():
    loss = model(x).square().mean()
loss.backward()
print("trained")
