"""cupric.bindings_gen (under construction)."""
