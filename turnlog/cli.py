"""The ``turnlog`` command line: each command parses its input, calls one library function and
renders the result. Errors print one line and exit 1 (usage errors exit 2).

The group (turnlog.cli_group) imports a command's module (turnlog.commands.*) only when that command
runs or its help is shown, so `turnlog --help` and `turnlog --version` start at once."""

from __future__ import annotations

from turnlog.cli_group import cli

__all__ = ["cli", "main"]


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="turnlog")


if __name__ == "__main__":
    main()
