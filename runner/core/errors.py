"""User-facing errors: one exception type carrying problems with stable codes.

A *problem* is one thing the user got wrong: a stable code (``MANIFEST_UNKNOWN_FIELD``),
where it is (file, field, line) and a hint saying what would be valid. Codes, their
message templates, hints and exit codes are registered in ``error_catalogue``; a problem
is made from a code and its parameters (:meth:`Problem.of`). The CLI prints one line per
problem and exits with the code's exit code (2); anything else is an internal failure (1).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runner.core.error_catalogue import CATALOGUE, USER_ERROR
from runner.core.part import Part


class UnregisteredErrorCode(KeyError):
    """A problem was raised with a code the catalogue does not hold (a defect, not a user error)."""


class Problem(Part):
    """One user mistake, located as precisely as we can; a part of the documents that carry problems (a job's
    verdict on its manifest)."""

    code: str
    message: str
    file: str | None = None
    field: str | None = None
    line: int | None = None
    hint: str | None = None

    @staticmethod
    def of(
        code: str, /, *, file: str | None = None, field: str | None = None, line: int | None = None, **params: Any
    ) -> Problem:
        """The problem ``code`` names, its message and hint filled in from ``params``."""
        entry = CATALOGUE.get(code)
        if entry is None:
            raise UnregisteredErrorCode(code)
        hint = entry.hint.format(**params) if entry.hint else ""
        return Problem(
            code=code, message=entry.message.format(**params), file=file, field=field, line=line, hint=hint or None
        )

    @property
    def exit_code(self) -> int:
        entry = CATALOGUE.get(self.code)
        return entry.exit_code if entry else USER_ERROR

    def render(self) -> str:
        """One line: ``file:line: field: CODE: message (hint)``."""
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "")
        elif self.line:
            where = f"line {self.line}"
        parts = [p for p in (where, self.field and f"field '{self.field}'") if p]
        prefix = ": ".join(parts)
        text = f"{self.code}: {self.message}"
        if self.hint:
            text += f" (hint: {self.hint})"
        return f"{prefix}: {text}" if prefix else text

    def located(self, file: str | None = None, field: str | None = None, line: int | None = None) -> Problem:
        """The same problem with missing location parts filled in."""
        return self.model_copy(
            update={"file": self.file or file, "field": self.field or field, "line": self.line or line}
        )


class UserError(Exception):
    """Raised for anything the user can fix; carries one or more problems."""

    def __init__(self, problems: Problem | Iterable[Problem]):
        self.problems: list[Problem] = [problems] if isinstance(problems, Problem) else list(problems)
        if not self.problems:
            raise ValueError("UserError needs at least one problem")
        super().__init__("\n".join(p.render() for p in self.problems))

    @staticmethod
    def of(code: str, /, **where_and_params: Any) -> UserError:
        """A UserError with the one problem ``code`` names (see :meth:`Problem.of`)."""
        return UserError(Problem.of(code, **where_and_params))

    @property
    def codes(self) -> list[str]:
        return [p.code for p in self.problems]

    @property
    def exit_code(self) -> int:
        """What the CLI and a job exit with: the highest of the problems' registered exit codes."""
        return max(p.exit_code for p in self.problems)


class ProblemCollector:
    """Gathers problems from independent checks so the user sees all of them at once."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, problem: Problem) -> None:
        self.problems.append(problem)

    def extend(self, problems: Iterable[Problem]) -> None:
        self.problems.extend(problems)

    def capture(self, error: UserError) -> None:
        self.problems.extend(error.problems)

    def raise_if_any(self) -> None:
        if self.problems:
            raise UserError(self.problems)
