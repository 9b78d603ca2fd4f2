"""What the quarterly review looks at, gathered offline into one JSON-ready document.

Each section adds findings: `mandatory` ones (an expired waiver, a version past its end of
support, a mandatory policy violation) make the review fail; `flags` are for the team to act on.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from components.config.files import ProgramInputError, load_project, stack_names
from components.config.loading import ConfigError, load_config, stack_document
from spotctl import provider_data
from spotctl.preview.analyzer import check_preview, read_policy_config
from spotctl.preview.resources import PreviewResource, preview_program
from spotctl.progress import Progress
from spotctl.review.costs import CostsError, team_costs
from spotctl.review.headroom import headroom
from spotctl.review.runbooks import RunbookError, all_runbooks

REPO = Path(__file__).resolve().parents[2]
END_OF_SUPPORT = REPO / "components" / "end_of_support.yaml"
WARN_DAYS = 90  # a date within this many days of the review is flagged
RUNBOOK_LINK = re.compile(r"runbooks/(\w+)/(\w+)\.md")
ALERT_SOURCES = {
    "aws:cloudwatch/metricAlarm:MetricAlarm": "CloudWatch alarm",
    "gcp:monitoring/alertPolicy:AlertPolicy": "Cloud Monitoring alert policy",
    # Not an alert, but what sends an engineer to a runbook: a refusal at admission.
    "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy": "Admission policy",
}


SECTIONS = (
    "stacks",
    "waivers",
    "admission",
    "versions",
    "runbooks",
    "drills",
    "costs",
    "provider_data",
)
"""The report's sections, in the order of its findings."""


class ReviewError(Exception):
    """The review cannot run as given: a bad date or quarter, a missing directory, bad data."""


@dataclass
class Review:
    quarter: str
    date: date
    mandatory: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    sections: dict[str, Any] = field(default_factory=dict)

    def add(self, other: Review) -> None:
        self.mandatory += other.mandatory
        self.flags += other.flags
        self.sections.update(other.sections)

    def to_json(self) -> dict[str, Any]:
        return {
            "quarter": self.quarter,
            "date": self.date.isoformat(),
            "mandatory": self.mandatory,
            "flags": self.flags,
            **self.sections,
        }


def quarter_of(day: date) -> str:
    return f"{day.year}Q{(day.month - 1) // 3 + 1}"


def stacks(program: Path) -> list[str]:
    try:
        return stack_names(program, load_project(program))
    except ProgramInputError as exc:
        raise ReviewError(str(exc)) from None


def stack_values(program: Path, stack: str) -> dict[str, Any]:
    try:
        return stack_document(program, stack)
    except (ProgramInputError, ConfigError) as exc:
        raise ReviewError(str(exc)) from None


def _days(until: date, today: date) -> int:
    return (until - today).days


def review_stacks(
    review: Review,
    program: Path,
    pack: Path,
    policy_config: dict[str, dict[str, Any]],
    previews: dict[str, list[PreviewResource]],
    progress: Progress | None = None,
) -> None:
    """Per stack: the pack's verdict, and each threshold beside the stack's value."""

    def verdict(stack: str) -> dict[str, Any]:
        resources = previews[stack]
        if progress is not None:
            progress.update(stack, f"running the policy pack on {len(resources)} resources")
        report = check_preview(pack, program, stack, resources, policy_config)
        if progress is not None:
            progress.update(stack, "policies checked")
        groups = report.grouped()
        return {
            "stack": stack,
            "resources": len(resources),
            "verdict": "fail" if groups["mandatory"] else "pass",
            "violations": {
                level: [
                    {
                        "policy": v.policy,
                        "resource": v.urn.rsplit("::", 1)[-1] if v.urn else "",
                        "message": v.message.splitlines()[-1],
                    }
                    for v in found
                ]
                for level, found in groups.items()
            },
            "headroom": headroom(resources, report.config),
        }

    with ThreadPoolExecutor(max_workers=len(previews) or 1) as pool:
        results = list(pool.map(verdict, sorted(previews)))
    for result in results:
        for v in result["violations"]["mandatory"]:
            review.mandatory.append(
                f"stack {result['stack']}: mandatory {v['policy']} on {v['resource'] or 'stack'}"
            )
        for row in result["headroom"]:
            if row["headroom"] < 0:
                review.flags.append(
                    f"stack {result['stack']}: {row['resource']} has {row['setting']} "
                    f"{row['actual']:g} against {row['threshold']:g} ({row['policy']})"
                )
    review.sections["stacks"] = results


