"""What the policy pack carries from the rest of the repository, generated so it cannot drift:
its README's policy and check tables (from the pack itself) and the GPU instance types it checks
node pools against (from components/catalog.yaml). The pack imports nothing outside its own
directory, so that `pulumi policy publish` can upload the directory alone.

Regenerate after changing a policy or the catalog: `python -m spotctl.policy_pack`;
`python -m spotctl.policy_pack --check` fails while either is stale (the tests run it).
No command runs it; it sits at spotctl's top level because it reads both the components and
the pack, and neither of those may import the other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from components.catalog import catalog
from components.generated_docs import GeneratedSection
from policies import ALL_POLICIES
from policies.kubernetes import GPU_TYPES_FILE

REPO = Path(__file__).resolve().parents[1]
PACK_DIR = REPO / "policies"
COMMAND = "python -m spotctl.policy_pack"
README = GeneratedSection(PACK_DIR / "README.md", "policy-table", COMMAND)
CHECKOV_DIR = PACK_DIR / "checkov"
CHECKOV_PYTHON = REPO / ".venv-checkov" / "bin" / "python"


def _cell(text: str) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _settings(policy) -> str:
    schema = policy.config_schema
    if schema is None:
        return ""
    return "<br>".join(
        f"`{key}` = `{prop['default']}`".replace("'", '"')
        for key, prop in schema.properties.items()
    )


# Loads each ckv_spot_*.py the way checkov loads --external-checks-dir files, in checkov's own
# virtualenv (its pins clash with the runtime's), and prints what the table shows of each check.
_READ_CHECKS = """
import importlib.util, json, sys
from pathlib import Path
rows = []
for path in sorted(Path(sys.argv[1]).glob("ckv_spot_*.py")):
    spec = importlib.util.spec_from_file_location("_table_" + path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    check = module.check
    rows.append({"id": check.id, "name": check.name, "why": check.__doc__ or "",
                 "entities": list(check.supported_entities), "block_type": check.block_type})
print(json.dumps(rows))
"""


def _checkov_checks() -> list[dict]:
    """The CKV_SPOT_* checks as checkov loads them, in check-number order."""
    if not CHECKOV_PYTHON.is_file():
        raise SystemExit(f"no {CHECKOV_PYTHON}: `make setup` builds checkov's virtualenv")
    result = subprocess.run(
        [str(CHECKOV_PYTHON), "-c", _READ_CHECKS, str(CHECKOV_DIR)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    if result.returncode:
        raise SystemExit(f"loading the checkov checks failed:\n{result.stderr}")
    checks = json.loads(result.stdout)
    return sorted(checks, key=lambda c: int(c["id"].rsplit("_", 1)[1]))


def render_tables() -> str:
    lines = [
        "| Policy | Level | Severity | Kind | What it enforces | Why | How to fix "
        "| Settings (default) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for policy in ALL_POLICIES:
        kind = "stack" if type(policy).__name__ == "StackRule" else "resource"
        # The anchor each policy's `url` points to.
        lines.append(
            f'| <a id="{policy.name}"></a>`{policy.name}` | {policy.enforcement_level.value} '
            f"| {policy.severity.value} | {kind} | {_cell(policy.description)} "
            f"| {_cell(policy.why)} | {_cell(policy.remediation_steps)} | {_settings(policy)} |"
        )
    lines += ["", "| checkov check | Applies to | What it enforces | Why |", "|---|---|---|---|"]
    for check in _checkov_checks():
        applies = ", ".join(check["entities"]) if check["block_type"] == "k8" else "Dockerfile"
        lines.append(
            f"| `{check['id']}` | {applies} | {_cell(check['name'])} | {_cell(check['why'])} |"
        )
    return "\n".join(lines)


def gpu_types() -> str:
    """The catalog's GPU instance types, as the pack reads them."""
    types = {
        name: {"gpus": t.gpus, "gpu": t.gpu, "gpu_memory_gib": t.gpu_memory_gib}
        for name, t in sorted(catalog("aws").instance_types.items())
        if t.gpus
    }
    return json.dumps({"aws": types}, indent=1, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    status = README.regenerate(render_tables(), argv)
    if argv == ["--check"]:
        if GPU_TYPES_FILE.read_text() != gpu_types():
            print(f"{GPU_TYPES_FILE} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return status
    GPU_TYPES_FILE.write_text(gpu_types())
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
