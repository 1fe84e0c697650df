"""Helpers the contract tests share."""

from __future__ import annotations

import importlib
import pkgutil

import linearizer


def package_classes(base: type) -> set[type]:
    """Every subclass of ``base`` defined in the package (each module imported first)."""
    for info in pkgutil.walk_packages(linearizer.__path__, "linearizer."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    found, todo = set(), [base]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("linearizer.") and sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def contract_cases(namespace: dict, base: type) -> set[str]:
    """The ``case`` names of the ``Test...`` subclasses of ``base`` in a test module's
    ``namespace`` (its ``globals()``): a contract entry without its class is never run."""
    return {
        v.case
        for k, v in namespace.items()
        if k.startswith("Test") and isinstance(v, type) and issubclass(v, base)
    }
