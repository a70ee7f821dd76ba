"""A Typer root group whose commands are imported only when one of them is used.

``servelab --help`` lists every command with its one-line summary; importing the command
modules to get those summaries costs more than the rest of the start together (issue 16). So
the root group knows, for each command, the module that defines it and its summary (a
:class:`LazyCommand`), lists the summaries without importing anything, and imports a
command's module only when that command runs, its own ``--help`` is asked for, or a caller
reads it from ``group.commands``. tests/cli/test_startup.py checks that every summary is the
first paragraph of the loaded command's own help, so the listing cannot drift.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup

Command = Any  # a click command as Typer builds it (typer vendors click; its types are private)


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """One root command: its name, the module that registers it and its --help summary.

    The module exposes ``register(root: typer.Typer)`` or a Typer group named ``app``.
    """

    name: str
    module: str
    summary: str


def flags_take_no_value(cmd: Command) -> Command:
    """Show a flag in ``--help`` as a flag: Typer's help gives every option a type column,
    so ``--fits`` read ``--fits <bool>``, as if it took a value. A flag (its ``--help``
    included) gets an empty metavar; ``cmd`` and its subcommands, in place."""
    help_option = getattr(cmd, "get_help_option", None)
    if help_option is not None:
        help_option(cmd.context_class(cmd))  # builds (and caches) its --help option
    for param in [*cmd.params, getattr(cmd, "_help_option", None)]:
        if param is not None and getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(cmd, "commands", {}).values():
        flags_take_no_value(sub)
    return cmd


def load_module_commands(module_name: str) -> dict[str, Command]:
    """Import ``module_name`` and build the click commands it registers on a root app."""
    module = importlib.import_module(module_name)
    root = typer.Typer()
    if hasattr(module, "register"):
        module.register(root)
    else:
        root.add_typer(module.app)
    return {name: flags_take_no_value(cmd)
            for name, cmd in typer.main.get_group(root).commands.items()}


class LazyCommands(MutableMapping[str, Command]):
    """``group.commands`` for a :class:`LazyGroup`: names are known up front, a command is
    built on first access (with every other command of its module)."""

    def __init__(self, lazy: Sequence[LazyCommand], eager: dict[str, Command]) -> None:
        self._lazy = {c.name: c for c in lazy}
        self._loaded: dict[str, Command] = dict(eager)
        self._order = [c.name for c in lazy] + [n for n in eager if n not in self._lazy]

    def is_loaded(self, name: str) -> bool:
        return name in self._loaded

    def __getitem__(self, name: str) -> Command:
        if name not in self._loaded and name in self._lazy:
            built = load_module_commands(self._lazy[name].module)
            for key, cmd in built.items():
                self._loaded.setdefault(key, cmd)
        return self._loaded[name]

    def __setitem__(self, name: str, cmd: Command) -> None:
        if name not in self._order:
            self._order.append(name)
        self._loaded[name] = cmd

    def __delitem__(self, name: str) -> None:
        self._order.remove(name)
        self._loaded.pop(name, None)
        self._lazy.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)


class LazyGroup(TyperGroup):
    """A root group over :attr:`lazy_commands` (set by a subclass)."""

    lazy_commands: ClassVar[tuple[LazyCommand, ...]] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for param in self.params:  # the root's own flags (--version); its --help: below
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        self.commands = LazyCommands(self.lazy_commands, dict(self.commands))
        self._summaries = {c.name: c.summary for c in self.lazy_commands}
        self._listing = False

    @contextmanager
    def _summaries_only(self) -> Iterator[None]:
        self._listing = True
        try:
            yield
        finally:
            self._listing = False

    def get_command(self, ctx: Any, cmd_name: str) -> Command | None:
        commands = self.commands
        assert isinstance(commands, LazyCommands)
        if self._listing and cmd_name in self._summaries and not commands.is_loaded(cmd_name):
            return TyperCommand(name=cmd_name, help=self._summaries[cmd_name])
        return commands.get(cmd_name)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None and option.metavar is None:
            option.metavar = ""  # a flag (see flags_take_no_value)
        return option

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # names only: TyperGroup's reads items(), building each

    def format_help(self, ctx: Any, formatter: Any) -> None:
        with self._summaries_only():
            super().format_help(ctx, formatter)

    def shell_complete(self, ctx: Any, incomplete: str) -> Any:
        with self._summaries_only():
            return super().shell_complete(ctx, incomplete)
