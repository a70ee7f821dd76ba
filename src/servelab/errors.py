"""One exception tree for servelab.

Every error servelab raises on purpose derives from :class:`ServelabError`. The CLI
maps each to a one-line message and an exit code; anything else is a bug and is
shown with a traceback hint.

    ServelabError                      exit 1 unless stated
    ├── InputError                     exit 2: the user gave us something we cannot use
    │   ├── CheckpointError            a checkpoint file or directory is unusable
    │   │   ├── CheckpointNotFoundError (also FileNotFoundError)
    │   │   ├── HeaderError            a safetensors header breaks a format rule
    │   │   └── ShardIndexError        a sharded checkpoint's index contradicts its shards
    │   ├── ConfigError                config.json / quantization config is malformed
    │   ├── RecipeError                a recipe file is invalid (names key and line)
    │   ├── HardwareProfileError       unknown or malformed hardware profile
    │   ├── UsageError                 inconsistent command-line options
    │   └── OutputPathError            an output file or directory cannot be written
    ├── RemoteError                    a remote source (Hub, HTTP) failed or misbehaved
    ├── EngineError                    the serving engine could not be started or died
    │   ├── EngineNotFoundError        executable / interpreter missing
    │   ├── EngineStartupError         exited early or timed out while starting
    │   └── PortInUseError
    ├── BenchError                     a benchmark could not produce a result
    └── StoreError                     the results database is unusable
        ├── StoreSchemaError           foreign or newer schema, corrupted file
        │   └── StoreFileError         exit 2: the --db path is a directory or not SQLite
        └── RunNotFoundError           no stored run matches the given id

Each class keeps the offending path (when there is one) so that the message can name it.
"""

from __future__ import annotations

from pathlib import Path


class ServelabError(Exception):
    """Root of every error servelab raises on purpose."""

    exit_code: int = 1

    def __init__(self, message: str, *, path: str | Path | None = None) -> None:
        self.message = message
        self.path = str(path) if path is not None else None
        super().__init__(self.__str__())

    def __str__(self) -> str:
        if self.path:
            return f"{self.path}: {self.message}"
        return self.message


class InputError(ServelabError):
    """Something the user handed us is unusable; exit code 2."""

    exit_code = 2


class CheckpointError(InputError):
    """A checkpoint file or directory is unusable."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """The checkpoint path or repository does not exist."""


class HeaderError(CheckpointError):
    """A safetensors header breaks one of the format's rules.

    ``rule`` is a short stable identifier of the broken rule (e.g. ``"offsets-gap"``).
    """

    def __init__(self, message: str, *, path: str | Path | None = None, rule: str) -> None:
        self.rule = rule
        super().__init__(message, path=path)

    def __str__(self) -> str:
        return f"{super().__str__()} [rule: {self.rule}]"


class ShardIndexError(CheckpointError):
    """A ``model.safetensors.index.json`` contradicts itself or its shards.

    ``rule`` is a short stable identifier (e.g. ``"index-missing-tensor"``).
    """

    def __init__(self, message: str, *, path: str | Path | None = None, rule: str) -> None:
        self.rule = rule
        super().__init__(message, path=path)

    def __str__(self) -> str:
        return f"{super().__str__()} [rule: {self.rule}]"


class ConfigError(InputError):
    """A model or quantization config file is malformed."""


class RecipeError(InputError):
    """A recipe file is invalid."""


class HardwareProfileError(InputError):
    """A hardware profile is unknown or malformed."""


class UsageError(InputError):
    """Command-line options that cannot be used together, or are out of range."""


class OutputPathError(InputError):
    """An output file or directory cannot be written (checked before any long work)."""


class RemoteError(ServelabError):
    """A remote source failed or misbehaved."""


class EngineError(ServelabError):
    """The serving engine could not be started, or died."""


class EngineNotFoundError(EngineError, FileNotFoundError):
    """The engine's executable or interpreter does not exist."""


class EngineStartupError(EngineError):
    """The engine exited early or did not become ready in time."""


class PortInUseError(EngineError):
    """The requested port is already taken."""


class BenchError(ServelabError):
    """A benchmark could not produce a result."""


class StoreError(ServelabError):
    """The results database is unusable."""


class StoreSchemaError(StoreError):
    """The database has a foreign, newer or corrupted schema."""


class StoreFileError(StoreSchemaError):
    """The database path names a directory or a file that is not SQLite at all: bad input
    (a mistyped ``--db``), exit code 2."""

    exit_code = 2


class RunNotFoundError(StoreError):
    """No stored run (or experiment) matches the given id or prefix."""
