"""Model families: how each writes its tool calls and reasoning (placeholder; see _parse)."""
