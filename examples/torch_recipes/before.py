"""A DDP script as many start: rank 0 saves with torch.save once per epoch, and resumes from that file.

    torchrun --nproc_per_node=2 before.py
"""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

EPOCHS, BATCH = 3, 4
CKPT = "checkpoint.pt"


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    if os.path.exists(CKPT):
        saved = torch.load(CKPT)
        model.module.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optim"])
        start = saved["epoch"] + 1
    for epoch in range(start, EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(data, batch_size=BATCH, sampler=sampler):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        if dist.get_rank() == 0:
            torch.save({"model": model.module.state_dict(), "optim": opt.state_dict(), "epoch": epoch}, CKPT)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
