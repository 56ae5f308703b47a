"""What a command works with: the project, the state store, the target, and a deployer over them."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.authoring.project import Project, find_root, load_project
from runner.core import layout
from runner.core.errors import UserError
from runner.core.placeholders import Sources
from runner.core.protocol.session_config import Application
from runner.deploy.deployer import Deployer, Settings
from runner.state.desired import copy_desired
from runner.state.store import Store, open_store
from runner.targets import Target, open_target
from runner.targets.modes import Targets
from runner.targets.session import SessionTarget

# The shared options (runner/cli/options.py) a Context is built from.
OPTIONS = (
    "project",
    "state",
    "manifests_bucket",
    "checkpoints_bucket",
    "savepoints_bucket",
    "target",
    "master",
    "master_web_ui",
    "resource_manager",
    "team",
    "stop_timeout",
    "spark_submit",
    "from_store",
    "parameters_prefix",
    "aws_region",
)


class Context:
    """Everything one command needs: the project, the store and the target."""

    def __init__(
        self,
        *,
        project: Path | None = None,
        state: Path | None = None,
        manifests_bucket: str | None = None,
        checkpoints_bucket: str | None = None,
        savepoints_bucket: str | None = None,
        target: str = "local",
        master: str | None = None,
        master_web_ui: str | None = None,
        resource_manager: str | None = None,
        team: str = "local",
        stop_timeout: float = 90.0,
        spark_submit: str | None = None,
        from_store: bool = False,
        parameters_prefix: str | None = None,
        aws_region: str | None = None,
        need_project: bool = True,
    ):
        # with --from-store the manifests come from the bucket: no project folder is needed (EMR steps have none)
        self.state_root = _state_root(project, state, need_project=need_project and not from_store)
        self.store: Store = open_store(
            self.state_root,
            manifests_bucket=manifests_bucket,
            checkpoints_bucket=checkpoints_bucket,
            savepoints_bucket=savepoints_bucket,
        )
        self.team = team
        # Where application-mode jobs run (and the session application itself), as the session is told.
        self.application_settings = Application(
            kind=target,
            master=master,
            master_web_ui=master_web_ui,
            resource_manager=resource_manager,
            log_dir=str(self.state_root / "logs"),
        )
        self.target: Target = open_target(
            target,
            records=self.store.manifests,
            log_dir=self.state_root / "logs",
            master=master,
            master_web_ui=master_web_ui,
            resource_manager=resource_manager,
        )
        self.sessions = SessionTarget(self.store.manifests, self.target, team)
        self.targets = Targets(self.target, self.sessions)
        self.stop_timeout = stop_timeout
        self.spark_submit = spark_submit
        self.project_dir = project
        self.from_store = from_store
        self.placeholders = Sources(parameters_prefix=parameters_prefix, region=aws_region)
        self.pinned: tuple[str, str] | None = None  # (key, S3 version id) of one manifest to deploy exactly
        self._project: Project | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None

    @property
    def project(self) -> Project:
        """The desired manifests and tables: the project folder, or with --from-store the bucket's copy."""
        if self._project is None:
            if self.from_store:
                self._tmp = tempfile.TemporaryDirectory(prefix="sql-runner-manifests-")
                root = Path(self._tmp.name)
                copy_desired(self.store.manifests, root, self.pinned)
                self._project = load_project(root)
            else:
                self._project = load_project(self.project_dir)
        return self._project

    @property
    def desired_root(self) -> Path:
        """Where paths given on the command line are resolved (the bucket's copy with --from-store)."""
        return self.project.root if self.from_store else Path.cwd()

    def deployer(
        self,
        target: Target | None = None,
        once: bool = False,
        *,
        with_project: bool = True,
        lease_wait: float = 0.0,
        project: Project | None = None,
        spark: Callable[[], Any] | None = None,
        requested_by: str | None = None,
        judge_in_jobs: bool = False,
        command: str = "deploy",
    ) -> Deployer:
        """A deployer whose application-mode jobs go to ``target`` (default: the chosen target), over
        ``project`` (default: the command's own, if ``with_project``), analysing on ``spark`` (default: a
        local Spark of its own, when it needs one); ``requested_by``: recorded with each decision;
        ``judge_in_jobs``: a new or changed manifest is judged by its own job, launched at once, where its
        target allows (``runner/deploy/launches.py``), not on a Spark started here."""
        settings = Settings(
            self.store,
            Targets(target or self.target, self.sessions),
            self.team,
            dict(os.environ),
            self.stop_timeout,
            spark_submit=self.spark_submit,
            once=once,
            placeholders=self.placeholders,
        )
        desired = project or (self.project if with_project else None)
        return Deployer(
            desired,
            settings,
            lease_wait=lease_wait,
            spark=spark,
            requested_by=requested_by,
            judge_in_jobs=judge_in_jobs,
            command=command,
        )


def _state_root(project: Path | None, state: Path | None, *, need_project: bool) -> Path:
    """``--state``, else ``.sql-runner/`` in the project (without a project, here, where allowed)."""
    if state is not None:
        return state.resolve()
    if project is not None:
        return layout.state_dir(project.resolve())
    try:
        return layout.state_dir(find_root())
    except UserError:
        if need_project:
            raise
        return layout.state_dir(Path.cwd())
