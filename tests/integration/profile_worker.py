"""A tracked training loop for the profiling-on-demand tests: a small network fed by a
DataLoader whose items sleep `sleep_s` (the loop is input-bound by construction). Prints
"ready" after its first step; trains until `stop` appears in the data dir or `seconds` pass;
prints the captures it wrote. Usage: profile_worker.py DATA_DIR JOB SECONDS SLEEP_S"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

import gpulens.torch as gt


class Slow(Dataset):  # type: ignore[type-arg]
    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int):  # type: ignore[no-untyped-def]
        time.sleep(self.sleep_s)
        return torch.randn(32), torch.randint(0, 4, ())


def main() -> None:
    data_dir, job, seconds, sleep_s = (
        Path(sys.argv[1]),
        sys.argv[2],
        float(sys.argv[3]),
        float(sys.argv[4]),
    )
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Slow(sleep_s), batch_size=4)
    deadline = time.monotonic() + seconds
    with gt.track(job=job, data_dir=data_dir, model=model, optimizer=opt, interval_s=0.3) as run:
        for x, y in run.wrap(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run.step(samples=x.shape[0])
            if run.steps == 1:
                print("ready", flush=True)
            if time.monotonic() > deadline or (data_dir / "stop").exists():
                break
        print("captures", *[str(p) for p in run.profile.captures], flush=True)


if __name__ == "__main__":
    main()
