"""Reasons as codes: every code the runner gives is registered once, every registered code is given
somewhere, every template renders with the parameters given, and a reason survives the trip through
``plan --json`` and the history (including the plain text an earlier release recorded)."""

from __future__ import annotations

import ast
import string
from pathlib import Path

import pytest

from runner.core.protocol.history import HistoryEntry
from runner.core.reasons import REASONS, Reason, UnregisteredReason

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for package in ("runner", "jobs") for p in (ROOT / package).rglob("*.py"))


def _codes(node: ast.AST) -> list[str]:
    """The code literals a ``Reason.of`` first argument can be (both branches of a conditional)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _codes(node.body) + _codes(node.orelse)
    return []


def _given() -> dict[str, list[tuple[str, frozenset[str]]]]:
    """code -> (where, parameter names) for every ``Reason.of`` call in runner/ and jobs/."""
    given: dict[str, list[tuple[str, frozenset[str]]]] = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "Reason.of" and node.args:
                codes = _codes(node.args[0])
                assert codes, f"{path.relative_to(ROOT)}:{node.lineno}: Reason.of needs a literal code"
                params = frozenset(k.arg for k in node.keywords if k.arg)
                for code in codes:
                    given.setdefault(code, []).append((f"{path.relative_to(ROOT)}:{node.lineno}", params))
    return given


def test_every_code_given_is_registered_and_every_registered_code_is_given():
    given = _given()
    unregistered = {code: [where for where, _ in places] for code, places in given.items() if code not in REASONS}
    assert not unregistered, f"given but not in REASONS: {unregistered}"
    unused = sorted(set(REASONS) - set(given) - {"RECORDED_TEXT"})  # RECORDED_TEXT: read from old history only
    assert not unused, f"registered but given nowhere: {unused}"


def test_every_template_names_exactly_the_parameters_it_is_given():
    given = _given()
    for code, template in REASONS.items():
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name}
        for where, params in given.get(code, []):
            assert params == fields, f"{where}: {code} is given {sorted(params)}, its template uses {sorted(fields)}"


def test_an_unregistered_code_is_refused_at_once():
    with pytest.raises(UnregisteredReason):
        Reason.of("NO_SUCH_REASON")


def test_a_reason_is_rendered_once_and_carried_as_code_and_parameters():
    reason = Reason.of("CONFIG_CHANGED", fields=["description", "mode"])
    assert reason.render() == "configuration changed: description, mode"
    carried = reason.model_dump(mode="json", by_alias=True)
    assert carried == {"code": "CONFIG_CHANGED", "params": {"fields": ["description", "mode"]}, "text": reason.render()}
    assert Reason.model_validate(carried) == reason


def test_history_written_before_reasons_had_codes_still_reads_as_the_text_it_recorded():
    old = '{"name": "q", "at": "2026-11-20T10:00:00+00:00", "decision": "start", "reasons": ["new job: nothing"]}'
    (reason,) = HistoryEntry.decode(old).reasons
    assert (reason.code, reason.render()) == ("RECORDED_TEXT", "new job: nothing")
    later = '{"code": "A_LATER_CODE", "params": {"x": 1}, "text": "said by a later release"}'
    entry = HistoryEntry.decode('{"name": "q", "at": "t", "decision": "start", "reasons": [' + later + "]}")
    assert entry.reasons[0].render() == "said by a later release"
