"""A Hugging Face Trainer run of a tiny random-init GPT-2 (no hub download), shipped by
spotsafe.hf. Usage: hf_train.py URI OUTPUT_DIR MAX_STEPS [SIGNAL@STEP]. It prints "step N" at
each step end (and sends itself the signal, e.g. TERM@10, at the end of that step) and, when
training ends, one JSON line with the final step, a digest of the weights and the optimizer's
step count."""

from __future__ import annotations

import json
import os
import signal
import sys

import torch
from spotsafe.hf import SpotsafeCallback
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from weights import digest

uri, output_dir, max_steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
signal_name, _, signal_step = (sys.argv[4] if len(sys.argv) > 4 else "").partition("@")
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=16))
dataset = [{"input_ids": row, "labels": row} for row in torch.randint(0, 64, (40, 16))]


class Announced(SpotsafeCallback):
    def on_step_end(self, args, state, control, **kwargs):
        print("step", state.global_step, flush=True)
        if str(state.global_step) == signal_step:
            os.kill(os.getpid(), signal.Signals[f"SIG{signal_name}"])
        return super().on_step_end(args, state, control, **kwargs)


args = TrainingArguments(
    output_dir,
    max_steps=max_steps,
    per_device_train_batch_size=4,  # 10 steps an epoch: the run crosses an epoch
    save_steps=3,
    learning_rate=1e-2,
    report_to=[],
    seed=0,
    use_cpu=True,
    disable_tqdm=True,
)
sync = Announced(uri)
trainer = Trainer(model=model, args=args, train_dataset=dataset, callbacks=[sync])
trainer.train(resume_from_checkpoint=sync.restore(args.output_dir))
# Code after train() runs on every run, a finished one's restart too. Adam counts its steps.
adam_steps = {int(s["step"]) for s in trainer.optimizer.state.values()}
result = {"step": trainer.state.global_step, "weights": digest(model), "adam_steps": [*adam_steps]}
print(json.dumps(result), flush=True)
