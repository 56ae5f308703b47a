"""``make synth``: one Terraform JSON stack per team (and its topics stack), offline.

    python -m infra.main [--teams infra/teams.yaml] [--out cdktf.out] [--team NAME]

Writes ``<out>/stacks/team-<name>/cdk.tf.json`` and ``<out>/stacks/team-<name>-topics/cdk.tf.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from infra.teams import TEAMS_FILE, TeamsError, load_teams

ROOT = Path(__file__).resolve().parents[1]


def synth(teams_file: Path, out: Path, only: str | None = None) -> list[str]:
    """Synthesise the stacks; returns their names."""
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
    config = load_teams(teams_file)
    teams = [config.team(only)] if only else config.teams
    from cdktf import App

    from infra.stack import TeamStack, TopicsStack

    app = App(outdir=str(out))
    names = []
    for team in teams:
        names.append(TeamStack(app, config.platform, team).node.id)
        names.append(TopicsStack(app, config.platform, team).node.id)
    app.synth()
    return names


def summary(teams_file: Path = TEAMS_FILE) -> str:
    """What each team runs, as a Markdown table (docs/aws.md shows it)."""
    config = load_teams(teams_file)
    lines = [
        "| team | region | EMR primary | EMR core (scales to) | MSK brokers | topics | budget/month |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for t in config.teams:
        lines.append(
            f"| {t.name} | {t.region} | {t.emr.master.count} x {t.emr.master.instance_type} | "
            f"{t.emr.core.count} x {t.emr.core.instance_type} ({t.emr.max_core_instances}) | "
            f"{t.msk.brokers} x {t.msk.broker_instance_type}, {t.msk.ebs_gib} GiB | "
            f"{', '.join(f'{x.name} ({x.partitions}p)' for x in t.topics)} | "
            f"USD {t.budget_usd_per_month} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.main", description=__doc__.splitlines()[0])
    parser.add_argument("--teams", type=Path, default=TEAMS_FILE)
    parser.add_argument("--out", type=Path, default=ROOT / "cdktf.out")
    parser.add_argument("--team", default=None, help="only this team's stacks")
    parser.add_argument("--summary", action="store_true", help="print what each team runs, synthesise nothing")
    args = parser.parse_args(argv)
    try:
        if args.summary:
            print(summary(args.teams))
            return 0
        names = synth(args.teams, args.out, args.team)
    except TeamsError as error:
        print(error, file=sys.stderr)
        return 2
    for name in names:
        print(f"synthesised {args.out / 'stacks' / name / 'cdk.tf.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
