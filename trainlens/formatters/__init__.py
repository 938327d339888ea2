"""Render analyses: text for terminals, JSON for machines (gate adds junit/github/markdown)."""
