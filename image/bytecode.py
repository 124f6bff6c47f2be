"""Compile the bytecode of every module the installed migslice imports, and of nothing else.

Run in the image's build stage with the target environment's interpreter:
``/opt/migslice/bin/python image/bytecode.py migslice``.

The image's root filesystem is read-only at run time, so Python cannot cache bytecode then, and
every process start would compile some 900 modules again (seconds). Compiling every installed
file instead costs tens of MB for modules nothing loads (most of the kubernetes client's
generated models). So: import each module of the distribution (``__main__`` modules excepted;
an import that fails fails the build), then write a ``.pyc`` for every module that came from
this environment. The ``.pyc`` files are unchecked-hash ones: valid whatever modification times
copying between image layers leaves on the sources.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import pkgutil
import py_compile
import sys
from pathlib import Path


def top_level_packages(distribution: str) -> list[str]:
    """The import packages a distribution installs (its files' first path parts)."""
    files = importlib.metadata.distribution(distribution).files or []
    return sorted(
        {
            f.parts[0]
            for f in files
            if len(f.parts) > 1 and f.name == "__init__.py" and ".dist-info" not in f.parts[0]
        }
    )


def import_all(packages: list[str]) -> int:
    count = 0
    for name in packages:
        package = importlib.import_module(name)
        count += 1
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if module.name.rsplit(".", 1)[-1] != "__main__":
                importlib.import_module(module.name)
                count += 1
    return count


def compile_loaded(prefix: Path) -> int:
    count = 0
    for module in list(sys.modules.values()):
        source = getattr(module, "__file__", None)
        if not source or not source.endswith(".py"):
            continue
        path = Path(source).resolve()
        if not path.is_relative_to(prefix):
            continue
        py_compile.compile(
            str(path),
            cfile=importlib.util.cache_from_source(str(path)),
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        count += 1
    return count


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: bytecode.py DISTRIBUTION", file=sys.stderr)
        return 2
    sys.dont_write_bytecode = True  # no timestamp .pyc files from the imports themselves
    packages = top_level_packages(argv[1])
    imported = import_all(packages)
    compiled = compile_loaded(Path(sys.prefix).resolve())
    print(
        f"bytecode: imported {imported} modules of {', '.join(packages)}; "
        f"compiled {compiled} modules under {sys.prefix}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
