"""cupric.kernels (under construction)."""
