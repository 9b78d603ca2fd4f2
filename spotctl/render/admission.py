"""What the API server's ValidatingAdmissionPolicy admission does with an object, offline: which
policies and bindings match it, and what each validation says, in the API server's words.

Semantics, as the Kubernetes documentation "Validating Admission Policy"
(kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/) and KEP-3488
("CEL for Admission Control") give them:
- A binding (its `policyName`) selects a request when the policy's `matchConstraints` and the
  binding's `matchResources` both match it: `resourceRules` (API group, version, resource,
  operation, scope, resource names) less `excludeResourceRules`, `namespaceSelector` (on the
  labels of the object's namespace; a Namespace is matched on its own labels, any other
  cluster-scoped object always), `objectSelector` (on the new or the old object's labels).
- `matchConditions` are evaluated in order: one false skips the policy; an error, with none
  false, is a failure under the policy's `failurePolicy` (Fail, the default, or Ignore).
- `variables` are evaluated in order, each seeing those before it as `variables.<name>`; one
  that fails is an error only for an expression that uses it.
- Each validation's expression must be true. When false, the message is the value of
  `messageExpression` (unless it fails, or is empty or spans lines), else `message`, else
  "failed expression: <expression>". An expression that fails is a failure under
  `failurePolicy`.
- A failure takes the binding's `validationActions`: Deny refuses the request, Warn returns a
  warning to the client, Audit records it in the audit log.
- Expressions see `object`, `oldObject` (null on create), `request`, `namespaceObject` and
  `params` (null: parameters, `paramKind`, are not evaluated offline).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spotctl.render.crd_rules import CEL_ERRORS, evaluate

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# Kinds whose resource name is not their lower-case plural.
RESOURCES = {"Ingress": "ingresses", "NetworkPolicy": "networkpolicies"}


class AdmissionError(ValueError):
    """A policy or binding that this evaluation does not cover (parameters)."""


@dataclass(frozen=True)
class Failure:
    """One failed validation of one policy, as one binding reports it."""

    policy: str
    binding: str
    actions: tuple[str, ...]
    message: str

    def text(self) -> str:
        """The API server's words: its denial, or the warning kubectl prints."""
        if "Deny" in self.actions:
            return (
                f"ValidatingAdmissionPolicy '{self.policy}' with binding '{self.binding}' "
                f"denied request: {self.message}"
            )
        return (
            f"Validation failed for ValidatingAdmissionPolicy '{self.policy}' with binding "
            f"'{self.binding}': {self.message}"
        )


@dataclass
class Verdict:
    failures: list[Failure] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.denials

    @property
    def denials(self) -> list[Failure]:
        return [f for f in self.failures if "Deny" in f.actions]

    @property
    def warnings(self) -> list[Failure]:
        return [f for f in self.failures if "Warn" in f.actions]


def admit(
    policies: list[dict],
    bindings: list[dict],
    obj: dict,
    namespace: dict | None = None,
    *,
    operation: str = "CREATE",
    old: dict | None = None,
) -> Verdict:
    """What the policies and their bindings make of a request for `obj` (in `namespace`, the
    Namespace object, for a namespaced object)."""
    by_name = {p["metadata"]["name"]: p for p in policies}
    request = _request(obj, namespace, operation)
    context = {
        "object": obj,
        "oldObject": old,
        "request": request,
        "namespaceObject": namespace,
        "params": None,
    }
    verdict = Verdict()
    for binding in bindings:
        policy = by_name.get(binding["spec"]["policyName"])
        if policy is None:
            continue  # a binding to a policy that does not exist (yet) does nothing
        if "paramKind" in policy["spec"]:
            raise AdmissionError(
                f"ValidatingAdmissionPolicy {policy['metadata']['name']}: paramKind is not "
                "evaluated offline"
            )
        if not (
            _matches(policy["spec"].get("matchConstraints", {}), request, obj, old, namespace)
            and _matches(binding["spec"].get("matchResources", {}), request, obj, old, namespace)
        ):
            continue
        actions = tuple(binding["spec"]["validationActions"])
        for message in _failures(policy, context):
            verdict.failures.append(
                Failure(policy["metadata"]["name"], binding["metadata"]["name"], actions, message)
            )
    return verdict


