"""cupric.simulator (under construction)."""
