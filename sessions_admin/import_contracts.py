"""An import-linter contract the import graph alone cannot state: store writes go through actions.

``WritesThroughActions`` (``[tool.importlinter]`` in pyproject.toml): no module under
``source_modules`` calls a function of ``sessions_admin.core`` that writes the store; they call
``ledger.actions``, which audits each write. A core function writes when it is decorated with
``store_operation`` or calls one that does (resolved by name over the core's modules: a name
defined in the calling module first). Reads (plans, previews, lookups) stay allowed, which is
why an import contract cannot say it: the same core modules hold both. ``allowed`` names
``module:function`` pairs kept on purpose, each with its reason beside it in pyproject.toml.
"""

from __future__ import annotations

import ast
from pathlib import Path

from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck

PACKAGE = Path(__file__).resolve().parent
CORE = PACKAGE / "core"


def _calls(node: ast.AST) -> set[tuple[str, str]]:
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            if isinstance(n.func, ast.Name):
                found.add(("name", n.func.id))
            elif isinstance(n.func, ast.Attribute):
                found.add(("attr", n.func.attr))
    return found


def core_writes() -> set[str]:
    """The public names of core functions that write the store."""
    defined: dict[tuple[str, str], tuple[bool, set]] = {}
    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                decorated = any("store_operation" in ast.unparse(d) for d in node.decorator_list)
                defined[(str(path), node.name)] = (decorated, _calls(node))
    by_name: dict[str, list[tuple[str, str]]] = {}
    for key in defined:
        by_name.setdefault(key[1], []).append(key)
    writes = {key for key, (decorated, _) in defined.items() if decorated}
    changed = True
    while changed:
        changed = False
        for key, (_, calls) in defined.items():
            if key in writes:
                continue
            for kind, name in calls:
                local = (key[0], name)
                targets = [local] if kind == "name" and local in defined else by_name.get(name, [])
                if any(target in writes for target in targets):
                    writes.add(key)
                    changed = True
                    break
    return {name for _, name in writes if not name.startswith("_")}


def _core_bindings(tree: ast.AST) -> tuple[set[str], dict[str, str]]:
    """Names bound to core modules, and names imported from them (bound -> original)."""
    modules: set[str] = set()
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "sessions_admin":
                modules.update(a.asname or a.name for a in node.names if a.name == "core")
            elif node.module == "sessions_admin.core" or node.module.startswith(
                "sessions_admin.core."
            ):
                base = CORE.joinpath(*node.module.split(".")[2:])
                for alias in node.names:
                    if (base / f"{alias.name}.py").exists() or (base / alias.name).is_dir():
                        modules.add(alias.asname or alias.name)
                    else:
                        names[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.Import):
            modules.update(
                a.asname or a.name for a in node.names if a.name.startswith("sessions_admin.core")
            )
    return modules, names


def write_calls(path: Path, writes: set[str]) -> list[tuple[int, str]]:
    """(line, call) of every core store write ``path`` calls."""
    tree = ast.parse(path.read_text())
    modules, names = _core_bindings(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in modules
            and func.attr in writes
        ) or (isinstance(func, ast.Name) and names.get(func.id) in writes):
            found.append((node.lineno, ast.unparse(func)))
    return found


class WritesThroughActions(Contract):
    source_modules = fields.ListField(subfield=fields.StringField())
    allowed = fields.ListField(subfield=fields.StringField(), required=False)

    def check(self, graph, verbose: bool) -> ContractCheck:
        writes = core_writes()
        allowed = set(self.allowed or [])
        broken = []
        for source in self.source_modules:
            folder = PACKAGE.parent.joinpath(*source.split("."))
            paths = sorted(folder.rglob("*.py")) if folder.is_dir() else [folder.with_suffix(".py")]
            for path in paths:
                module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
                for line, call in write_calls(path, writes):
                    if f"{module}:{call.rsplit('.', 1)[-1]}" not in allowed:
                        broken.append(f"{module}:{line} calls {call}")
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        from importlinter.application import output

        output.print("These call a core function that writes the store; call ledger.actions:")
        for line in check.metadata["broken"]:
            output.indent_cursor()
            output.print_error(line)
