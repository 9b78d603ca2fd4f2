"""Assembles the pack. PolicyPack(...) starts the analyzer gRPC server and blocks, so nothing else
lives here: the policies are in the per-domain modules of this package.

Wherever the pack runs (in the repository, or unpacked by the Pulumi CLI from what
`pulumi policy publish` uploaded, under a directory name of its own), this directory is the
`policies` package its modules import: the pack needs nothing outside it but requirements.txt.
"""

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location(
    "policies", HERE / "__init__.py", submodule_search_locations=[str(HERE)]
)
package = sys.modules["policies"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(package)

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

PolicyPack(
    name="spot-training-regime",
    enforcement_level=EnforcementLevel.ADVISORY,
    policies=package.ALL_POLICIES,
)
