"""JSON Schema for tool inputs: random valid arguments, and finite sets of arguments.

ORS tools describe their input with (pydantic-generated) JSON Schemas.

- :func:`compile_sampler` / :func:`sample_from_schema` (``sample.py``): values
  that validate against a schema, for random agents and tests.
- :func:`finite_choices` (``finite.py``): every value of a parameter with few
  of them, for discrete action spaces.

Underneath: ``resolve.py`` (``$ref``, ``allOf``: flat schemas),
``scalars.py`` (integer, number, string samplers), ``regex.py`` (strings
matching a ``pattern``) and ``validate.py`` (when a ``default`` may be used);
:func:`json_equal` is JSON's equality (``1 != True``), for comparing values.
"""

from __future__ import annotations

from ors_gym.schema.finite import finite_choices
from ors_gym.schema.resolve import SchemaError, json_equal
from ors_gym.schema.sample import Sampler, compile_sampler, sample_from_schema

__all__ = [
    "Sampler",
    "SchemaError",
    "compile_sampler",
    "finite_choices",
    "json_equal",
    "sample_from_schema",
]
