"""The compiler frontend's view of Python: reading and parsing a kernel's source with real
file positions (`source`), and resolving its free names to globals, closure values and
builtins (`resolve`)."""
