"""cupric.gpu_rand (under construction)."""
