"""`spotctl render --validate` treats custom resources as the API server does: the CRD schema's
defaults first, then the schema and the CEL rules (`x-kubernetes-validations`) of the pinned CRDs
in shared/schemas (Kueue v0.19.2, JobSet v0.12.0, Karpenter v1.14.1, prometheus-operator v0.93.0)
and GKE's ComputeClass schema. The rules and messages below are the CRDs' own."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from components.versions import KUBERNETES_VERSION
from spotctl.render.crd_rules import EXTENSIONS, rule_problems, with_defaults
from spotctl.render.manifests import crd_schemas, render, validate


@pytest.fixture(scope="module")
def schemas(shared_schemas: Path) -> dict:
    return crd_schemas([shared_schemas])


def _one(objects: list[dict], kind: str) -> dict:
    return copy.deepcopy(next(o for o in objects if o["kind"] == kind))


def _problems(obj: dict, shared_schemas: Path) -> list[str]:
    problems, unvalidated = validate([obj], KUBERNETES_VERSION, [shared_schemas])
    assert unvalidated == []
    return problems


def test_both_clouds_objects_pass_defaults_schemas_and_rules(
    prod_render, stack_previews, shared_schemas, schemas
) -> None:
    gcp = render(stack_previews("gcp-prod")).all_objects()
    objects = prod_render[0].all_objects() + gcp
    checked = {
        (o["apiVersion"], o["kind"]) for o in objects if (o["apiVersion"], o["kind"]) in schemas
    }
    # Every group with rules: Kueue, Karpenter, prometheus-operator, GKE.
    groups = {api.split("/")[0] for api, _ in checked}
    assert {"kueue.x-k8s.io", "karpenter.sh", "karpenter.k8s.aws", "cloud.google.com"} <= groups
    assert "monitoring.coreos.com" in groups
    problems, unvalidated = validate(objects, KUBERNETES_VERSION, [shared_schemas])
    assert problems == []
    # Managed Prometheus's CRDs (prometheus-engine) are not among the shared schemas yet.
    assert set(unvalidated) <= {"monitoring.googleapis.com/v1 ClusterPodMonitoring"}


def test_an_ami_alias_the_crd_refuses_is_one_line_naming_the_field(
    prod_render, shared_schemas
) -> None:
    node_class = _one(prod_render[0].objects, "EC2NodeClass")
    name = node_class["metadata"]["name"]
    node_class["spec"]["amiSelectorTerms"] = [{"alias": "ubuntu@v20251029"}]
    # `split` (a Kubernetes strings extension) decides this one.
    assert _problems(node_class, shared_schemas) == [
        f"EC2NodeClass /{name}: spec.amiSelectorTerms[0].alias: family is not supported, must "
        "be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', "
        "'windows2022', 'windows2025'"
    ]
    node_class["spec"]["amiSelectorTerms"] = [{"alias": "al2023"}]
    problems = _problems(node_class, shared_schemas)
    assert (
        f"EC2NodeClass /{name}: spec.amiSelectorTerms[0].alias: 'alias' is improperly "
        "formatted, must match the format 'family@version'"
    ) in problems


def test_node_pool_rules_with_find_and_min_values(prod_render, shared_schemas) -> None:
    pool = _one(prod_render[0].objects, "NodePool")
    name = pool["metadata"]["name"]
    requirements = pool["spec"]["template"]["spec"]["requirements"]
    # A label in Karpenter's own domain that Karpenter does not define: `find` reads its domain.
    requirements.append({"key": "karpenter.sh/team", "operator": "In", "values": ["a"]})
    problems = _problems(pool, shared_schemas)
    assert any(
        p.startswith(f"NodePool /{name}: spec.template.spec.requirements[{len(requirements) - 1}]")
        and "karpenter.sh" in p
        for p in problems
    ), problems
    requirements.pop()
    types = next(r for r in requirements if r["key"] == "node.kubernetes.io/instance-type")
    types["minValues"] = len(types["values"]) + 1
    (line,) = _problems(pool, shared_schemas)
    assert line.startswith(f"NodePool /{name}: spec.template.spec.requirements: ")


def test_kueue_flavor_toleration_rules(prod_render, shared_schemas) -> None:
    flavor = _one(prod_render[0].objects, "ResourceFlavor")
    flavor["spec"]["tolerations"] = [{"operator": "Equal", "value": "x", "effect": "NoSchedule"}]
    (line,) = _problems(flavor, shared_schemas)
    assert line.endswith(
        "spec.tolerations: operator must be Exists when 'key' is empty, which means "
        "'match all values and all keys'"
    )


def test_defaults_are_applied_before_validation(stack_previews, schemas, shared_schemas) -> None:
    """GKE's ComputeClass schema requires `whenUnsatisfiable`, which the API server defaults:
    the rendered class leaves it out and still validates, as a cluster accepts it."""
    compute_class = _one(render(stack_previews("gcp-prod")).objects, "ComputeClass")
    compute_class["spec"].pop("whenUnsatisfiable", None)
    schema = schemas[("cloud.google.com/v1", "ComputeClass")]
    assert with_defaults(schema, compute_class)["spec"]["whenUnsatisfiable"] == "DoNotScaleUp"
    assert "whenUnsatisfiable" not in compute_class["spec"]  # the input is left as it was
    assert _problems(compute_class, shared_schemas) == []


def test_transition_rules_are_skipped_on_create() -> None:
    schema = {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": "immutable"},
            {"rule": "self.a > 1", "message": "a must exceed 1"},
        ],
        "properties": {"a": {"type": "integer", "default": 0}},
    }
    assert list(rule_problems(schema, with_defaults(schema, {}))) == ["(root): a must exceed 1"]
    assert list(rule_problems(schema, {"a": 2})) == []


def test_the_kubernetes_extension_functions() -> None:
    find, split = EXTENSIONS["find"], EXTENSIONS["split"]
    assert find("karpenter.sh/nodepool", "^([^/]+)") == "karpenter.sh"
    assert find("abc", "[0-9]+") == ""
    assert split("al2023@v1@x", "@") == ["al2023", "v1", "x"]
    assert split("a,b,c", ",", 2) == ["a", "b,c"]
    assert split("a,b", ",", 0) == []
