"""Every use of another library's private names, one module per library.

Each module checks the installed version against the range its private path
was verified on and otherwise takes a public path (logged once at DEBUG), so
an upgrade that renames a private name costs speed or a capability, never a
wrong answer. ``tests/_compat/test_compat.py`` fails loudly when a name changes or a
version leaves its range.
"""
