"""Typed configuration: the run's settings (`sections`), the keys of a config type and hints for unknown ones
(`keys`), configs from plain data (`loading`), the parser's messages in one line (`messages`), config files
(`files`). An algorithm's own sections live beside it (`syncfree.algo.settings`, `syncfree.algo.configs`); the
switches in `syncfree.core.switches`."""

from syncfree.config.files import CONFIG_FILE_BYTES, read_config_file
from syncfree.config.keys import dotted_keys, key_hint, options_named, section_types, sections_of
from syncfree.config.loading import check_type, field_types, flatten, from_dict, merge, to_dict, with_values
from syncfree.config.messages import unknown_key_hint, value_error_line
from syncfree.config.sections import (
    RUN_NAME_BYTES,
    STOP_CONDITION,
    CallbackConfig,
    DistributedConfig,
    EnvConfig,
    EnvNouns,
    LogConfig,
    TimeLimitEnvConfig,
    TrainConfig,
    TrainConfigT,
    validate,
)
from syncfree.core.switches import PerfConfig

__all__ = ["CONFIG_FILE_BYTES", "RUN_NAME_BYTES", "STOP_CONDITION", "CallbackConfig", "DistributedConfig", "EnvConfig",
           "EnvNouns",
           "LogConfig", "PerfConfig", "TimeLimitEnvConfig", "TrainConfig", "TrainConfigT", "check_type", "dotted_keys",
           "field_types", "flatten", "from_dict", "key_hint", "merge", "options_named", "read_config_file", "section_types", "sections_of",
           "to_dict", "unknown_key_hint", "validate", "value_error_line", "with_values"]
