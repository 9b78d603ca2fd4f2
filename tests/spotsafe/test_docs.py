"""Every code block of the runtime's README, docs/preemption.md and docs/goodput.md runs here, so
a printed loop can never drift from the API: python blocks as scripts against the real S3-API
server with a bucket `my-bucket`, commands against the programs' --help, the layout against
manifest.py.

A python block preceded by `<!-- harness: NAME -->` is a fragment: it runs after PRELUDES[NAME],
which defines the names it takes as given, and nothing else."""

from __future__ import annotations

import difflib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import boto3
import pytest
from spotsafe.fencing import ATTEMPTS_PREFIX
from spotsafe.goodput import PROGRESS_PREFIX
from spotsafe.manifest import manifest_key, step_prefix
from spotsafe_harness import run_ranks, s3_keys

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    REPO_ROOT / "training-image" / "README.md",
    REPO_ROOT / "docs" / "preemption.md",
    REPO_ROOT / "docs" / "goodput.md",
]
BUCKET = "my-bucket"
FENCE = re.compile(r"(?:<!-- harness: (\w+) -->\n)?```(\w*)\n(.*?)```", re.S)

_MODEL = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optim = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optim, step_size=5)
grad_scaler = torch.amp.GradScaler("cpu")
total_steps = steps = 20


def train_step():
    loss = model(torch.randn(8, 4)).pow(2).mean()
    optim.zero_grad()
    loss.backward()
    optim.step()
    scheduler.step()
"""
PRELUDES = {
    # The Checkpointer block: a model, its optimizer, scheduler and scaler, a step function.
    "loop": _MODEL,
    # A whole script for several ranks: it runs on two gloo ranks, as spotsafe-run starts them.
    "ranks": "",
    # The guard block: the same, plus the Checkpointer and state it saves.
    "guard": _MODEL
    + """
import sys
from spotsafe import Checkpointer, Extras
ckpt = Checkpointer("s3://my-bucket/team-a/run-7", every_steps=5)
state = {"model": model, "optim": optim, "extras": Extras(note="x")}
""",
    # HF Trainer: a tiny random-init GPT-2 (no hub download) and a dataset of token rows.
    "hf": """
import torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=16))
dataset = [{"input_ids": row, "labels": row} for row in torch.randint(0, 64, (32, 16))]
""",
    # Lightning: a tiny LightningModule with its own train_dataloader.
    "lightning": """
import lightning
import torch
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader


class Tiny(lightning.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        data = TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))
        return StatefulDataLoader(data, batch_size=4, shuffle=True)


