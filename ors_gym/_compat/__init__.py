"""Other libraries' private names, in one place (a module per library), each guarded."""
