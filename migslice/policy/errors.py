"""Errors of policy parsing and validation: every error with its field path, all at once."""

from __future__ import annotations

from dataclasses import dataclass

from migslice.errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem at one field, e.g. ``spec.sizes.medium.memory: "lots" is not a quantity``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class PolicyError(InvalidInputError):
    """A TenantPolicy that cannot be used; ``errors`` lists every problem found."""

    def __init__(self, name: str, errors: tuple[FieldError, ...]) -> None:
        self.name = name
        self.errors = errors
        listed = "; ".join(str(e) for e in errors)
        super().__init__(f'TenantPolicy "{name}" is invalid: {listed}')
