"""Typed IR -> NVVM IR: how cupric types are laid out in IR values (`values`), lowering of
one function (`function`: its frame, with `statements`, `expressions`, `arrays`,
`operators` and `calls`), and the module of a kernel specialization with its metadata
and debug info (`module`)."""
