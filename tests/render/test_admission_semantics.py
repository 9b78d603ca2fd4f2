"""The offline ValidatingAdmissionPolicy evaluation follows the API server's semantics, as the
Kubernetes documentation "Validating Admission Policy"
(https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/) and
KEP-3488 "CEL for Admission Control" (kubernetes/enhancements, keps/sig-api-machinery/3488) state
them: matching (resourceRules, excludeResourceRules, namespaceSelector, objectSelector, the
binding's matchResources), matchConditions, variables, validations with messageExpression, the
failurePolicy, and the binding's validationActions."""

from __future__ import annotations

import pytest

from spotctl.render.admission import AdmissionError, admit, selects

TEAM = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "team-a", "labels": {"team": "a"}},
}
OTHER = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other", "labels": {}}}


def job(name: str = "run", labels: dict | None = None, parallelism: int = 1) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "team-a", "labels": labels or {}},
        "spec": {"parallelism": parallelism},
    }


def policy(**spec) -> dict:
    """A policy on Jobs in namespaces labelled `team`, refusing parallelism above 2."""
    base = {
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": ["batch"],
                    "apiVersions": ["v1"],
                    "resources": ["jobs"],
                    "operations": ["CREATE", "UPDATE"],
                }
            ],
            "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]},
        },
        "validations": [{"expression": "object.spec.parallelism <= 2", "message": "too wide"}],
    }
    return {"metadata": {"name": "narrow"}, "spec": {**base, **spec}}


def binding(actions=("Deny",), **spec) -> dict:
    return {
        "metadata": {"name": "narrow-binding"},
        "spec": {"policyName": "narrow", "validationActions": list(actions), **spec},
    }


def failures(pol: dict, obj: dict, bind: dict | None = None, **kwargs) -> list[str]:
    verdict = admit([pol], [bind or binding()], obj, TEAM, **kwargs)
    return [f.message for f in verdict.failures]


def test_a_failed_validation_is_denied_in_the_api_servers_words() -> None:
    verdict = admit([policy()], [binding()], job(parallelism=3), TEAM)
    assert not verdict.allowed
    assert [f.text() for f in verdict.denials] == [
        "ValidatingAdmissionPolicy 'narrow' with binding 'narrow-binding' denied request: too wide"
    ]
    assert admit([policy()], [binding()], job(parallelism=2), TEAM).failures == []


def test_warn_and_audit_admit_with_a_warning() -> None:
    verdict = admit([policy()], [binding(("Warn", "Audit"))], job(parallelism=3), TEAM)
    assert verdict.allowed
    assert [f.text() for f in verdict.warnings] == [
        "Validation failed for ValidatingAdmissionPolicy 'narrow' with binding "
        "'narrow-binding': too wide"
    ]
    audit_only = admit([policy()], [binding(("Audit",))], job(parallelism=3), TEAM)
    assert audit_only.allowed and audit_only.warnings == [] and len(audit_only.failures) == 1


def test_match_constraints_select_resource_operation_and_namespace() -> None:
    wide = job(parallelism=3)
    assert failures(policy(), wide) == ["too wide"]
    # The namespace's labels, as the API server reads them (its name label included).
    assert admit([policy()], [binding()], {**wide}, OTHER).failures == []
    # Not an operation the rule lists.
    assert failures(policy(), wide, operation="DELETE") == []
    # Another resource.
    deployment = {**wide, "apiVersion": "apps/v1", "kind": "Deployment"}
    assert failures(policy(), deployment) == []
    excluded = policy()
    excluded["spec"]["matchConstraints"]["excludeResourceRules"] = [
        {
            "apiGroups": ["*"],
            "apiVersions": ["*"],
            "resources": ["jobs"],
            "operations": ["*"],
            "resourceNames": ["run"],
        }
    ]
    assert failures(excluded, wide) == []
    assert failures(excluded, job("other-run", parallelism=3)) == ["too wide"]