def load_pack_waivers(pack: Path) -> list:
    """The pack's waivers, read by the pack's own loader (waivers.py imports nothing of the pack,
    so this works for any copy of it)."""
    name = f"_pack_waivers_{abs(hash(pack.resolve()))}"
    spec = importlib.util.spec_from_file_location(name, pack / "waivers.py")
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ValueError as exc:
        raise ReviewError(f"{pack}: {exc}") from None
    return module.WAIVERS


def review_waivers(review: Review, pack: Path) -> None:
    rows = []
    for waiver in load_pack_waivers(pack):
        left = _days(waiver.expires, review.date)
        status = "expired" if left < 0 else "expiring" if left <= WARN_DAYS else "current"
        rows.append(
            {
                "policy": waiver.policy,
                "stack": waiver.stack,
                "resource": waiver.resource,
                "owner": waiver.owner,
                "reason": waiver.reason,
                "expires": waiver.expires.isoformat(),
                "days_left": left,
                "status": status,
            }
        )
        what = f"{waiver.describe()} ({waiver.owner})"
        if status == "expired":
            review.mandatory.append(f"{what} expired on {waiver.expires}")
        elif status == "expiring":
            review.flags.append(f"{what} expires in {left} days")
    review.sections["waivers"] = rows


def review_admission(review: Review, program: Path, stack_names: list[str]) -> None:
    """Per stack, each team namespace's admission mode (Audit and Warn admit a breach), and
    each admission waiver with its expiry (kubernetes.admission)."""
    namespaces, waivers = [], []
    for stack in stack_names:
        try:
            config = load_config(stack_values(program, stack))
        except ConfigError as exc:
            raise ReviewError(f"stack {stack}: {exc}") from None
        admission = config.kubernetes.admission
        for team in config.teams:
            mode = admission.mode_of(team.namespace)
            waived = sorted(admission.waived(team.namespace, review.date))
            namespaces.append(
                {
                    "stack": stack,
                    "namespace": team.namespace,
                    "mode": mode,
                    "waived_rules": ", ".join(waived),
                }
            )
            if mode != "Deny":
                review.flags.append(
                    f"stack {stack}: namespace {team.namespace} is in admission mode {mode}: "
                    "breaches are admitted, not refused; switch it to Deny "
                    "(kubernetes.admission.namespace_modes)"
                )
        for waiver in admission.waivers:
            left = _days(waiver.expires, review.date)
            status = "expired" if left < 0 else "expiring" if left <= WARN_DAYS else "current"
            waivers.append(
                {
                    "stack": stack,
                    "namespace": waiver.namespace,
                    "rule": waiver.rule,
                    "owner": waiver.owner,
                    "reason": waiver.reason,
                    "expires": waiver.expires.isoformat(),
                    "days_left": left,
                    "status": status,
                }
            )
            what = (
                f"stack {stack}: admission waiver of {waiver.rule} for {waiver.namespace} "
                f"({waiver.owner})"
            )
            if status == "expired":
                review.mandatory.append(
                    f"{what} expired on {waiver.expires}: the next pulumi up enforces the rule"
                )
            elif status == "expiring":
                review.flags.append(f"{what} expires in {left} days")
    review.sections["admission"] = {"namespaces": namespaces, "waivers": waivers}


