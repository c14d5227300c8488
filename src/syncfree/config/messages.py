"""The config parser's messages (jsonargparse's) as one line in syncfree's words."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

from syncfree.config.keys import key_hint
from syncfree.config.sections import TrainConfig

BAD_VALUE = re.compile(r'Parser key "([\w.]+)": Expected a (.+?)\. Got value: (.*)$')
"""How the parser reports a value of the wrong type or outside a choice."""

BAD_UNION_VALUE = re.compile(r'Parser key "([\w.]+)": Does not validate against any of the Union subtypes '
                             r'Subtypes: \[(.*?)\] .*Given value: (.*)$')
"""... and a value outside each type of a union (`bool | Literal["seed_before"]`), its message on one line."""


def value_error_line(message: str) -> str | None:
    """The parser's message for a bad value as one line in syncfree's words (`ppo.schedule='adaptiv' is invalid;
    allowed: fixed, adaptive, linear; did you mean adaptive?`), or None for another message."""
    union = BAD_UNION_VALUE.search(" ".join(message.split()))
    if union is not None:  # `true, false or seed_before`: each subtype's allowed values
        key, subtypes, value = union.groups()
        words = {"<class 'bool'>": "true, false"}
        allowed = [words.get(t.strip(), t.strip()) for t in re.split(r",\s*(?=<class|typing)", subtypes)]
        allowed = [re.sub(r"typing\.Literal\[(.*)\]", r"\1", a).replace("'", "") for a in allowed]
        return f"{key}={value!r} is invalid; allowed: {', '.join(allowed)}"
    match = BAD_VALUE.search(message)
    if match is None:
        return None
    key, expected, value = match.groups()
    choices = re.fullmatch(r"typing\.Literal\[(.*)\]", expected)
    if choices:
        allowed = [c.strip().strip("'\"") for c in choices.group(1).split(",")]
        near = difflib.get_close_matches(value, allowed, n=1)
        return (f"{key}={value!r} is invalid; allowed: {', '.join(allowed)}"
                + (f"; did you mean {near[0]}?" if near else ""))
    kind = re.fullmatch(r"<class '(\w+)'>", expected)
    words = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}
    return f"{key}={value!r} is invalid; allowed: {words.get(kind.group(1), kind.group(1)) if kind else expected}"


UNKNOWN_KEY = (r"unrecognized arguments: --([\w.-]+)", r"Group '([\w.-]+)' does not accept option '([\w.-]+)'",
               r"Option '([\w.-]+)' is not accepted")
"""How the parser names an unknown key: on the command line, in a section of a YAML file, at its top level."""


def unknown_key_hint(message: str, cls: type = TrainConfig, sections: Mapping[str, type] | None = None) -> str:
    """For an unknown key (on the command line or in a YAML file), the nearest known key of `cls` and the keys of
    its section."""
    match = next((m for m in (re.search(p, message) for p in UNKNOWN_KEY) if m), None)
    return key_hint(".".join(match.groups()), cls, sections) if match else ""
