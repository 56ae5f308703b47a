"""The docs cannot drift from what they describe: every `make` target they name is in the Makefile,
every `sql-runner` command and option they show exists (an option shown with a command exists on that
command), every `SQL_RUNNER_*` variable they name is read by an option, and every error code they name
is registered. Read: README.md, docs/*.md, bench/README.md and infra/README.md (inline code spans and
the lines of code blocks)."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from runner.cli.main import cli
from runner.core.error_catalogue import CATALOGUE
from runner.core.reasons import REASONS

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
DOCS.append(ROOT / "infra" / "README.md")
# Options of other programs the docs show next to ours: the program, where its options are defined.
OTHER_PROGRAMS = ("spark-submit", "mvn", "python", ".venv/bin/python", "make", "aws", "terraform", "pytest")
OTHER_OPTIONS = {
    "--events": "bench/kafka.py",
    "--rounds": "bench/kafka.py",
    "--forks": "bench/kafka.py",
    "--keys": "bench/changelog.py",
    "--changes": "bench/changelog.py",
}
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def read_docs() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in DOCS)


def commands(group: click.Group = cli, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], set[str]]:
    """Every command path of the CLI with the options it takes."""
    found: dict[tuple[str, ...], set[str]] = {}
    for name, command in group.commands.items():
        here = (*path, name)
        found[here] = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts) if opt.startswith("--")}
        if isinstance(command, click.Group):
            found.update(commands(command, here))
    return found


def environment_variables() -> set[str]:
    found: set[str] = set()
    for_each: list[click.Command] = [cli]
    while for_each:
        command = for_each.pop()
        if isinstance(command, click.Group):
            for_each.extend(command.commands.values())
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            found.update([envvar] if isinstance(envvar, str) else envvar or [])
    return found


def spans(text: str) -> list[str]:
    """Inline code spans and the lines of fenced code blocks."""
    found: list[str] = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        found.extend(line.strip() for line in block.splitlines() if line.strip())
    without_blocks = re.sub(r"```[a-z]*\n.*?```", "", text, flags=re.S)
    found.extend(re.findall(r"`([^`\n]+)`", without_blocks))
    return found


def shown_commands(text: str) -> list[tuple[tuple[str, ...], set[str], str]]:
    """(command path, options shown with it, the span) for each span that shows a sql-runner command: one
    that starts with ``sql-runner`` (or ``.venv/bin/sql-runner``), or with a command's own name."""
    known = commands()
    shown = []
    for span in spans(text):
        words = span.replace("\\|", "|").split()
        if words and words[0] in ("sql-runner", ".venv/bin/sql-runner"):
            words = words[1:]
            if not words:
                continue  # the program's name alone
        elif not words or (words[0],) not in known or not OPTION.search(span):
            continue
        path: tuple[str, ...] = ()
        for word in words:
            if (*path, word) in known:
                path = (*path, word)
            else:
                break
        shown.append((path, set(OPTION.findall(span)), span))
    return shown


def test_every_make_target_the_docs_name_is_in_the_makefile():
    text = read_docs()
    defined = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE))
    named = set(re.findall(r"`make ([a-z][a-z-]*)", text)) | set(re.findall(r"^make ([a-z][a-z-]*)", text, re.M))
    assert {"run", "test", "jars", "kafka", "bench", "package", "synth", "deploy-infra"} <= named
    assert named <= defined, f"named in the docs but not in the Makefile: {sorted(named - defined)}"


def test_every_command_the_docs_show_exists_with_the_options_shown():
    text = read_docs()
    shown = shown_commands(text)
    paths = {path for path, _, _ in shown}
    assert {("validate",), ("plan",), ("deploy",), ("session", "start"), ("preview",)} <= paths, sorted(paths)
    known = commands()
    wrong = []
    for path, options, span in shown:
        if not path:
            wrong.append(f"`{span}`: no such command")
            continue
        missing = options - known[path]
        if missing:
            wrong.append(f"`{span}`: sql-runner {' '.join(path)} has no {', '.join(sorted(missing))}")
    assert not wrong, "\n".join(wrong)


def test_every_option_the_docs_name_alone_is_an_option_of_some_command():
    known = set().union(*commands().values())
    wrong = []
    for span in spans(read_docs()):
        if not span.startswith("--"):
            continue  # commands are checked above; other programs' command lines are theirs
        for option in OPTION.findall(span):
            home = OTHER_OPTIONS.get(option)
            if home is not None:
                assert f'"{option}"' in (ROOT / home).read_text(), f"{option} is not an option of {home}"
            elif option not in known:
                wrong.append(f"`{span}`: no sql-runner command has {option}")
    assert not wrong, "\n".join(wrong)


def test_every_sql_runner_variable_the_docs_name_is_read_by_an_option():
    named = set(re.findall(r"\bSQL_RUNNER_[A-Z_]+\b", read_docs()))
    # read by make, tests, bench
    not_options = {"SQL_RUNNER_JARS", "SQL_RUNNER_KILL_SEED", "SQL_RUNNER_KILLS", "SQL_RUNNER_TEST_RUN"}
    unread = named - environment_variables() - not_options
    assert not unread, f"named in the docs, read by no option: {sorted(unread)}"


def test_the_options_said_to_come_from_the_environment_do():
    cli_doc = (ROOT / "docs" / "cli.md").read_text()
    said = re.search(
        r"The deployment commands take (.*?) \(also as\s+`SQL_RUNNER_\*` environment variables\)", cli_doc, re.S
    )
    assert said is not None, "docs/cli.md says which options also come from the environment"
    deploy = {p.opts[-1]: p for p in cli.commands["deploy"].params}
    for option in OPTION.findall(said.group(1)):
        assert deploy[option].envvar, f"{option} is said to come from a SQL_RUNNER_* variable, and does not"


@pytest.mark.parametrize("removed", ["--json", "--no-savepoint"])
def test_a_documented_option_that_no_command_has_any_longer_is_caught(removed: str, monkeypatch):
    """The check above fails when an option the docs show is taken out of the CLI."""
    for command in (cli.commands["status"], cli.commands["stop"], cli.commands["plan"], cli.commands["history"]):
        monkeypatch.setattr(command, "params", [p for p in command.params if removed not in p.opts])
    with pytest.raises(AssertionError, match=f"has no {removed}"):
        test_every_command_the_docs_show_exists_with_the_options_shown()


# Upper-case words in backticks that are not error codes: environment variables, types, Kafka's protocols,
# option values.
NOT_CODES = (
    "AWS_",
    "SQL_RUNNER_",
    "KAFKA_BOOTSTRAP",
    "MSK_",
    "SPARK_",
    "PYSPARK_",
    "TF_",  # Terraform's environment
    "SSL_CERT_FILE",  # where Go (Terraform) reads its trusted certificates
    "HADOOP_",
    "TIMESTAMP_",
    "SASL_",
    "EXCEPT_KEY",
    "TERMINATED_WITH_ERRORS",  # an EMR cluster's state
)


def test_every_error_and_reason_code_the_docs_name_is_registered():
    spelt = set(re.findall(r"`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`", read_docs()))
    named = {word for word in spelt if not word.startswith(NOT_CODES)}
    assert {"KAFKA_CONNECTOR_MISSING", "KAFKA_PROTOCOL_MISMATCH", "S3_CONNECTOR_MISSING"} <= named
    registered = set(CATALOGUE) | set(REASONS)  # error codes, and the reason codes `plan --json` gives
    assert named <= registered, f"named in the docs, registered nowhere: {sorted(named - registered)}"