def pinned_versions() -> list[dict[str, Any]]:
    """Every version components/versions.py pins, with its end of support: from versions.py for
    Kubernetes and its add-ons, from the table for the rest (None where it has no entry for the
    exact version pinned)."""
    from components import versions

    table = yaml.safe_load(END_OF_SUPPORT.read_text())
    rows = []
    for release in versions.KUBERNETES_RELEASES.values():
        extended = versions.UPGRADE_SUPPORT_TYPE == "EXTENDED"
        end = release.extended_support_ends if extended else release.standard_support_ends
        source = f"standard support ends {release.standard_support_ends}; "
        rows.append(
            _pin(
                "kubernetes",
                "Kubernetes (EKS)",
                release.version,
                end,
                source + table["kubernetes"]["source"],
            )
        )
        for addon, version in release.addons.items():
            kind = f"EKS add-on for {release.version}"
            rows.append(_pin(addon, kind, version, end, table["addons"]["source"]))
    named = [
        ("gke", "Kubernetes (GKE), lowest a new cluster asks for", versions.GKE_VERSION),
        ("gpu-ami", "GPU node AMI", versions.GPU_AMI_ALIAS),
        *((c.name, "Helm chart", c.version) for c in versions.CHARTS),
        *((name, "Pulumi SDK / provider", spec) for name, spec in versions.PROVIDERS.items()),
        ("training-image-base", "container image", versions.TRAINING_IMAGE_BASE),
        ("torch", "Python package", _torch_pin(versions.TORCH_PIN)),
    ]
    for name, kind, version in named:
        entry = table["pins"].get(name) or {}
        if entry.get("version") == version:
            rows.append(_pin(name, kind, version, entry["end_of_support"], entry["source"]))
        else:
            missing = f"no entry for {version} in {END_OF_SUPPORT.name}"
            rows.append(_pin(name, kind, version, None, missing))
    return rows


def _pin(name: str, kind: str, version: str, end: date | None, source: str) -> dict[str, Any]:
    return {"component": name, "kind": kind, "version": version, "end": end, "source": source}


def _torch_pin(path: Path) -> str:
    return next(line for line in path.read_text().splitlines() if line and line[0] != "#")


def review_versions(review: Review) -> None:
    from components.versions import GPU_AMI_ALIAS, KUBERNETES_RELEASES, KUBERNETES_VERSION

    for release in KUBERNETES_RELEASES.values():
        if review.date > release.standard_support_ends:
            problem = (
                f"Kubernetes {release.version} is in EKS extended support (billed extra) since "
                f"{release.standard_support_ends}"
            )
            # A new cluster must start in standard support; a minor still listed beside the
            # default is one that clusters are being moved off.
            if release.version == KUBERNETES_VERSION:
                review.mandatory.append(
                    f"{problem}, and new clusters start on it: move the default"
                )
            else:
                review.flags.append(f"{problem}: upgrade it")
    released = ami_release(GPU_AMI_ALIAS)
    if released is not None and _days(review.date, released) > WARN_DAYS:
        review.flags.append(
            f"GPU node AMI {GPU_AMI_ALIAS} was released {_days(review.date, released)} days ago "
            f"(over {WARN_DAYS}): pin a newer alias"
        )
    rows = []
    for pin in pinned_versions():
        end = pin.pop("end")
        if end is None:
            pin.update(end_of_support=None, days_left=None, status="unknown")
            review.flags.append(f"{pin['component']} {pin['version']}: {pin['source']}")
        else:
            left = _days(end, review.date)
            status = "past" if left < 0 else "ending" if left <= WARN_DAYS else "supported"
            pin.update(end_of_support=end.isoformat(), days_left=left, status=status)
            what = f"{pin['component']} {pin['version']}"
            if status == "past":
                review.mandatory.append(f"{what} is past its end of support ({end})")
            elif status == "ending":
                review.flags.append(f"{what} reaches its end of support in {left} days ({end})")
        rows.append(pin)
    review.sections["versions"] = rows


def ami_release(alias: str) -> date | None:
    """The release date an EKS AMI alias names (`al2023@v20260520`), or None for another form."""
    match = re.fullmatch(r"[a-z0-9]+@v(\d{4})(\d{2})(\d{2})", alias)
    return date(*map(int, match.groups())) if match else None


