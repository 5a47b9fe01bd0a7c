"""Each dvc.yaml stage's code and configuration `deps`, generated from the import graph of the
stage's Kedro pipeline, so a change to any module a stage runs makes DVC re-run it.

    python scripts/dvc_deps.py write   # rewrite every stage's generated deps in dvc.yaml
    python scripts/dvc_deps.py check   # fail, naming what is missing or stale, when they differ

A stage's code is the modules of its pipeline's node functions and every `rlvr_factory` module
they import, transitively (lazy imports inside functions too; each package's `__init__.py`,
which importing runs), plus files a module loads by path (`Path(__file__).with_name(...)`) and
the packages one imports by a computed name (`DYNAMIC`). Every stage also runs the project's
configuration loader and pipeline registry, reads the data catalog (and loads the project's own
dataset classes it names) and is installed from the lock. A directory is listed when every module under it is needed, else each module alone.
The data `deps` (`data/...`), params and outs are written by hand and left as they are.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PACKAGE = "rlvr_factory"
DVC_YAML = ROOT / "dvc.yaml"
COMMAND = "python scripts/dvc_deps.py write"
# What every stage runs or reads besides its nodes' code: how configuration is read, how the
# pipelines are shaped and run (`kedro run`'s runner, the round loop), the data catalog, and the locked environment.
EVERY_STAGE = ["src/rlvr_factory/config_loader.py", "src/rlvr_factory/pipeline_registry.py",
               "src/rlvr_factory/cli.py", "src/rlvr_factory/pipelines/rl/loop.py",
               "conf/base/catalog.yml", "requirements.lock"]
# Modules that import others by a computed name, and what they can import that way.
DYNAMIC = {"rlvr_factory.domains.registry": ["rlvr_factory.domains"]}  # `domain.name` -> rlvr_factory.domains.<name>
CATALOG = ROOT / "conf/base/catalog.yml"
_GENERATED = re.compile(r"^\s+- (src/|conf/|requirements\.lock)")


def module_file(module: str) -> Path | None:
    """The source file of an `rlvr_factory` module or package, if it exists."""
    base = SRC.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The `rlvr_factory` modules a file imports (anywhere in it) and the files it loads by path."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import submodule`
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "with_name"
              and node.args and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).endswith(".py")):
            found.add(f"{package}.{node.args[0].value.removesuffix('.py')}")
    for dynamic in DYNAMIC.get(here, []):  # a package imported by computed name: any of its modules
        found.update(_module_name(f) for f in _python_files(module_file(dynamic).parent))
    return {m for m in found if m.split(".")[0] == PACKAGE and module_file(m)}


def closure(modules: set[str]) -> set[Path]:
    """Every file the modules run when imported: theirs, their packages' and their imports', transitively."""
    seen: set[Path] = set()
    todo = list(modules)
    while todo:
        module = todo.pop()
        parts = module.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__, a/b/__init__ first
            path = module_file(".".join(parts[:i]))
            if path and path not in seen:
                seen.add(path)
                todo.extend(_imports(path))
    return seen


def _python_files(directory: Path) -> set[Path]:
    return {p for p in directory.rglob("*.py") if "__pycache__" not in p.parts}


def collapse(files: set[Path]) -> list[str]:
    """The files as dvc.yaml paths: a directory where all of its modules are in, else each file."""
    listed: list[str] = []

    def visit(directory: Path) -> None:
        inside = {f for f in files if directory in f.parents}
        if not inside:
            return
        if directory != SRC / PACKAGE and inside == _python_files(directory):
            listed.append(directory.relative_to(ROOT).as_posix())
            return
        listed.extend(f.relative_to(ROOT).as_posix() for f in sorted(inside) if f.parent == directory)
        for sub in sorted(p for p in directory.iterdir() if p.is_dir() and p.name != "__pycache__"):
            visit(sub)

    visit(SRC / PACKAGE)
    return listed


def stage_pipelines() -> dict:
    """The project's pipelines as `kedro run --pipelines=<stage>` builds them."""
    sys.path.insert(0, str(SRC))
    from kedro.framework.startup import bootstrap_project

    bootstrap_project(ROOT)
    from kedro.framework.project import settings
    from rlvr_factory.config_loader import ConfigLoader
    from rlvr_factory.pipeline_registry import register_pipelines

    # the project's base configuration (dvc.yaml's), not whatever a session earlier in this process loaded
    ConfigLoader(str(ROOT / settings.CONF_SOURCE), env=None, **settings.CONFIG_LOADER_ARGS)
    return register_pipelines()


