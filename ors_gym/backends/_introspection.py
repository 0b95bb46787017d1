"""Moved to ``ors_gym._compat.openreward``; kept until ``local.py`` imports from there."""
from ors_gym._compat.openreward import enable_introspection_cache as enable
from ors_gym._compat.openreward import install_introspection_cache as install
from ors_gym._compat.openreward import introspection_cache_installed as installed

__all__ = ["enable", "install", "installed"]
