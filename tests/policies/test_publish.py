"""A publishable pack: `pulumi policy publish` uploads the pack directory alone, and the Pulumi
CLI installs its requirements.txt where the pack is enforced. So the pack imports nothing but the
standard library, itself and what requirements.txt names; and a copy outside the repository, in
a virtualenv without the repository's packages, gives the same verdict."""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
import subprocess
import sys
import sysconfig
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from pack_copy import PACK_DIR, pack_copy
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from stack_files import REPO_ROOT

from spotctl.preview.analyzer import check_preview
from spotctl.preview.resources import preview_program


def requirements() -> dict[str, str]:
    lines = (PACK_DIR / "requirements.txt").read_text().splitlines()
    parsed = [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
    return {canonicalize_name(r.name): str(r.specifier) for r in parsed}


def imported_modules(path: Path) -> set[str]:
    """The modules a file imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def pack_imports() -> set[str]:
    """Top-level modules the running pack imports: from __main__.py, through its own modules."""
    seen, queue, outside = set(), [PACK_DIR / "__main__.py", PACK_DIR / "__init__.py"], set()
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in imported_modules(path):
            top, _, rest = module.partition(".")
            if top == "policies":
                own = PACK_DIR / (rest.replace(".", "/") or "__init__")
                queue.append(own.with_suffix(".py") if own.with_suffix(".py").is_file() else own)
            else:
                outside.add(top)
    return outside


def test_the_pack_imports_only_the_standard_library_and_its_requirements():
    distributions = packages_distributions()
    required = set(requirements())
    for module in sorted(pack_imports() - set(sys.stdlib_module_names) - {"__future__"}):
        names = {canonicalize_name(d) for d in distributions.get(module, [])}
        assert names & required, f"the pack imports {module}, which requirements.txt lacks"


def test_requirements_match_the_repository():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    repository = {
        (r := Requirement(d)).name.lower(): str(r.specifier) for d in project["dependencies"]
    }
    for name, specifier in requirements().items():
        assert repository.get(name) == specifier, name


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory) -> Path:
    """A virtualenv with the third-party packages installed here, and none of the repository's
    own: its site-packages is added as a plain path, so the editable installs' .pth files, which
    put the repository on sys.path, are never read."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "third_party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = "import pulumi_policy\ntry:\n import components\nexcept ImportError:\n print('bare')"
    result = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, cwd=venv)
    assert result.stdout.strip() == "bare", result.stderr
    return venv


def two_accelerators(resource):
    """A GPU NodePool of the stack that also lists a type of another accelerator."""
    template = resource.inputs["spec"]["template"]["spec"]
    types = json.loads((PACK_DIR / "gpu_types.json").read_text())["aws"]
    for requirement in template["requirements"]:
        if requirement["key"] == "node.kubernetes.io/instance-type":
            model = types[requirement["values"][0]]["gpu"]
            other = next(name for name, t in types.items() if t["gpu"] != model)
            requirement["values"] = [*requirement["values"], other]
            return resource
    return None


def test_a_copy_outside_the_repository_gives_the_same_verdict(tmp_path, bare_venv):
    published_pack = pack_copy(
        tmp_path / "published" / "spot-training-regime" / "0.1.0", venv=bare_venv
    )
    resources = preview_program(REPO_ROOT, "prod")
    published = check_preview(published_pack, REPO_ROOT, "prod", resources)
    ours = check_preview(PACK_DIR, REPO_ROOT, "prod", resources)
    assert published.violations == ours.violations
    assert published.mandatory == []
    pools = [r for r in resources if r.type == "kubernetes:karpenter.sh/v1:NodePool"]
    mixed = next(filter(None, map(two_accelerators, copy_of(pools))))
    report = check_preview(published_pack, REPO_ROOT, "prod", [mixed])
    assert [v.policy for v in report.mandatory] == ["karpenter-gpu-pool-one-accelerator"]


def copy_of(resources):
    return [dataclasses.replace(r, inputs=copy.deepcopy(r.inputs)) for r in resources]
