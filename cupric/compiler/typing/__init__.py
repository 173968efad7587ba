"""Type inference for kernel code: the compiler's own types beside `cupric.types`
(`ktypes`), numeric promotion (`promote`), and the typer that turns a function's AST and
argument types into typed IR (`infer`, the driver, with its parts `statements`, `values`,
`access`, `operators`, `calls` and their shared helpers in `common`)."""
