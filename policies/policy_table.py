"""The README's policy and check tables, generated from the pack itself so they cannot drift.

Regenerate after changing a policy: `python -m policies.policy_table`;
`python -m policies.policy_table --check` fails while the README is stale (the tests run it).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from components.generated_docs import GeneratedSection
from policies import ALL_POLICIES

README = GeneratedSection(
    Path(__file__).with_name("README.md"), "policy-table", "python -m policies.policy_table"
)
CHECKOV_DIR = Path(__file__).with_name("checkov")


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
        "| Policy | Level | Kind | What it enforces | Why | Settings (default) |",
        "|---|---|---|---|---|---|",
    ]
    for policy in ALL_POLICIES:
        kind = "stack" if type(policy).__name__ == "StackRule" else "resource"
        lines.append(
            f"| `{policy.name}` | {policy.enforcement_level.value} | {kind} "
            f"| {_cell(policy.description)} | {_cell(policy.why)} | {_settings(policy)} |"
        )
    lines += ["", "| checkov check | Applies to | What it enforces | Why |", "|---|---|---|---|"]
    for check in _checkov_checks():
        applies = ", ".join(check.supported_entities) if check.block_type == "k8" else "Dockerfile"
        lines.append(
            f"| `{check.id}` | {applies} | {_cell(check.name)} | {_cell(check.__doc__ or '')} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return README.regenerate(render_tables(), argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
