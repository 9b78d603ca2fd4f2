"""The import rules of docs/architecture.md, checked against the source.

The doc's room table (`| room | where | what | may import |`) names each room, the modules or
packages it holds, and the rooms it may import. `findings` reads every module of the rooms'
packages with `ast`, resolves every import to the project module it names, and reports, each
keyed for the test and told in lines that name files and lines:

- an import circle: modules that reach each other (a strongly connected component of more than
  one module), unless each of them justifies it in its docstring with a paragraph that starts
  `Import circle:` and names every other module of the circle;
- an arrow from one room to another that the table does not allow;
- a module that lies in no room, and a path of the table where no module is (the doc is then
  untrue).
"""

from __future__ import annotations

import ast
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

TABLE_HEADER = ("room", "where", "what", "may import")


@dataclass(frozen=True)
class Room:
    name: str
    paths: tuple[str, ...]  # as the table writes them, relative to the repository
    modules: tuple[str, ...]  # their dotted names: a module, or a package and all in it
    may_import: frozenset[str]


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    path: Path
    line: int
    text: str


def dotted_name(repo: Path, relative: Path) -> str:
    """The name Python imports a path as: from the first directory that is a package (a module
    at the top is its own name). `components/config.py` and `components/config/` are both
    `components.config`, so a room keeps its name when a module becomes a package."""
    parts = list(relative.parts)
    parts[-1] = parts[-1].removesuffix(".py")
    for i in range(len(parts) - 1):
        if (repo.joinpath(*parts[: i + 1]) / "__init__.py").is_file():
            return ".".join(parts[i:])
    return parts[-1]


def source_root(repo: Path, relative: Path) -> Path:
    """The top package a room's path lies in (or the module itself, at the top)."""
    for i in range(len(relative.parts) - 1):
        top = repo.joinpath(*relative.parts[: i + 1])
        if (top / "__init__.py").is_file():
            return top
    return repo / relative


def read_rooms(repo: Path, doc: Path) -> list[Room]:
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in doc.read_text().splitlines()
        if line.lstrip().startswith("|")
    ]
    header = [i for i, row in enumerate(rows) if tuple(c.lower() for c in row) == TABLE_HEADER]
    assert header, f"{doc}: no table with the columns {' | '.join(TABLE_HEADER)}"
    rooms = []
    for name, where, _, may_import in rows[header[0] + 2 :]:
        paths = tuple(re.findall(r"`([^`]+)`", where))
        allowed = {r.strip() for r in may_import.split(",")} - {"", "nothing"}
        modules = tuple(dotted_name(repo, Path(p)) for p in paths)
        rooms.append(Room(name, paths, modules, frozenset(allowed)))
    return rooms


def read_modules(repo: Path, rooms: list[Room]) -> dict[str, Module]:
    """Every module of the packages the rooms lie in (links are not followed)."""
    roots = {source_root(repo, Path(path)) for room in rooms for path in room.paths}
    files = set()
    for root in roots:
        if root.suffix == ".py":
            files.add(root)
        for folder, _, names in os.walk(root):
            files.update(Path(folder) / n for n in names if n.endswith(".py"))
    modules = {}
    for path in sorted(files):
        relative = path.relative_to(repo)
        is_package = path.name == "__init__.py"
        name = dotted_name(repo, relative.parent if is_package else relative)
        modules[name] = Module(name, relative, is_package)
    return modules


def read_imports(repo: Path, module: Module, modules: dict[str, Module]) -> list[Import]:
    """Each import of `module` that names a project module, wherever it stands: at module level,
    inside a function (a lazy import still ties the two modules), or under
    `if TYPE_CHECKING:`. Type-only imports count too: a module whose annotations name another
    cannot be read or changed without it, and the circle they close breaks as soon as a name is
    needed at run time (pydantic, `get_type_hints`). An import of `a.b` ties the importer to
    `a.b` alone, not to the `a/__init__.py` Python runs on the way."""
    source = (repo / module.path).read_text()
    lines = source.splitlines()
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from a import b` imports the module a.b where there is one, else a name of a.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        for target in dict.fromkeys(targets):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module.name:
                text = " ".join(" ".join(lines[node.lineno - 1 : node.end_lineno]).split())
                text = text.replace("( ", "(").replace(", )", ")")
                found.append(Import(module.name, target, module.path, node.lineno, text))
    return found


def circles(imports: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, without
    recursion)."""
    graph = defaultdict(set)
    for i in imports:
        graph[i.importer].add(i.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            step = next(successors, None)
            if step is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while not component or component[-1] != node:
                        component.append(stack.pop())
                        on_stack.discard(component[-1])
                    if len(component) > 1:
                        found.append(sorted(component))
            elif step not in index:
                index[step] = low[step] = len(index)
                stack.append(step)
                on_stack.add(step)
                work.append((step, iter(sorted(graph[step]))))
            elif step in on_stack:
                low[node] = min(low[node], index[step])
    return sorted(found)


def justifies(docstring: str | None, others: list[str]) -> bool:
    """Whether a docstring has an `Import circle:` paragraph naming every other module."""
    paragraph = re.search(r"^Import circle:.*?(?:\n\s*\n|\Z)", docstring or "", re.M | re.S)
    return bool(paragraph) and all(other in paragraph.group() for other in others)


def room_of(module: str, rooms: list[Room]) -> Room | None:
    """The room with the longest name that holds the module."""
    holding = [
        (len(name), room)
        for room in rooms
        for name in room.modules
        if module == name or module.startswith(name + ".")
    ]
    return max(holding, key=lambda held: held[0])[1] if holding else None


def findings(repo: Path, doc: Path) -> dict[str, str]:
    """What breaks the rules, as {key: lines that name the files and lines}."""
    rooms = read_rooms(repo, doc)
    modules = read_modules(repo, rooms)
    imports = [i for m in modules.values() for i in read_imports(repo, m, modules)]
    found = {}
    names = {room.name for room in rooms}
    for room in rooms:
        if unknown := sorted(room.may_import - names):
            found[f"unknown room: {', '.join(unknown)}"] = (
                f"{doc.name}: room {room.name} may import {', '.join(unknown)}, not rooms"
            )
        for path, name in zip(room.paths, room.modules, strict=True):
            if not any(m == name or m.startswith(name + ".") for m in modules):
                found[f"no module: {path}"] = f"{doc.name}: room {room.name}: no module at {path}"
    for module in modules.values():
        if room_of(module.name, rooms) is None:
            found[f"no room: {module.name}"] = f"{module.path}: in no room of {doc.name}"
    for circle in circles(imports):
        docstrings = {
            m: ast.get_docstring(ast.parse((repo / modules[m].path).read_text())) for m in circle
        }
        if all(justifies(docstrings[m], [o for o in circle if o != m]) for m in circle):
            continue
        lines = [
            f"  {i.path}:{i.line}: {i.text}"
            for i in sorted(imports, key=lambda i: (i.path, i.line))
            if i.importer in circle and i.imported in circle
        ]
        found[f"circle: {' '.join(circle)}"] = "\n".join(
            [f"import circle {' <-> '.join(circle)}:", *lines]
        )
    arrows = defaultdict(list)
    for i in imports:
        source, target = room_of(i.importer, rooms), room_of(i.imported, rooms)
        if source and target and source is not target and target.name not in source.may_import:
            arrows[f"arrow: {i.importer} -> {i.imported}"].append(
                f"{i.path}:{i.line}: room {source.name} imports room {target.name}, which "
                f"{doc.name} does not allow: {i.text}"
            )
    found.update((key, "\n".join(lines)) for key, lines in arrows.items())
    return found
