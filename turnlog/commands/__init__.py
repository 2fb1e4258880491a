"""CLI commands kept in modules of their own; importing this package registers them on ``cli``."""

from turnlog.commands import compaction, io, replay, tool  # noqa: F401
