"""Errors a user can act on: one line naming the file, the key and what was expected."""

from __future__ import annotations


class InputError(Exception):
    """Bad input. The CLI prints `FILE: KEY: problem (expected)` and exits with `exit_code`."""

    exit_code = 2

    def __init__(self, file: str | None, key: str | None, problem: str, expected: str | None = None):
        self.file = file
        self.key = key
        self.problem = problem
        self.expected = expected
        super().__init__(self.line())

    def line(self) -> str:
        parts = [p for p in (self.file, self.key) if p]
        text = self.problem if not self.expected else f"{self.problem} ({self.expected})"
        return ": ".join(parts + [text])


class NoFeasiblePlan(InputError):
    """The inputs are well formed but no plan can run them; exit 1 with the binding reason."""

    exit_code = 1
