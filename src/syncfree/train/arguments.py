"""`syncfree train`'s config from the command line and config files: the task's preset for the algorithm chosen (or
the resumed checkpoint's config), overridden key by key, each bad key or value one line."""

from __future__ import annotations

import argparse
import re
from collections.abc import Collection, Sequence
from typing import Any

from syncfree.algo import algorithms_with
from syncfree.config import (
    TrainConfig,
    from_dict,
    read_config_file,
    sections_of,
    unknown_key_hint,
    value_error_line,
)
from syncfree.config.messages import UNKNOWN_KEY
from syncfree.core.device import resolve_device
from syncfree.core.imports import TRUST, TRUST_HELP
from syncfree.errors import UserError
from syncfree.tasks import (
    choose_algorithm,
    config_file_arguments,
    preset,
    stored_algorithm,
    switch_scope,
    validated,
)
from syncfree.train.session import check_resumed_algorithm, resume_config


def config_parser(prog: str, description: str, cls: type, default: Any, sections: dict[str, type] | None = None) -> Any:
    """A jsonargparse parser of the dataclass `cls` (its attribute docstrings as help), defaults from `default`;
    `sections` gives some sections another type than `cls` declares (a task's `env` type)."""
    from jsonargparse import ArgumentParser, set_parsing_settings

    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    parser = ArgumentParser(prog=prog, exit_on_error=False, allow_abbrev=False, description=description)
    parser.add_class_arguments(cls, as_group=False, default=default, skip=set(sections or ()))
    for name, section_type in (sections or {}).items():
        parser.add_class_arguments(section_type, nested_key=name, default=getattr(default, name))
    return parser


def parse_train_config(argv: Sequence[str]) -> TrainConfig:
    """Defaults come from the task's preset for the algorithm chosen (or the resumed checkpoint's config); arguments
    override them. The options (and `--help`) are those of the algorithm's config type with the task's sections."""
    argv = [arg for arg in argv if arg != TRUST]  # read by `main`: a config file cannot set it
    pre = argparse.ArgumentParser(add_help=False)
    for name in ("--task", "--resume", "--algorithm", "--policy.kind", "--distill.teacher"):
        pre.add_argument(name)
    pre.add_argument("--config", action="append", default=[])
    known, _ = pre.parse_known_args(argv)
    files = [read_config_file(path) for path in known.config]  # each checked (size, no aliases) before the parser
    config_path, from_config = (known.config[-1], files[-1]) if files else (None, {})
    if known.resume:
        base = resume_config(known.resume)
        check_resumed_algorithm(known.resume, base.algorithm, known.algorithm)
    else:
        base = preset(known.task or from_config.get("task") or "cartpole")
        policy, distill = from_config.get("policy"), from_config.get("distill")
        named = known.algorithm or (stored_algorithm(from_config) if from_config else None)
        kind = getattr(known, "policy.kind") or (policy.get("kind") if isinstance(policy, dict) else None)
        teacher = getattr(known, "distill.teacher") or (distill.get("teacher") if isinstance(distill, dict) else None)
        chosen = choose_algorithm(base.algorithm, named, kind, teacher)
        if chosen != base.algorithm:  # the task's preset for that algorithm, else the settings they share
            base = preset(base.task, algorithm=chosen)
    sections = sections_of(base)
    if config_path:  # a run's config.yaml of an earlier version is read in this one's layout
        argv = config_file_arguments(list(argv), config_path, from_config, type(base), sections)
    inert = base.perf.inert_switches(switch_scope(base, resolve_device(base.device)))
    parser = config_parser("syncfree train", f"Train {base.task} with --algorithm {base.algorithm}; defaults shown "
                           f"are its preset. Switches that change nothing for it here: {', '.join(inert) or 'none'} "
                           f"(`syncfree switches --task {base.task}` says why). {TRUST_HELP}", type(base), base,
                           sections)
    parser.add_argument("--config", action="config", help="YAML file with any of the options below.")
    brief_switch_help(parser, inert)
    try:
        ns = parser.parse_args(list(argv))
    except Exception as e:
        message = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
        from_file = "does not accept" in message or "is not accepted" in message
        where = f" (in {config_path})" if config_path and from_file else ""
        bad_value = value_error_line(message)
        if bad_value is not None:
            raise UserError(f"config: {bad_value}") from None
        hint = unknown_key_hint(message, type(base), sections)
        raise UserError(f"config: {message}{where}{other_algorithms_hint(message, base.algorithm)}{hint}") from None
    ns.pop("config", None)
    return validated(from_dict(type(base), ns.as_dict(), sections=sections))


TRAIN_USAGE = "syncfree train [--task TASK] [--algorithm NAME] [--config FILE] [--SECTION.KEY VALUE ...]"


def brief_switch_help(parser: Any, inert: Collection[str]) -> None:
    """`--help` short enough to read: one usage line, each switch by its first sentence (`syncfree switches` has
    the rest), the switches that change nothing for the task left out (the description names them; they parse)."""
    parser.usage = TRAIN_USAGE
    for action in parser._actions:
        switch = action.dest.removeprefix("perf.")
        if switch == action.dest or not isinstance(action.help, str):
            continue
        action.help = argparse.SUPPRESS if switch in inert else f"{first_sentence(action.help)} (`syncfree switches`)"


def first_sentence(text: str) -> str:
    """`text` up to its first full stop outside parentheses."""
    text, depth = " ".join(text.split()), 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "." and depth == 0 and text[i + 1:i + 2] in (" ", ""):
            return text[:i + 1]
    return text


def other_algorithms_hint(message: str, algorithm: str) -> str:
    """For an unknown key of a section that other algorithms have (`--distill.teacher` with PPO): which have it."""
    match = next((m for m in (re.search(p, message) for p in UNKNOWN_KEY) if m), None)
    section = match.group(1).split(".")[0] if match else ""
    owners = [name for name in algorithms_with(section) if name != algorithm] if section else []
    return f"; {section}.* are settings of --algorithm {' or '.join(owners)}, not {algorithm}" if owners else ""
