"""CLI commands: pgvector (filled in by its issue)."""

commands: list = []
