"""The building blocks every section of the stack config shares, whatever its cloud."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, TypeVar, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.fields import FieldInfo

from components.config.document import SECRET

# Kubernetes DNS-1123 label: namespaces, team names (they become label values and resource names).
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"

# A Kubernetes-style duration, as Kueue takes its timeouts.
DURATION = r"^\d+(s|m|h)$"


def duration_seconds(duration: str) -> int:
    """Seconds in a DURATION such as "15m"."""
    return int(duration[:-1]) * {"s": 1, "m": 60, "h": 3600}[duration[-1]]


def ipv4_network(value: str) -> ipaddress.IPv4Network:
    """The IPv4 network a field names, or a ValueError that says why it names none."""
    try:
        return ipaddress.IPv4Network(value)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not an IPv4 network ({exc})") from None


class Secret:
    """Marks a field that may hold a credential (a webhook URL, a password): the one kind of
    field a stack may keep encrypted (`pulumi config set --secret`), and one the components always
    carry as a Pulumi secret."""


def secret_text(pattern: str) -> Any:
    """Text of the pattern, or, where an encrypted value cannot be decrypted (offline), the
    placeholder SECRET, which is accepted unchecked."""

    def check(value: str) -> str:
        if value != SECRET and not re.fullmatch(pattern, value):
            raise ValueError(f"{value!r} does not match {pattern}")
        return value

    return Annotated[str, Secret(), AfterValidator(check)]


def _parts(annotation: Any) -> list[Any]:
    """A type annotation and everything inside it: union members, items, Annotated metadata."""
    return [annotation, *(part for arg in get_args(annotation) for part in _parts(arg))]


def _is_secret(field: FieldInfo) -> bool:
    return any(isinstance(part, Secret) for part in (*_parts(field.annotation), *field.metadata))


def secret_fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Paths of the fields under `model` that may hold a credential."""
    found = []
    for name, field in model.model_fields.items():
        if _is_secret(field):
            found.append(prefix + name)
        for part in _parts(field.annotation):
            if isinstance(part, type) and issubclass(part, BaseModel):
                found += secret_fields(part, f"{prefix}{name}.")
    return found


def misplaced_secrets(model: BaseModel, prefix: str = "") -> list[str]:
    """Paths of the placeholders of encrypted values (SECRET) in fields that are no credential:
    the platform writes those in plain text (names, tags, settings)."""
    found = []
    for name, field in type(model).model_fields.items():
        if not _is_secret(field):
            found += _placeholders(getattr(model, name), prefix + name)
    return found


def _placeholders(value: Any, path: str) -> list[str]:
    if isinstance(value, BaseModel):
        return misplaced_secrets(value, f"{path}.")
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in _placeholders(item, f"{path}[{key!r}]")]
    if isinstance(value, list | tuple):
        return [p for i, item in enumerate(value) for p in _placeholders(item, f"{path}[{i}]")]
    return [path] if value == SECRET else []


PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]

# The GPU idle alert fires below 100 - this utilisation: at 100 it never would.
GpuIdlePercent = Annotated[
    int, Field(ge=1, le=99, description="Average GPU idle share (%) that warns.")
]

# EC2 instance types ("g5.xlarge") and Compute Engine machine types ("g2-standard-8").
INSTANCE_TYPE = r"^[a-z0-9]+(-[a-z0-9]+)*(\.[a-z0-9]+)?$"


def _unique(value: list[str]) -> list[str]:
    if len(set(value)) != len(value):
        raise ValueError("instance types must be unique")
    return value


InstanceTypes = Annotated[
    list[Annotated[str, Field(pattern=INSTANCE_TYPE)]],
    Field(min_length=1),
    AfterValidator(_unique),
]


class Model(BaseModel):
    """Strict base: unknown keys are errors (a typo must never be silently ignored)."""

    # No infinite or NaN numbers: a price of .inf compares as no price at all.
    model_config = ConfigDict(
        extra="forbid", frozen=True, coerce_numbers_to_str=True, allow_inf_nan=False
    )


class CreateOrAttach(Model):
    """A cluster the stack creates (`create`) or one created elsewhere (`existing`): exactly one.
    Each cloud's section narrows both fields to its own models."""

    create: Model | None = None
    existing: Model | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> CreateOrAttach:
        if (self.create is None) == (self.existing is None):
            raise ValueError("set exactly one of 'create' or 'existing'")
        return self

    @property
    def name(self) -> str:
        return (self.create or self.existing).name


MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
WEEKDAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
# Cron fields as EC2 Auto Scaling and Cloud Scheduler (unix-cron) read them: name, range, and the
# names that stand for values.
CRON_FIELDS = (
    ("minute", range(0, 60), {}),
    ("hour", range(0, 24), {}),
    ("day of month", range(1, 32), {}),
    ("month", range(1, 13), {name: i + 1 for i, name in enumerate(MONTHS)}),
    ("day of week", range(0, 8), {name: i for i, name in enumerate(WEEKDAYS)}),
)
# One item of a field's comma-separated list: `*`, `N`, `N-M`, each optionally `/STEP`.
CRON_ITEM = re.compile(r"^(\*|(?P<low>\w+)(-(?P<high>\w+))?)(/(?P<step>[1-9]\d*))?$")


def check_cron(expression: str) -> str:
    """A five-field cron expression, or a ValueError naming the field that is wrong."""
    fields = expression.split()
    if len(fields) != len(CRON_FIELDS):
        raise ValueError(
            f"{expression!r} is not a cron expression of five fields (minute hour day-of-month "
            "month day-of-week)"
        )
    for text, (what, allowed, names) in zip(fields, CRON_FIELDS, strict=True):
        for item in text.split(","):
            match = CRON_ITEM.match(item)
            if match is None:
                raise ValueError(f"{expression!r}: {what} {item!r} is not cron syntax")
            ends = [match[k].upper() for k in ("low", "high") if match[k]]
            values = [int(e) if e.isdigit() else names.get(e) for e in ends]
            if None in values or any(v not in allowed for v in values) or values != sorted(values):
                raise ValueError(
                    f"{expression!r}: {what} {item!r} is not a value or ascending range within "
                    f"{allowed[0]}-{allowed[-1]}"
                )
    return expression


class ScheduledAction(Model):
    """One named action of a pool's schedule, at the times of a five-field cron expression.
    Each cloud adds what the action sets."""

    name: str = Field(pattern=DNS_LABEL)
    recurrence: Annotated[str, AfterValidator(check_cron)]


Action = TypeVar("Action", bound=ScheduledAction)


def _unique_names(actions: list[Action]) -> list[Action]:
    names = [action.name for action in actions]
    if len(set(names)) != len(names):
        duplicates = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(f"schedule action names must be unique; repeated: {duplicates}")
    return actions


# A pool's schedule: at least one action, each name once (it names the action's cloud resource).
Schedule = Annotated[list[Action], Field(min_length=1), AfterValidator(_unique_names)]
