"""CLI commands: store (filled in by its issue)."""

commands: list = []
