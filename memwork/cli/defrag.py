"""CLI commands: defrag (filled in by its issue)."""

commands: list = []
