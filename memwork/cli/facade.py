"""CLI commands: facade (filled in by its issue)."""

commands: list = []
