"""What `spotctl render` writes: the Kubernetes objects, Helm releases and training Job templates
among a stack's previewed resources, as files, and their validation against the schemas and CRDs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spotctl.preview.resources import (
    UNKNOWN,
    OnRegistered,
    PreviewError,
    PreviewResource,
    preview_program,
)
from spotctl.render.admission import AdmissionError, admit
from spotctl.render.crd_rules import rule_problems, with_defaults
from spotctl.render.scheduling import NodeShape, device_plugins, node_shapes, unserved_resources

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
TEMPLATES_CONFIGMAP = "training-job-templates"
# Apply order: what others live in or refer to comes first; custom resources after their CRDs.
KIND_ORDER = (
    "Namespace",
    "PriorityClass",
    "ServiceAccount",
    "ResourceQuota",
    "LimitRange",
    "ConfigMap",
    "Service",
    "Cohort",
    "ResourceFlavor",
    "ClusterQueue",
    "LocalQueue",
    # A NodePool names its EC2NodeClass.
    "EC2NodeClass",
    "NodePool",
)


class RenderError(Exception):
    """The stack cannot be rendered (preview failed, or a value is unknown before deploy)."""


@dataclass
class Rendered:
    objects: list[dict] = field(default_factory=list)
    releases: list[dict] = field(default_factory=list)
    # (namespace, file name) -> the template's objects
    templates: dict[tuple[str, str], list[dict]] = field(default_factory=dict)
    # The nodes the stack's pools can start, as the scheduler sees them.
    nodes: list[NodeShape] = field(default_factory=list)

    def all_objects(self) -> list[dict]:
        return self.objects + [obj for docs in self.templates.values() for obj in docs]


def render_stack(
    program_dir: Path, stack: str, on_registered: OnRegistered | None = None
) -> Rendered:
    try:
        resources = preview_program(program_dir, stack, on_registered=on_registered)
    except PreviewError as exc:
        raise RenderError(str(exc)) from None
    return render(resources)


def render(resources: list[PreviewResource]) -> Rendered:
    """The Kubernetes objects, Helm releases and Job templates among previewed resources."""
    rendered = Rendered()
    for resource in resources:
        if not resource.custom or not resource.type.startswith("kubernetes:"):
            continue
        inputs = plain(resource.inputs, f"{resource.type} {resource.name}")
        if resource.type == HELM_RELEASE:
            rendered.releases.append(_release(inputs))
        else:
            rendered.objects.append(inputs)
    rendered.objects.sort(key=_apply_rank)
    for obj in rendered.objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == TEMPLATES_CONFIGMAP:
            namespace = obj["metadata"]["namespace"]
            for file_name, text in sorted(obj.get("data", {}).items()):
                docs = [doc for doc in yaml.safe_load_all(text) if doc]
                rendered.templates[(namespace, file_name)] = docs
    rendered.nodes = node_shapes(resources, rendered.objects)
    return rendered


def scheduling_problems(rendered: Rendered, objects: list[dict] | None = None) -> list[str]:
    """Extended resources that pods request and no device plugin of the stack advertises where
    the pods can run: such a pod stays Pending. `objects`: whose pods (default: the stack's)."""
    plugins = device_plugins(rendered.releases, rendered.nodes)
    return unserved_resources(
        rendered.all_objects() if objects is None else objects, rendered.nodes, plugins
    )


def admission_problems(rendered: Rendered, objects: list[dict] | None = None) -> list[str]:
    """What the stack's own admission policies would refuse or warn about among its objects
    in its namespaces (the Job templates among them), each created as kubectl creates it.
    `objects`: the ones to create instead (a team's Job), under the stack's policies."""
    stack = rendered.all_objects()
    policies = [o for o in stack if o["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [o for o in stack if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    namespaces = {o["metadata"]["name"]: o for o in stack if o["kind"] == "Namespace"}
    problems = []
    for obj in stack if objects is None else objects:
        namespace = namespaces.get(obj["metadata"].get("namespace"))
        if namespace is None:
            continue
        try:
            verdict = admit(policies, bindings, obj, namespace)
        except AdmissionError as exc:
            raise RenderError(str(exc)) from None
        where = f"{obj['kind']} {namespace['metadata']['name']}/{obj['metadata']['name']}"
        problems += [f"{where}: {failure.text()}" for failure in verdict.failures]
    return problems


def write(rendered: Rendered, out: Path) -> list[Path]:
    """Write the files; returns their paths."""
    written = []

    def put(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)

    for index, obj in enumerate(rendered.objects, start=1):
        meta = obj["metadata"]
        parts = [obj["kind"].lower(), meta.get("namespace"), meta["name"]]
        stem = "-".join(part for part in parts if part)
        put(out / "manifests" / f"{index * 10:03d}-{stem}.yaml", _dump(obj))
    for release in rendered.releases:
        folder = out / "helm" / release["name"]
        values = release["values"]
        put(folder / "release.yaml", _dump({k: v for k, v in release.items() if k != "values"}))
        put(folder / "values.yaml", _dump(values))
    for (namespace, file_name), docs in sorted(rendered.templates.items()):
        put(out / "templates" / namespace / file_name, yaml.safe_dump_all(docs, sort_keys=False))
    return written


def validated_versions() -> list[str]:
    """The Kubernetes minor versions kubernetes-validate has schemas for, as "1.33"."""
    from kubernetes_validate import utils

    return sorted({major_minor(v) for v in utils.all_versions()}, key=utils.Version)


def major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def validate(
    objects: Iterable[dict], kubernetes_version: str, crd_dirs: Iterable[Path] = ()
) -> tuple[list[str], list[str]]:
    """(problems, kinds left unvalidated). Built-in kinds: kubernetes-validate, strict. Custom
    resources: their schema's defaults applied, then the schema and its CEL rules."""
    import jsonschema
    import kubernetes_validate

    schemas = crd_schemas(crd_dirs)
    problems, unvalidated = [], []
    for obj in objects:
        where = f"{obj.get('kind')} {obj.get('metadata', {}).get('namespace', '')}/" + str(
            obj.get("metadata", {}).get("name")
        )
        schema = schemas.get((obj.get("apiVersion"), obj.get("kind")))
        if schema is not None:
            # As the API server: defaults first, then the schema and the CEL rules.
            obj = with_defaults(schema, obj)
            validator = jsonschema.Draft7Validator(schema)
            problems += [
                f"{where}: {'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
                for e in validator.iter_errors(obj)
            ]
            problems += [f"{where}: {problem}" for problem in rule_problems(schema, obj)]
            continue
        try:
            kubernetes_validate.validate(obj, kubernetes_version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            unvalidated.append(f"{obj.get('apiVersion')} {obj.get('kind')}")
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(map(str, exc.path)) or "(root)"
            problems.append(f"{where}: {path}: {exc.message}")
    return problems, sorted(set(unvalidated))


class _CrdLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """YAML 1.1 reads a bare `=` (an enum value in the AlertmanagerConfig CRD) as the `value`
    tag, which SafeLoader cannot construct; here it stays the plain string it is. Other files
    beside the CRDs may use local tags (a CloudFormation template's `!Sub`): read as plain
    values, they are skipped like any document that is not a CRD."""


def _untagged(loader: _CrdLoader, _suffix: str, node: yaml.Node):
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_scalar(node)


_CrdLoader.add_constructor(
    "tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node)
)
_CrdLoader.add_multi_constructor("!", _untagged)


# JSON Schemas of a whole object, by file name, for kinds whose CRD is the cluster's own and not
# published (GKE's ComputeClass): the file cannot name its group, so this table does.
OBJECT_SCHEMA_FILES = {"computeclass_v1.json": ("cloud.google.com/v1", "ComputeClass")}


def crd_schemas(crd_dirs: Iterable[Path]) -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> openAPIV3Schema of every served version of the CRDs found, and the
    whole-object schemas of OBJECT_SCHEMA_FILES."""
    schemas = {}
    for folder in crd_dirs:
        for path in sorted(Path(folder).rglob("*.json")):
            if path.name in OBJECT_SCHEMA_FILES:
                schemas[OBJECT_SCHEMA_FILES[path.name]] = json.loads(path.read_text())
        for path in sorted(Path(folder).rglob("*.y*ml")):
            text = path.read_text(errors="replace")
            if "kind: CustomResourceDefinition" not in text:
                continue  # chart values, templates: not worth parsing
            try:
                docs = list(yaml.load_all(text, Loader=_CrdLoader))
            except yaml.YAMLError as exc:
                reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
                raise RenderError(f"--crds: {path}: not valid YAML ({reason})") from None
            for doc in docs:
                if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec = doc["spec"]
                for version in spec["versions"]:
                    if version.get("served"):
                        key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                        schemas[key] = version["schema"]["openAPIV3Schema"]
    return schemas


def _apply_rank(obj: dict) -> tuple[int, str, str]:
    kind = obj["kind"]
    rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
    return rank, obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _release(inputs: dict) -> dict:
    return {
        "name": inputs["name"],
        "chart": inputs["chart"],
        "version": inputs["version"],
        "repository": inputs.get("repositoryOpts", {}).get("repo"),
        "namespace": inputs["namespace"],
        "values": inputs.get("values", {}),
    }


def plain(value: Any, where: str) -> Any:
    """JSON numbers come back as floats; Kubernetes integers must stay integers."""
    if isinstance(value, dict):
        return {k: plain(v, where) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v, where) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if value == UNKNOWN:
        raise RenderError(f"{where}: a value is not known until deploy; cannot render it")
    return value


def _dump(obj: dict) -> str:
    return yaml.safe_dump(obj, sort_keys=False)