model = Tiny()
""",
}


def blocks(doc: Path) -> list[tuple[str | None, str, str]]:
    """(harness, language, code) of every fenced block, in order."""
    return [(harness or None, lang, code) for harness, lang, code in FENCE.findall(doc.read_text())]


def python_blocks() -> list:
    return [
        pytest.param(harness, code, id=f"{doc.name}:{i}")
        for doc in DOCS
        for i, (harness, lang, code) in enumerate(blocks(doc))
        if lang == "python"
    ]


@pytest.fixture
def bucket(aws_env: str) -> str:
    """`my-bucket`, empty, on the local S3-API server."""
    s3 = boto3.resource("s3")
    if s3.Bucket(BUCKET).creation_date is None:
        s3.create_bucket(Bucket=BUCKET)
    s3.Bucket(BUCKET).objects.all().delete()
    return BUCKET


def script(tmp_path: Path, harness: str | None, code: str, name: str = "block.py") -> Path:
    path = tmp_path / name
    path.write_text((PRELUDES[harness] if harness else "") + "\n" + code)
    return path


def start(path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-W", "ignore", str(path)],
        cwd=path.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_every_block_is_run_or_checked() -> None:
    for doc in DOCS:
        for harness, lang, _ in blocks(doc):
            assert lang in ("python", "bash", "text"), f"{doc.name}: a ```{lang} block"
            assert harness is None or harness in PRELUDES, f"{doc.name}: no harness {harness}"


@pytest.mark.parametrize(("harness", "code"), python_blocks())
def test_python_block_runs(bucket: str, tmp_path: Path, harness: str | None, code: str) -> None:
    if harness == "ranks":
        ranks = run_ranks(code, world=2)
        assert [r.returncode for r in ranks] == [0, 0], [r.stderr[-3000:] for r in ranks]
        return
    proc = start(script(tmp_path, harness, code))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]


# ---- the README's loop: how many lines it takes, and that it survives a notice --------------

README_PLAIN, README_SPOTSAFE = [code for _, lang, code in blocks(DOCS[0]) if lang == "python"][:2]
# What the run ended with: where it resumed from and a digest of its weights.
OUTCOME = """
import hashlib
weights = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
print(run.resumed_from, hashlib.sha256(weights).hexdigest())
"""
# Slows every forward pass, so that a SIGTERM lands in the middle of the run.
SLOW = """
import time, torch
torch.nn.modules.module.register_module_forward_hook(lambda *args: time.sleep(0.03))
"""


def test_the_readme_adopts_spotsafe_in_at_most_12_added_lines() -> None:
    diff = list(difflib.unified_diff(README_PLAIN.splitlines(), README_SPOTSAFE.splitlines(), n=0))
    added = [line for line in diff[2:] if line.startswith("+")]
    removed = [line for line in diff[2:] if line.startswith("-")]
    assert len(added) <= 12, added
    stated = f"{len(added)} lines added or changed, {len(removed)} removed"
    assert stated in " ".join(DOCS[0].read_text().split()), f"the README should say: {stated}"


def test_the_readme_loop_exits_75_on_sigterm_and_resumes_exactly(bucket: str, tmp_path) -> None:
    uninterrupted = script(tmp_path, None, README_SPOTSAFE + OUTCOME, "uninterrupted.py")
    out, err = start(uninterrupted).communicate(timeout=300)
    fresh, reference = out.strip().splitlines()[-1].split()
    assert fresh == "None"
    boto3.resource("s3").Bucket(bucket).objects.all().delete()

    proc = start(script(tmp_path, None, SLOW + README_SPOTSAFE + OUTCOME, "interrupted.py"))
    uri = f"s3://{bucket}/team-a/run-7"
    deadline = time.monotonic() + 120
    while "step-4/manifest.json" not in s3_keys(uri):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err
    stopped = int(re.search(r"final save at step (\d+) durable", err)[1])
    assert 4 <= stopped < 24, "stopped mid-run"

    out, err = start(uninterrupted).communicate(timeout=300)
    resumed_from, weights = out.strip().splitlines()[-1].split()
    assert int(resumed_from) == stopped
    assert weights == reference, "bitwise-equal to the uninterrupted run"


# ---- commands and the layout: checked against what they name --------------------------------


# Commands that run another command, as torchrun does.
LAUNCHERS = ("spotsafe-run",)


def commands() -> list[str]:
    return [
        line.split("#")[0].strip()
        for doc in DOCS
        for _, lang, code in blocks(doc)
        if lang == "bash"
        for line in code.replace("\\\n", " ").splitlines()
        if line.strip()
    ]


@pytest.mark.parametrize("command", commands())
def test_command_names_what_exists(command: str) -> None:
    words = shlex.split(command)
    if words[:2] == ["pip", "install"]:
        package, extras = re.fullmatch(r"\./([\w-]+)\[(\w+)\]", words[2]).groups()
        declared = tomllib.loads((REPO_ROOT / package / "pyproject.toml").read_text())
        assert extras in declared["project"]["optional-dependencies"]
        return
    if words[:2] == ["docker", "build"]:
        assert (REPO_ROOT / words[-1] / "Dockerfile").is_file()  # hadolint: test_dockerfile.py
        return
    if words[0] in LAUNCHERS:
        # The launcher's options end where the command it runs begins.
        at = next(i for i, word in enumerate(words[1:], 1) if not word.startswith("-"))
        assert_options_exist(command, [str(Path(sys.executable).parent / words[0])], words[1:at])
        words = words[at:]
    if words[0] == "python":
        assert_options_exist(command, [sys.executable, *words[1:3]], words[3:])
    elif "/" in words[0] and not words[0].startswith(".venv/"):  # a script of the repository's
        script = REPO_ROOT / words[0]
        assert script.is_file() and os.access(script, os.X_OK), f"{command}: not an executable"
        assert_options_exist(command, [str(script)], words[1:])
    else:
        program = [str(Path(sys.executable).parent / Path(words[0]).name), words[1]]
        assert_options_exist(command, program, words[2:])


def assert_options_exist(command: str, program: list[str], words: list[str]) -> None:
    helped = subprocess.run([*program, "--help"], capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0, helped.stderr
    for flag in (w.strip("[]").split("=")[0] for w in words if w.lstrip("[").startswith("--")):
        assert flag in helped.stdout, f"{command}: {flag} is not an option"


def test_the_layout_is_the_one_the_code_writes() -> None:
    # The one text block that lists keys (others quote an error line).
    (layout,) = (
        code
        for doc in DOCS
        for _, lang, code in blocks(doc)
        if lang == "text" and code.startswith("<uri>/")
    )
    keys = [line.split()[0].removeprefix("<uri>/") for line in layout.splitlines()]
    assert keys[0] == f"{ATTEMPTS_PREFIX}<A>.json"
    assert keys[1].startswith(step_prefix(0).replace("0", "<N>") + "attempt-<A>/")
    assert keys[2] == manifest_key(0).replace("0", "<N>")
    assert keys[3] == f"{PROGRESS_PREFIX}<A>.json"