def generated_deps(commands: dict[str, tuple[list[str], str | None]]) -> dict[str, list[str]]:
    """Each stage's code and configuration deps, in dvc.yaml's order, from the pipelines its command
    runs (`commands`: stage -> (pipeline names, `--from-nodes` or None))."""
    pipelines = stage_pipelines()
    dataset_modules = {t.rpartition(".")[0] for t in re.findall(rf"type:\s*({PACKAGE}[\w.]+)", CATALOG.read_text())}
    deps = {}
    for stage, (names, from_nodes) in commands.items():
        nodes = [n for name in names for n in
                 (pipelines[name].from_nodes(*from_nodes.split(",")) if from_nodes else pipelines[name]).nodes]
        modules = {node.func.__module__ for node in nodes} | dataset_modules
        code = collapse(closure(modules) - {SRC / p.removeprefix("src/") for p in EVERY_STAGE})
        deps[stage] = code + [p for p in EVERY_STAGE if p not in code]
    return deps


def _pipelines_of(stage: dict) -> tuple[list[str], str | None]:
    """The pipelines a stage's `kedro run [--env=base] --pipelines=a[,b] [--from-nodes=n]` runs, and its `--from-nodes`."""
    command = stage["cmd"].split("#")[0].strip()
    match = re.fullmatch(r"kedro run (?:--env=base )?--pipelines?=([\w,]+)(?: --from-nodes=([\w,]+))?", command)
    if not match:
        sys.exit(f"dvc.yaml: stage command {stage['cmd']!r} is not `kedro run --env=base --pipelines=<names> "
                 "[--from-nodes=<nodes>]`")
    return match[1].split(","), match[2]


def current(dvc: dict) -> dict[str, list[str]]:
    """Each stage's code and configuration deps as dvc.yaml lists them."""
    return {name: [d for d in stage.get("deps", []) if _GENERATED.match(f"  - {d}")]
            for name, stage in dvc["stages"].items()}


def rewrite(text: str, deps: dict[str, list[str]]) -> str:
    """dvc.yaml with each stage's generated deps replaced, every other line as it was."""
    lines, out, stage, i = text.splitlines(), [], None, 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if m := re.match(r"^  (\w+):\s*$", line):
            stage = m[1]
        elif stage and re.match(r"^    deps:\s*$", line):
            while i < len(lines) and lines[i].startswith("      - "):  # the hand-written data deps stay
                if not _GENERATED.match(lines[i]):
                    out.append(lines[i])
                i += 1
            out.extend(f"      - {d}" for d in deps[stage])
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["write", "check"])
    args = parser.parse_args()
    text = DVC_YAML.read_text()
    dvc = yaml.safe_load(text)
    wanted = generated_deps({name: _pipelines_of(stage) for name, stage in dvc["stages"].items()})
    if args.action == "write":
        DVC_YAML.write_text(rewrite(text, wanted))
        print(f"dvc.yaml: the code and configuration deps of {len(wanted)} stages written")
        return
    have = current(dvc)
    problems = [f"{stage}: missing {sorted(set(wanted[stage]) - set(have[stage]))}, stale {sorted(set(have[stage]) - set(wanted[stage]))}"
                for stage in wanted if set(wanted[stage]) != set(have[stage])]
    if problems:
        sys.exit("dvc.yaml's code deps are not the stages' import graph:\n  " + "\n  ".join(problems) + f"\nFix: {COMMAND}")
    print("dvc.yaml's code and configuration deps are the stages' import graph")


if __name__ == "__main__":
    main()
