"""This project's import-linter contract types (``contract_types`` in ``.importlinter``).

``private_names``: a private name (``_x``) is imported, or read off an imported module
(``mod._x``), only where it is private to. Import-linter's own ``private_modules`` contract
covers private modules (``pkg._base``); this one covers the names inside modules, which the
import graph does not record, so it reads the source (every import statement, function-local
ones included, and every attribute read through a name an import bound to a module).
"""
from __future__ import annotations

import ast
import importlib.util
import pathlib
from typing import Iterator

import grimp
from importlinter import Contract, ContractCheck, fields, output


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _scope(target: str) -> str:
    """Where a dotted name is private to: what precedes its first private component
    (``pkg.mod._x`` is ``pkg.mod``'s; ``pkg._base._x``, a name of a private module, ``pkg``'s)."""
    parts = target.split(".")
    first = next(i for i, p in enumerate(parts) if _is_private(p))
    return ".".join(parts[:first])


def _module_files(graph: grimp.ImportGraph, roots: list[str]) -> Iterator[tuple[str, pathlib.Path]]:
    """(module, source file) for the modules of the root packages, found without importing."""
    for root in roots:
        spec = importlib.util.find_spec(root)
        if spec is None or not spec.submodule_search_locations:
            continue
        base = pathlib.Path(next(iter(spec.submodule_search_locations)))
        for module in sorted(m for m in graph.modules if m == root or m.startswith(root + ".")):
            parts = module.split(".")[1:]
            package = base.joinpath(*parts, "__init__.py")
            if package.is_file():
                yield module, package
            elif parts and base.joinpath(*parts[:-1], parts[-1] + ".py").is_file():
                yield module, base.joinpath(*parts[:-1], parts[-1] + ".py")


def _source(node: ast.ImportFrom, package: str) -> str:
    """The absolute name of the module a ``from ... import`` statement imports from."""
    if node.level:
        base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))
    return node.module or ""


def _private_imports(tree: ast.Module, package: str, roots: list[str]):
    """(line, imported dotted name) of each private name a module imports from a module."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = _source(node, package)
        if source.split(".")[0] not in roots:
            continue
        for alias in node.names:
            if _is_private(alias.name):
                yield node.lineno, f"{source}.{alias.name}"


def _module_names(tree: ast.Module, package: str, roots: list[str],
                  modules: set[str]) -> dict[str, str]:
    """The names that import statements bind to modules of the root packages (name ->
    module), less any name the source also binds otherwise (an assignment, a parameter, a
    definition): those may hold something else where they are read."""
    bound, other = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in roots:
                    bound[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            source = _source(node, package)
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            other.add(node.id)
        elif isinstance(node, ast.arg):
            other.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            other.add(node.name)
    return {name: module for name, module in bound.items() if name not in other}


def _private_reads(tree: ast.Module, package: str, roots: list[str], modules: set[str]):
    """(line, dotted name) of each private attribute read off a module object: ``mod._x``
    where ``mod`` (or ``pkg.mod``) names a module that an import statement bound."""
    names = _module_names(tree, package, roots, modules)

    def module_of(node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return names.get(node.id)
        if isinstance(node, ast.Attribute):
            outer = module_of(node.value)
            if outer is not None and f"{outer}.{node.attr}" in modules:
                return f"{outer}.{node.attr}"
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            module = module_of(node.value)
            if module is not None:
                yield node.lineno, f"{module}.{node.attr}"


class PrivateNamesContract(Contract):
    """A private name is imported, or read off a module object, only inside the module (or
    package) it is private to: ``from pkg.mod import _x`` or ``mod._x`` in ``pkg.mod`` and its
    submodules, ``from pkg._base import _x`` anywhere in ``pkg``. Anything another module needs
    gets a public name.

    Options: ``ignore_imports``: ``importer -> dotted.name`` pairs that may stay for now.
    """

    type_name = "private_names"

    ignore_imports = fields.SetField(subfield=fields.StringField(), required=False)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        roots = list(self.session_options.get("root_packages")
                     or [self.session_options["root_package"]])
        ignored = {tuple(p.strip() for p in s.split("->")) for s in self.ignore_imports or ()}
        modules = set(graph.modules)
        illegal, used = [], set()
        for module, path in _module_files(graph, roots):
            package = module if path.name == "__init__.py" else module.rpartition(".")[0]
            tree = ast.parse(path.read_text(), str(path))
            uses = [(line, target, "imports") for line, target
                    in _private_imports(tree, package, roots)]
            uses += [(line, target, "reads") for line, target
                     in _private_reads(tree, package, roots, modules)]
            for line, target, how in sorted(uses):
                scope = _scope(target)
                if module == scope or module.startswith(scope + "."):
                    continue
                if (module, target) in ignored:
                    used.add((module, target))
                    continue
                illegal.append({"importer": module, "name": target, "line": line, "how": how})
        warnings = [f"No private-name import matches the ignored {a} -> {b}."
                    for a, b in sorted(ignored - used)]
        return ContractCheck(kept=not illegal, warnings=warnings,
                             ignored_import_count=len(used), metadata={"illegal": illegal})

    def render_broken_contract(self, check: ContractCheck) -> None:
        output.print_error("Private names imported from (or read off) another module (give "
                           "them a public name in their home module):", bold=False)
        output.new_line()
        for item in check.metadata["illegal"]:
            output.print_error(f"- {item['importer']} {item['how']} {item['name']} "
                               f"(l.{item['line']})", bold=False)
        output.new_line()
