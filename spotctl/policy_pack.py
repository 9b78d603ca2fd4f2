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

import importlib.util
import json
import sys
from pathlib import Path

from components.catalog import catalog
from components.generated_docs import GeneratedSection
from policies import ALL_POLICIES
from policies.kubernetes import GPU_TYPES_FILE

PACK_DIR = Path(__file__).resolve().parents[1] / "policies"
COMMAND = "python -m spotctl.policy_pack"
README = GeneratedSection(PACK_DIR / "README.md", "policy-table", COMMAND)
CHECKOV_DIR = PACK_DIR / "checkov"


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


def _checkov_checks() -> list:
    """The CKV_SPOT_* check objects, loaded the way checkov loads --external-checks-dir files."""
    checks = []
    for path in sorted(CHECKOV_DIR.glob("ckv_spot_*.py")):
        spec = importlib.util.spec_from_file_location(f"_table_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        checks.append(module.check)
    return sorted(checks, key=lambda c: int(c.id.rsplit("_", 1)[1]))


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
        applies = ", ".join(check.supported_entities) if check.block_type == "k8" else "Dockerfile"
        lines.append(
            f"| `{check.id}` | {applies} | {_cell(check.name)} | {_cell(check.__doc__ or '')} |"
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
