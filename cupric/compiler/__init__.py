"""cupric.compiler (under construction)."""
