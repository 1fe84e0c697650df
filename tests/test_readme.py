"""The README's commands and code, checked against the product.

Every ``linearizer ...`` command the README names must reach a real sub-command, and every option
it shows must be one that sub-command takes (``tests/test_cli_commands.py`` runs each command on
smoke runs). The Python blocks run as written.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from linearizer.cli.main import build_parser

README = Path(__file__).resolve().parents[1] / "README.md"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def resolve(tokens: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser a command line reaches, and the sub-command names that led there."""
    parser, path = build_parser(), []
    for token in tokens:
        children = _subparsers(parser)
        if token not in children:
            break
        parser, path = children[token], [*path, token]
    return parser, path


def options_of(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def readme_commands() -> list[tuple[str, list[str]]]:
    """``(command, extra options)`` for every backticked ``linearizer ...`` span; a table row's
    other backticked options (its description column) belong to the row's command."""
    found = []
    for line in README.read_text().splitlines():
        spans = re.findall(r"`([^`]+)`", line)
        # `linearizer COMMAND --help` stands for any command: not one to check
        commands = [s for s in spans if s.startswith("linearizer ") and not s.split()[1].isupper()]
        extra = [t for s in spans if not s.startswith("linearizer ") for t in s.split()]
        for command in commands:
            for alternative in _expand(command.replace("\\|", "|")):
                found.append((alternative, [t for t in extra if t.startswith("--")]))
    return found


def _expand(command: str) -> list[str]:
    """``style apply|mix`` -> ``style apply``, ``style mix`` (only sub-command alternatives;
    an option's value list stays as it is)."""
    words = command.split()
    for i, word in enumerate(words):
        if "|" in word and not (i and words[i - 1].startswith("--")):
            return [
                c
                for alt in word.split("|")
                for c in _expand(" ".join([*words[:i], alt, *words[i + 1 :]]))
            ]
    return [command]


def test_the_readme_names_commands():
    names = {c.split()[1] for c, _ in readme_commands()}
    assert {"train", "sample", "swap", "evaluate", "repro", "restore", "explore"} <= names


@pytest.mark.parametrize("command,extra", readme_commands(), ids=lambda v: str(v)[:60])
def test_every_readme_command_reaches_a_subcommand_with_its_options(command, extra):
    words = command.split()[1:]
    parser, path = resolve(words)
    assert path, f"README: {command!r} names no sub-command"
    leaf = _subparsers(parser)
    assert not leaf or any(w in leaf for w in words), f"README: {command!r} stops at a group"
    known = options_of(parser)
    for option in [w for w in words if w.startswith("--")] + extra:
        assert option.split("=")[0] in known, f"README: {command!r}: no option {option}"


def test_the_sampler_options_the_readme_lists_are_the_flow_commands_options():
    text = README.read_text()
    listed = re.search(r"one sampler spec \(`([^`]+)`", " ".join(text.split()))
    assert listed, "README: the sampler spec's options are not listed"
    for name in ("sample", "invert", "svd", "evaluate"):
        known = options_of(resolve([name])[0])
        missing = [o for o in listed.group(1).split() if o not in known]
        assert not missing, f"README lists {missing}, which `linearizer {name}` does not take"


def test_the_python_quick_start_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no Python block"
    for block in blocks:
        scope: dict = {}
        exec(compile(block, str(README), "exec"), scope)  # our own README, not a file's pickle
    assert scope["y"].shape == scope["x"].shape == scope["x_hat"].shape
    assert scope["svd"].S.shape == (4,)


def test_the_pretrained_one_liner_runs():
    text = " ".join(README.read_text().split())
    line = re.search(r"then `(from_pretrained\([^`]+\))`", text)
    assert line, "README: the pretrained one-liner moved"
    import torch

    from linearizer.pretrained import from_pretrained

    samples = eval(line.group(1), {"from_pretrained": from_pretrained, "torch": torch})
    assert samples.shape == (8, 1, 32, 32) and torch.isfinite(samples).all()
