"""The same script on gangrun: every rank saves its share (one commit), every few steps and when the
gang is stopped, and a restarted script resumes at the batch after the last one saved.

    torchrun --nproc_per_node=2 after.py      # MAX_STEPS=11 stops it early; run it again to resume
"""

import os

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import gangrun
from gangrun.torch import load_state, save_state, wait

EPOCHS, BATCH = 3, 4
SAVE_EVERY = 5  # steps


def main() -> None:
    ctx = gangrun.context()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    per_epoch = len(DataLoader(data, batch_size=BATCH, sampler=sampler))  # batches per epoch on each rank
    last = int(os.environ.get("MAX_STEPS", EPOCHS * per_epoch))

    def state(step: int) -> dict:
        model_sd, optim_sd = get_state_dict(model, opt)
        return {"model": model_sd, "optim": optim_sd, "step": step}

    sd = state(0)
    if load_state(sd):  # None on the first run: sd is left as it is
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    step = sd["step"]
    stop = step >= last
    while not stop:
        epoch, done = divmod(step, per_epoch)
        sampler.set_epoch(epoch)
        # This epoch's order, as the interrupted run had it, without the batches it trained.
        todo = list(sampler)[done * BATCH :]
        for x, y in DataLoader(data, batch_size=BATCH, sampler=todo):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            step += 1
            stop = step == last or ctx.should_stop()  # every rank, every step: the same answer
            if stop or step % SAVE_EVERY == 0:
                save_state(state(step), step=step, blocking=stop)  # every rank calls it
            if stop:
                break
    wait()
    if dist.get_rank() == 0:
        print(f"step {step} weight {model.module.weight.flatten().tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
