"""This project's import-linter contract types (``contract_types`` in ``.importlinter``).

``private_names``: a private name (``_x``) is imported only where it is private to.
Import-linter's own ``private_modules`` contract covers private modules (``pkg._base``); this
one covers the names inside modules, which the import graph does not record, so it reads the
source (every import statement, function-local ones included).
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


def _private_imports(module: str, path: pathlib.Path, is_package: bool, roots: list[str]):
    """(line, imported dotted name) of each private name ``module`` imports from a module."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        if source.split(".")[0] not in roots:
            continue
        for alias in node.names:
            if _is_private(alias.name):
                yield node.lineno, f"{source}.{alias.name}"


class PrivateNamesContract(Contract):
    """A private name is imported only inside the module (or package) it is private to:
    ``from pkg.mod import _x`` in ``pkg.mod`` and its submodules, ``from pkg._base import _x``
    anywhere in ``pkg``. Anything another module needs gets a public name.

    Options: ``ignore_imports``: ``importer -> dotted.name`` pairs that may stay for now.
    """

    type_name = "private_names"

    ignore_imports = fields.SetField(subfield=fields.StringField(), required=False)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        roots = list(self.session_options.get("root_packages")
                     or [self.session_options["root_package"]])
        ignored = {tuple(p.strip() for p in s.split("->")) for s in self.ignore_imports or ()}
        illegal, used = [], set()
        for module, path in _module_files(graph, roots):
            is_package = path.name == "__init__.py"
            for line, target in _private_imports(module, path, is_package, roots):
                scope = _scope(target)
                if module == scope or module.startswith(scope + "."):
                    continue
                if (module, target) in ignored:
                    used.add((module, target))
                    continue
                illegal.append({"importer": module, "name": target, "line": line})
        warnings = [f"No private-name import matches the ignored {a} -> {b}."
                    for a, b in sorted(ignored - used)]
        return ContractCheck(kept=not illegal, warnings=warnings,
                             ignored_import_count=len(used), metadata={"illegal": illegal})

    def render_broken_contract(self, check: ContractCheck) -> None:
        output.print_error("Private names imported from another module (give them a public "
                           "name in their home module):", bold=False)
        output.new_line()
        for item in check.metadata["illegal"]:
            output.print_error(f"- {item['importer']} imports {item['name']} "
                               f"(l.{item['line']})", bold=False)
        output.new_line()
