"""The query author's project folder: manifests, the template and table DDL.

    manifests/job-template.yaml   defaults (optional)
    manifests/*.yaml              one manifest per query
    manifests/tables/*.sql        table DDL; every file is loaded

Commands find the project from the current directory upwards (or ``--project DIR``).
Relative filesystem paths in DDL are resolved against the project root, so the same
project works from any working directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from runner.authoring.ddl import parse_ddl_file
from runner.authoring.manifest_file import load_manifest, load_template
from runner.core import connectors
from runner.core.catalog import Catalog
from runner.core.errors import Problem, ProblemCollector, UserError
from runner.core.manifest import Manifest
from runner.core.tables import TableDef

TEMPLATE_FILE = "job-template.yaml"


@dataclass(frozen=True)
class Project:
    root: Path
    template: dict = field(default_factory=dict)
    catalog: Catalog = field(default_factory=Catalog)

    @property
    def manifests_dir(self) -> Path:
        return self.root / "manifests"

    def display(self, path: Path) -> str:
        """Path as shown to users: relative to the project root when inside it."""
        try:
            return str(path.resolve().relative_to(self.root))
        except ValueError:
            return str(path)

    def manifest_paths(self) -> list[Path]:
        return sorted(
            p for p in self.manifests_dir.glob("*.y*ml") if p.name != TEMPLATE_FILE and p.suffix in (".yaml", ".yml")
        )

    def ddl_paths(self) -> list[Path]:
        return sorted((self.manifests_dir / "tables").glob("*.sql"))

    def load_manifest(self, path: Path) -> Manifest:
        return load_manifest(path, self.template, display=self.display(path))


def project_of(manifest: Path) -> Path | None:
    """The project a manifest belongs to: the folder above its ``manifests/`` folder."""
    for parent in manifest.resolve().parents:
        if parent.name == "manifests":
            return parent.parent
    return None


def find_root(start: Path | None = None) -> Path:
    """The nearest folder at or above ``start`` that holds ``manifests/``."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "manifests").is_dir():
            return candidate
    raise UserError.of(
        "PROJECT_NOT_FOUND",
        reason=f"no manifests/ folder in {here} or any parent",
        hint="run from a project root or pass --project DIR",
    )


def load_project(root: Path | None = None, *, extra_ddl: list[Path] | None = None) -> Project:
    """Template and every DDL file of the project; all problems are reported together."""
    if root is None:
        root = find_root()
    root = root.resolve()
    if not (root / "manifests").is_dir():
        raise UserError.of(
            "PROJECT_NOT_FOUND",
            reason=f"{root} has no manifests/ folder",
            hint="pass --project DIR pointing at the folder that holds manifests/",
        )
    project = Project(root=root)
    collector = ProblemCollector()
    template: dict = {}
    try:
        template = load_template(project.manifests_dir / TEMPLATE_FILE, display=f"manifests/{TEMPLATE_FILE}")
    except UserError as error:
        collector.capture(error)
    ddl_files = project.ddl_paths() + [
        p for p in (extra_ddl or []) if p.resolve() not in {d.resolve() for d in project.ddl_paths()}
    ]
    tables: list[TableDef] = []
    for path in ddl_files:
        try:
            tables.extend(parse_ddl_file(path, display=project.display(path)))
        except UserError as error:
            collector.capture(error)
    seen: dict[tuple[str, ...], TableDef] = {}
    for table in tables:
        if table.key in seen:
            first = seen[table.key]
            collector.add(
                Problem.of(
                    "DDL_DUPLICATE_TABLE",
                    file=table.file,
                    line=table.line,
                    table=table.name,
                    first=f"{first.file}:{first.line}",
                )
            )
        seen[table.key] = table
    collector.raise_if_any()
    resolved = tuple(_resolve_paths(t, root) for t in tables)
    return replace(project, template=template, catalog=Catalog(resolved))


def _resolve_paths(table: TableDef, root: Path) -> TableDef:
    """A relative folder of a table's files is the project's: made absolute against its root."""
    key = connectors.named(table.connector).path_option
    if key is None:
        return table
    path = table.options.get(key)
    if path is None or "://" in path or path.startswith("${") or os.path.isabs(path):
        return table
    return table.model_copy(update={"options": {**table.options, key: str((root / path).resolve())}})
