"""An int32 index widened by .long() and then saved by the embedding for its backward
(tests/python/torch_test.cpp, TorchRecording.WidenedIndexSavedForBackwardIsADuplicate): the
widened copy is a forward cache at the peak and still a duplicate of its int32 source, and the
report says so."""
import torch

torch.manual_seed(0)
torch.set_num_threads(1)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(1000, 64)
        self.head = torch.nn.Linear(64, 1)

    def forward(self, idx):
        return self.head(self.embed(idx.long()))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
idx = torch.randint(0, 1000, (4096, 8), dtype=torch.int32)
for step in range(2):
    optimizer.zero_grad(set_to_none=True)
    loss = model(idx).square().mean()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
