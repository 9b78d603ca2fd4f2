"""The building blocks every section of the stack config shares, whatever its cloud."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Kubernetes DNS-1123 label: namespaces, team names (they become label values and resource names).
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"

PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class Model(BaseModel):
    """Strict base: unknown keys are errors (a typo must never be silently ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


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
