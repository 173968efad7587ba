"""cupric.runtime (under construction)."""
