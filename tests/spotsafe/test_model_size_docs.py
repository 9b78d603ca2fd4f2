"""The docs give the medium example model's checkpointed size as the model makes it: its float32
parameters and AdamW's two moments per parameter (training-image/README.md, docs/preemption.md)."""

from __future__ import annotations

import re

from spotsafe.examples.train import build_model
from stack_files import REPO_ROOT

STATED = {
    "training-image/README.md": r"`medium` carries about (\d+) MB of model plus AdamW state",
    "docs/preemption.md": r"`--size medium` \((\d+) MB of model and Adam state",
}


def test_the_docs_state_the_medium_models_size() -> None:
    parameters = sum(p.numel() * p.element_size() for p in build_model("medium").parameters())
    megabytes = round(3 * parameters / 1e6)  # weights, exp_avg, exp_avg_sq
    for doc, pattern in STATED.items():
        [figure] = re.findall(pattern, (REPO_ROOT / doc).read_text())
        assert int(figure) == megabytes, doc
