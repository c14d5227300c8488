"""Config files: YAML read as plain data, refused before anything is built from it when it could be more."""

from __future__ import annotations

from typing import Any

from syncfree.core.imports import note_file
from syncfree.errors import UserError

CONFIG_FILE_BYTES = 1 << 20
"""The largest config file read (a whole config is a few kilobytes)."""


def read_config_file(path: str) -> dict[str, Any]:
    """A YAML config file's mapping (`syncfree train --config`); one line naming the file when it cannot be read.

    A config is plain data: the code a `module:name` in it refers to is imported only when the command line names
    it too (`syncfree.core.imports`), and a file over `CONFIG_FILE_BYTES`, or one that uses YAML anchors and aliases
    (with which a file of a few hundred bytes expands to gigabytes: "billion laughs"), is refused before anything is
    built from it; the check reads the file's events, which do not expand aliases."""
    import yaml

    try:
        with open(path, "rb") as f:
            raw = f.read(CONFIG_FILE_BYTES + 1)
        if len(raw) > CONFIG_FILE_BYTES:
            raise UserError(f"config: {path} is over {CONFIG_FILE_BYTES // 1024} KiB; a config file is a few KiB of "
                            "plain data")
        text = raw.decode("utf-8")
        if any(isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None
               for event in yaml.parse(text, Loader=yaml.SafeLoader)):
            raise UserError(f"config: {path} uses YAML anchors or aliases; a config file is plain data (write each "
                            "value out)")
        data = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UserError(f"config: cannot read {path} ({type(e).__name__})") from None
    if data is not None and not isinstance(data, dict):
        raise UserError(f"config: {path} is not a mapping of options (a YAML {type(data).__name__}); write "
                        "`section: {key: value}` or `section.key: value` lines")
    note_file(data, f"config file {path}")  # its references stay data unless the user names them
    return data or {}