def test_object_selector_and_the_bindings_match_resources_narrow_the_policy() -> None:
    selected = policy()
    selected["spec"]["matchConstraints"]["objectSelector"] = {"matchLabels": {"tier": "gpu"}}
    assert failures(selected, job(parallelism=3)) == []
    assert failures(selected, job(labels={"tier": "gpu"}, parallelism=3)) == ["too wide"]
    by_name = binding(
        matchResources={
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["b"]}
                ]
            }
        }
    )
    assert failures(policy(), job(parallelism=3), by_name) == []


def test_match_conditions_skip_and_their_errors_follow_the_failure_policy() -> None:
    skip = policy(matchConditions=[{"name": "wide-only", "expression": "false"}])
    assert failures(skip, job(parallelism=3)) == []
    broken = [{"name": "broken", "expression": "object.spec.missing == 1"}]
    assert len(failures(policy(matchConditions=broken), job(parallelism=1))) == 1
    ignored = policy(matchConditions=broken, failurePolicy="Ignore")
    assert failures(ignored, job(parallelism=3)) == []
    # A false condition wins over an error.
    both = policy(matchConditions=[*broken, {"name": "no", "expression": "false"}])
    assert failures(both, job(parallelism=3)) == []


def test_variables_compose_in_order_and_fail_only_where_used() -> None:
    pol = policy(
        variables=[
            {"name": "width", "expression": "object.spec.parallelism"},
            {"name": "double", "expression": "variables.width * 2"},
            {"name": "broken", "expression": "object.spec.missing"},
        ],
        validations=[{"expression": "variables.double <= 4", "message": "too wide"}],
    )
    assert failures(pol, job(parallelism=2)) == []
    assert failures(pol, job(parallelism=3)) == ["too wide"]
    pol["spec"]["validations"] = [{"expression": "variables.broken == 1", "message": "x"}]
    [error] = failures(pol, job())
    assert "resulted in error" in error


def test_message_expression_then_message_then_the_expression() -> None:
    computed = [
        {
            "expression": "object.spec.parallelism <= 2",
            "messageExpression": "'parallelism ' + string(object.spec.parallelism) + ' > 2'",
            "message": "too wide",
        }
    ]
    assert failures(policy(validations=computed), job(parallelism=3)) == ["parallelism 3 > 2"]
    for broken in ("object.spec.missing", "''", "'two\\nlines'"):
        computed[0]["messageExpression"] = broken
        assert failures(policy(validations=computed), job(parallelism=3)) == ["too wide"]
    bare = [{"expression": "object.spec.parallelism <= 2"}]
    assert failures(policy(validations=bare), job(parallelism=3)) == [
        "failed expression: object.spec.parallelism <= 2"
    ]


def test_old_object_and_request_are_bound() -> None:
    pol = policy(
        matchConditions=[
            {
                "name": "changed",
                "expression": "request.operation == 'CREATE' || object.spec != oldObject.spec",
            }
        ]
    )
    wide = job(parallelism=3)
    assert failures(pol, wide, operation="UPDATE", old=wide) == []
    assert failures(pol, wide, operation="UPDATE", old=job()) == ["too wide"]


def test_a_binding_without_its_policy_does_nothing_and_params_are_refused() -> None:
    stray = binding()
    stray["spec"]["policyName"] = "missing"
    assert admit([policy()], [stray], job(parallelism=3), TEAM).failures == []
    with pytest.raises(AdmissionError, match="paramKind"):
        admit(
            [policy(paramKind={"apiVersion": "v1", "kind": "ConfigMap"})], [binding()], job(), TEAM
        )


@pytest.mark.parametrize(
    ("selector", "labels", "selected"),
    [
        ({}, {}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
            {"a": "2"},
            True,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
    ],
)
def test_label_selectors(selector: dict, labels: dict, selected: bool) -> None:
    assert selects(selector, labels) is selected
