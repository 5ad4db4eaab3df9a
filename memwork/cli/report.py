"""CLI commands: report (filled in by its issue)."""

commands: list = []
