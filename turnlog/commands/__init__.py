"""CLI commands kept in modules of their own; importing this package registers them on ``cli``
(the group, in turnlog.cli_group, imports none of them)."""

from turnlog.commands import compaction, io, mcp, policy, projections, replay, serve, session, tool  # noqa: F401
