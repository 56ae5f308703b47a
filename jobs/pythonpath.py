"""Which copy of pyspark a Python driver that ``spark-submit`` started imports.

``spark-submit`` puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip in front of a Python driver's
``sys.path``. Python compiles a zip's modules from their source at every start, as it cannot write their
compiled form next to them: about a second of a core for each driver this runner launches. Where
``SPARK_HOME`` is the pyspark package installed in this Python's environment (``pip install pyspark``: local
runs), the same modules are installed as files too, compiled once; :func:`installed_pyspark_first` has the
driver import those. Elsewhere (EMR, where pyspark is Spark's own zip) the path is left as it is.
"""

from __future__ import annotations

import sys
from pathlib import Path


def installed_pyspark_first(path: list[str] | None = None) -> list[str]:
    """Move ``path``'s (``sys.path``'s) zips of pyspark and py4j behind the rest when they are those of the
    pyspark installed in a folder already on it, whose copies of both packages are then imported instead.
    Returns the zips moved. Call before anything imports pyspark."""
    path = sys.path if path is None else path
    on_path = {Path(entry).resolve() for entry in path if entry and not entry.endswith(".zip")}
    moved = []
    for entry in path:
        zipped = Path(entry)
        lib = zipped.parent  # <packages>/pyspark/python/lib
        if zipped.suffix != ".zip" or lib.parts[-3:] != ("pyspark", "python", "lib"):
            continue
        packages = lib.parents[2]
        package = "pyspark" if zipped.name == "pyspark.zip" else "py4j" if zipped.name.startswith("py4j-") else None
        if package and packages.resolve() in on_path and (packages / package / "__init__.py").is_file():
            moved.append(entry)
    for entry in moved:
        path.remove(entry)
        path.append(entry)
    return moved
