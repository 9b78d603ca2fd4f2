"""A Lightning run of a small random-init model with dropout, per-batch augmentation and a
shuffling StatefulDataLoader, shipped by spotsafe.lightning. Usage: pl_train.py URI DIR
MAX_STEPS [SIGNAL@STEP]. It prints "step N" at each step end (and sends itself the signal, e.g.
TERM@10, at the end of that step) and, when training ends, one JSON line with the final step and
a digest of the weights."""

from __future__ import annotations

import json
import os
import signal
import sys

import lightning
import torch
from spotsafe.lightning import SpotsafeCheckpoint
from torch import nn
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader
from weights import digest

uri, dirpath, max_steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
signal_name, _, signal_step = (sys.argv[4] if len(sys.argv) > 4 else "").partition("@")


class Net(lightning.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        x = x + 0.1 * torch.randn_like(x)  # augmentation from the global RNG
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(
            torch.randn(40, 8, generator=g), torch.randint(0, 2, (40,), generator=g)
        )
        shuffle = torch.Generator().manual_seed(0)
        return StatefulDataLoader(data, batch_size=4, shuffle=True, generator=shuffle)


class Announced(SpotsafeCheckpoint):
    def on_train_batch_end(self, trainer, *args):
        print("step", trainer.global_step, flush=True)
        if str(trainer.global_step) == signal_step:
            os.kill(os.getpid(), signal.Signals[f"SIG{signal_name}"])
        return super().on_train_batch_end(trainer, *args)


torch.manual_seed(0)
model = Net()
sync = Announced(uri, dirpath, every_steps=3)
trainer = lightning.Trainer(
    max_steps=max_steps,
    callbacks=[sync],
    accelerator="cpu",
    logger=False,
    enable_checkpointing=False,  # spotsafe writes the checkpoints
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(model, ckpt_path=sync.restore())
print(json.dumps({"step": trainer.global_step, "weights": digest(model)}), flush=True)