def prometheus_alerts() -> list[tuple[str, str, str]]:
    """(source, alert, runbook path) of the alert rules the monitoring stack loads."""
    found = []
    for path in sorted((REPO / "components" / "k8s" / "rules").glob("*.yaml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    link = rule.get("annotations", {}).get("runbook_url", "")
                    found.append(("Prometheus alert", rule["alert"], _runbook_path(link)))
    return found


def cloud_alerts(previews: dict[str, list[PreviewResource]]) -> list[tuple[str, str, str]]:
    """(source, alert, runbook path) of the CloudWatch alarms and Cloud Monitoring alert
    policies the stacks create, read from their previewed inputs."""
    found = {}
    for resources in previews.values():
        for resource in resources:
            source = ALERT_SOURCES.get(resource.type)
            if source is None:
                continue
            path = _runbook_path(json.dumps(resource.inputs))
            alert = Path(path).stem if path else resource.name
            found[(source, alert)] = path
    return [(source, alert, path) for (source, alert), path in sorted(found.items())]


def _runbook_path(text: str) -> str:
    match = RUNBOOK_LINK.search(text)
    return match.group(0) if match else ""


def review_runbooks(review: Review, previews: dict[str, list[PreviewResource]]) -> None:
    try:
        runbooks = all_runbooks(REPO / "runbooks")
    except RunbookError as exc:
        raise ReviewError(str(exc)) from None
    fresh = []
    for runbook in runbooks:
        age = _days(review.date, runbook.last_reviewed)
        status = "stale" if age > WARN_DAYS else "fresh"
        fresh.append(
            {
                "runbook": runbook.relative,
                "last_reviewed": str(runbook.last_reviewed),
                "age_days": age,
                "status": status,
            }
        )
        if status == "stale":
            review.flags.append(f"{runbook.relative} last reviewed {age} days ago")
    alerts = prometheus_alerts() + cloud_alerts(previews)
    existing = {runbook.relative for runbook in runbooks}
    coverage = []
    for source, alert, path in alerts:
        ok = path in existing
        coverage.append({"source": source, "alert": alert, "runbook": path, "exists": ok})
        if not ok:
            review.flags.append(f"{source} {alert} links no runbook that exists ({path or '-'})")
    linked = {path for _, _, path in alerts}
    unlinked = sorted(existing - linked)
    for path in unlinked:
        review.flags.append(f"{path}: no alert of the stacks links it")
    review.sections["runbooks"] = {"freshness": fresh, "alerts": coverage, "unlinked": unlinked}


def review_drills(review: Review, directory: Path | None) -> None:
    """The quarter's saved drill reports, one row each: the local drill's (`spotctl drill
    --json`) in the directory, the cloud drill's (`--cloud-run`) in its `cloud/` folder. A cloud
    run has no reference weights and no end: it is judged by its runs training again."""
    rows = []
    paths = (
        sorted([*directory.glob("*.json"), *directory.glob("cloud/*.json")]) if directory else []
    )
    for path in paths:
        try:
            report = json.loads(path.read_text())
            jobs, goals = report["jobs"], report["goals"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ReviewError(f"{path}: not a drill report ({exc})") from None
        goodput = goals.get("goodput", report.get("goodput"))
        if isinstance(goodput, dict):
            goodput = goodput.get("ratio", goodput.get("goodput", goodput.get("share")))
        cloud = report.get("kind") == "cloud"
        row = {
            "report": path.relative_to(directory).as_posix(),
            "kind": "cloud" if cloud else "local",
            "duration_s": report.get("duration_s"),
            "interruptions": len(report.get("interruptions", [])),
            "jobs": len(jobs),
            "finished": sum(bool(j.get("recovered" if cloud else "finished")) for j in jobs),
            "weights_match": None if cloud else bool(goals.get("weights_match_references")),
            "saving_share": (report.get("cost") or {}).get("saving_share"),
            "idle_share": goals.get("idle_share"),
            "goodput": goodput,
        }
        rows.append(row)
        if cloud and not row["jobs"]:
            review.flags.append(f"drill {row['report']}: no training run in its window")
        elif cloud and row["finished"] < row["jobs"]:
            review.flags.append(f"drill {row['report']}: a run was not training again at its end")
        elif not cloud and (row["finished"] < row["jobs"] or not row["weights_match"]):
            review.flags.append(f"drill {row['report']}: a job did not recover exactly")
    if directory is not None and not rows:
        review.flags.append(f"no drill reports in {directory}")
    if directory is None:
        review.flags.append("no drill reports given (--drill-reports)")
    review.sections["drills"] = rows


def review_provider_data(
    review: Review, data_path: Path, program: Path, stack_names: list[str]
) -> None:
    """A verdict per GPU class of each stack from the spot interruption bands the team brings."""
    try:
        data = provider_data.read(data_path)
    except provider_data.ProviderDataError as exc:
        raise ReviewError(str(exc)) from None
    age = _days(review.date, data.date)
    if age > WARN_DAYS:
        review.flags.append(f"{data_path.name} was read {age} days ago: bring current data")
    pools = []
    for stack in stack_names:
        values = stack_values(program, stack)
        cloud, region = values.get("cloud", "aws"), values.get("region")
        for gpu_class in values.get("gpu_classes") or []:
            types = gpu_class.get("instance_types") or gpu_class.get("machine_types") or []
            by_type = {t: getattr(data.row(cloud, region, t), "band", None) for t in types}
            verdict = _pool_verdict(by_type, data.bands)
            pools.append(
                {
                    "stack": stack,
                    "pool": gpu_class["name"],
                    "region": region,
                    "bands": by_type,
                    "verdict": verdict,
                }
            )
            if verdict != "keep":
                review.flags.append(f"stack {stack}: class {gpu_class['name']}: {verdict}")
    review.sections["provider_data"] = {
        "source": data.source,
        "date": data.date.isoformat(),
        "age_days": age,
        "bands": list(data.bands),
        "pools": pools,
    }


def _pool_verdict(by_type: dict[str, str | None], bands: tuple[str, ...]) -> str:
    missing = sorted(t for t, band in by_type.items() if band is None)
    if missing:
        return f"no data for {', '.join(missing)}"
    rank = {band: i for i, band in enumerate(bands)}
    high = sorted(t for t, band in by_type.items() if rank[band] == len(bands) - 1)
    raised = sorted(t for t, band in by_type.items() if rank[band] >= 2)
    if high:
        return f"replace {', '.join(high)} (highest interruption band)"
    if raised:
        return f"review {', '.join(raised)} (interruption band {bands[2]} or above)"
    return "keep"


def review_costs(review: Review, path: Path | None) -> None:
    """Each team's cost for the quarter and its lost work's, from the cluster's recordings."""
    if path is None:
        review.flags.append("no cost report given (--costs)")
        return
    try:
        review.sections["costs"] = team_costs(path)
    except CostsError as exc:
        raise ReviewError(str(exc)) from None


def collect(
    *,
    day: date,
    quarter: str,
    program: Path = REPO,
    pack: Path = REPO / "policies",
    policy_config: Path | None = None,
    drill_reports: Path | None = None,
    costs: Path | None = None,
    provider_data: Path | None = None,
    previews: dict[str, list[PreviewResource]] | None = None,
    progress: Progress | None = None,
) -> Review:
    names = stacks(program)
    found = {section: Review(quarter, day) for section in SECTIONS}
    # The sections that need no preview first: a bad input file is refused before the minutes
    # of previews.
    review_waivers(found["waivers"], pack)
    review_versions(found["versions"])
    review_drills(found["drills"], drill_reports)
    review_costs(found["costs"], costs)
    policy = read_policy_config(policy_config)
    data = provider_data or pack / "provider-data.yaml"
    review_provider_data(found["provider_data"], data, program, names)
    review_admission(found["admission"], program, names)
    if previews is None:

        def preview(stack: str) -> list[PreviewResource]:
            if progress is None:
                return preview_program(program, stack)
            progress.update(stack, "starting the engine (Pulumi and the providers load first)")
            resources = preview_program(program, stack, on_registered=progress.registrations(stack))
            progress.update(stack, f"previewed, {len(resources)} resources")
            return resources

        with ThreadPoolExecutor(max_workers=len(names) or 1) as pool:
            previews = dict(zip(names, pool.map(preview, names), strict=True))
    review_stacks(found["stacks"], program, pack, policy, previews, progress)
    review_runbooks(found["runbooks"], previews)
    review = Review(quarter, day)
    for section in found.values():
        review.add(section)
    return review