def _request(obj: dict, namespace: dict | None, operation: str) -> dict:
    group, _, version = obj["apiVersion"].rpartition("/")
    kind = obj["kind"]
    resource = RESOURCES.get(kind, kind.lower() + "s")
    meta = obj.get("metadata", {})
    return {
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "name": meta.get("name", ""),
        "namespace": (namespace or {}).get("metadata", {}).get("name", meta.get("namespace", "")),
        "operation": operation,
        "userInfo": {},
    }


def _matches(
    match: dict, request: dict, obj: dict, old: dict | None, namespace: dict | None
) -> bool:
    if "resourceRules" in match and not any(
        _rule_matches(rule, request) for rule in match["resourceRules"]
    ):
        return False
    if any(_rule_matches(rule, request) for rule in match.get("excludeResourceRules", [])):
        return False
    if "namespaceSelector" in match:
        if obj["kind"] == "Namespace":
            labels = obj.get("metadata", {}).get("labels", {})
        elif namespace is None:
            labels = None  # another cluster-scoped object: never skipped by namespace
        else:
            labels = {
                **namespace.get("metadata", {}).get("labels", {}),
                NAMESPACE_NAME_LABEL: namespace["metadata"]["name"],
            }
        if labels is not None and not selects(match["namespaceSelector"], labels):
            return False
    if "objectSelector" in match:
        candidates = [o for o in (obj, old) if o is not None]
        if not any(
            selects(match["objectSelector"], o.get("metadata", {}).get("labels", {}))
            for o in candidates
        ):
            return False
    return True


def _rule_matches(rule: dict, request: dict) -> bool:
    def among(values: list[str], value: str) -> bool:
        return "*" in values or value in values

    scope = rule.get("scope", "*")
    namespaced = bool(request["namespace"])
    return (
        among(rule.get("apiGroups", []), request["resource"]["group"])
        and among(rule.get("apiVersions", []), request["resource"]["version"])
        and (
            among(rule.get("resources", []), request["resource"]["resource"])
            or "*/*" in rule.get("resources", [])
        )
        and among(rule.get("operations", []), request["operation"])
        and (scope == "*" or (scope == "Namespaced") == namespaced)
        and (not rule.get("resourceNames") or request["name"] in rule["resourceNames"])
    )


def selects(selector: dict, labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions) over labels; {} selects all."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values", [])
        held = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[operator]
        if not held:
            return False
    return True


def _failures(policy: dict, context: dict[str, Any]) -> list[str]:
    """The messages of the policy's failed validations for this request."""
    spec = policy["spec"]
    fail = spec.get("failurePolicy", "Fail") == "Fail"
    errors = []
    for condition in spec.get("matchConditions", []):
        try:
            if evaluate(condition["expression"], context) is not True:
                return []
        except CEL_ERRORS as exc:
            errors.append(f"matchCondition '{condition['name']}': {exc}")
    if errors:
        return errors[:1] if fail else []
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        try:
            variables[variable["name"]] = evaluate(
                variable["expression"], {**context, "variables": variables}
            )
        except CEL_ERRORS:
            continue  # an error only where an expression uses it
    scope = {**context, "variables": variables}
    messages = []
    for validation in spec.get("validations", []):
        expression = validation["expression"]
        try:
            holds = evaluate(expression, scope)
        except CEL_ERRORS as exc:
            if fail:
                messages.append(f"expression '{expression}' resulted in error: {exc}")
            continue
        if holds is not True:
            messages.append(_message(validation, scope))
    return messages


def _message(validation: dict, scope: dict[str, Any]) -> str:
    if "messageExpression" in validation:
        try:
            text = evaluate(validation["messageExpression"], scope)
        except CEL_ERRORS:
            text = None
        if isinstance(text, str) and text.strip() and "\n" not in text:
            return text
    return validation.get("message") or f"failed expression: {validation['expression']}"
