# A few training steps of a tiny model with an optimizer, deterministic (one thread, a fixed
# seed): the conformance suite's PyTorch program. Prints each step's loss.
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
x = torch.randn(64, 16)
y = x.sum(dim=1, keepdim=True)
for step in range(10):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.6f}")
