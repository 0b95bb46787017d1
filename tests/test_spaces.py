"""Spaces: JSON-Schema sampling validates, ToolCallSpace samples/contains/seeds, AnyText."""

from __future__ import annotations

import copy
import datetime
import enum
import json
import logging
import pickle
import uuid
from typing import Annotated, Any, Literal

import jsonschema
import numpy as np
import pytest
from gymnasium.spaces import Tuple
from gymnasium.vector.utils import batch_space
from hypothesis import given
from hypothesis import strategies as st
from openreward.environments import Environment, ToolOutput, terminal, tool  # conftest quiets it
from pydantic import BaseModel, Field, confloat, conint, constr

from ors_gym.actions import parse_action
from ors_gym.protocol import TerminalToolSpec, ToolSpec
from ors_gym.schema import SchemaError, compile_sampler, finite_choices, sample_from_schema
from ors_gym.spaces import AnyImage, AnyText, ToolCallSpace

SEEDS = range(300)


# ------------------------------------------------- realistic pydantic schemas


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Point(BaseModel):
    x: int
    y: int = 0


class Tree(BaseModel):
    value: int
    children: list[Tree] = []


class Node(BaseModel):
    label: str
    next: Node | None = None


class Move(BaseModel):
    direction: Literal["up", "down", "left", "right"]
    steps: conint(ge=1, le=3) = 1  # type: ignore[valid-type]


class Search(BaseModel):
    query: constr(min_length=1, max_length=40)  # type: ignore[valid-type]
    top_k: conint(gt=0, lt=11) = 5  # type: ignore[valid-type]
    temperature: confloat(ge=0.0, le=2.0) = 1.0  # type: ignore[valid-type]
    site: str | None = None
    strict: bool = False


class Everything(BaseModel):
    kind: Literal["a", "b", "c"]
    version: Literal[2]
    maybe: int | None = None
    maybe_kind: Literal["x", "y"] | None = None
    score: confloat(gt=-1.0, lt=1.0)  # type: ignore[valid-type]
    count: conint(ge=0, le=1_000_000)  # type: ignore[valid-type]
    tags: list[str] = Field(max_length=3)
    short: Annotated[list[int], Field(min_length=2, max_length=4)]
    point: Point
    path: list[Point] = []
    maybe_point: Point | None = None
    counts: dict[str, int]
    extra: dict[str, Any] = {}
    flag: bool
    color: Color
    code: constr(pattern=r"^[A-Z]{3}-\d{2,4}$")  # type: ignore[valid-type]
    when: datetime.datetime
    day: datetime.date
    ident: uuid.UUID
    pair: tuple[int, str]
    unique: set[int]
    step5: int = Field(default=0, multiple_of=5, ge=0, le=50)
    tree: Tree
    chain: Node
    ratio: float
    union: int | str | list[bool]


class NoArgs(BaseModel):
    pass


class Answer(BaseModel):
    answer: str


MODELS: list[type[BaseModel]] = [Move, Search, Point, Tree, Node, Everything, NoArgs, Answer]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_samples_validate_against_pydantic_schemas(model: type[BaseModel]) -> None:
    schema = model.model_json_schema()
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    sampler = compile_sampler(schema)
    for seed in SEEDS:
        value = sampler(np.random.default_rng(seed))
        validator.validate(value)
        model.model_validate(value)  # what the SDK server does with the input
        json.dumps(value)


def test_samples_cover_the_schema() -> None:
    """Optional fields appear and are omitted; every enum value and union branch shows up."""
    sampler = compile_sampler(Everything.model_json_schema())
    rng = np.random.default_rng(1)
    values = [sampler(rng) for _ in range(300)]
    assert {v["kind"] for v in values} == {"a", "b", "c"}
    assert any("maybe" in v for v in values) and any("maybe" not in v for v in values)
    assert {type(v["union"]) for v in values} == {int, str, list}
    assert any(v["tree"].get("children") for v in values)  # recursion does happen
    assert any(v["chain"].get("next") for v in values)
    assert any(not tag.isascii() for v in values for tag in v["tags"])
    assert {len(v["short"]) for v in values} == {2, 3, 4}


def test_recursive_schema_stays_finite() -> None:
    sampler = compile_sampler(Tree.model_json_schema())
    rng = np.random.default_rng(0)

    def depth(tree: dict[str, Any]) -> int:
        return 1 + max((depth(c) for c in tree.get("children", [])), default=0)

    assert max(depth(sampler(rng)) for _ in range(300)) <= 8


# --------------------------------------------------- handcrafted JSON Schemas

HANDCRAFTED: list[tuple[str, dict[str, Any]]] = [
    ("type-list", {"type": ["string", "integer", "null"], "minLength": 2, "maximum": -5}),
    (
        "allOf-merge",
        {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"a": {"minimum": 10, "maximum": 12}, "b": {"const": True}}},
                {"required": ["b"]},
            ]
        },
    ),
    ("allOf-number-integer", {"allOf": [{"type": "number"}, {"type": "integer", "maximum": 3}]}),
    (
        "draft7-definitions",
        {
            "definitions": {"Id": {"type": "string", "format": "uuid"}},
            "type": "object",
            "properties": {"ids": {"type": "array", "items": {"$ref": "#/definitions/Id"}}},
            "required": ["ids"],
        },
    ),
    ("ref-with-siblings", {"$defs": {"N": {"type": "integer"}}, "$ref": "#/$defs/N", "minimum": 7}),
    ("enum-mixed", {"enum": [1, "one", None, [1], {"a": 1}]}),
    ("const-object", {"const": {"k": [1, 2]}}),
    ("exclusive", {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1e-9}),
    ("int-exclusive-float", {"type": "integer", "exclusiveMinimum": 1.5, "exclusiveMaximum": 4}),
    ("one-sided-int", {"type": "integer", "minimum": 1000}),
    ("one-sided-number", {"type": "number", "maximum": -1e6}),
    ("huge-number-range", {"type": "number", "minimum": -1e308, "maximum": 1e308}),
    ("multiple-of", {"type": "integer", "multipleOf": 7, "minimum": -20, "maximum": 20}),
    ("number-multiple-of-int", {"type": "number", "multipleOf": 3, "maximum": 10}),
    ("unique", {"type": "array", "items": {"enum": [1, 2, 3, 4]}, "uniqueItems": True}),
    ("prefix-items", {"type": "array", "prefixItems": [{"type": "string"}, {"const": 1}]}),
    (
        "tuple-draft7",
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "array",
            "items": [{"type": "boolean"}],
            "additionalItems": False,
            "minItems": 1,
        },
    ),
    ("map", {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2}),
    ("map-names", {"type": "object", "propertyNames": {"enum": ["a", "b"]}}),
    ("closed", {"type": "object", "properties": {}, "additionalProperties": False}),
    ("oneOf-disjoint", {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}),
    ("anyOf-siblings", {"anyOf": [{"minimum": 5}, {"maximum": -5}], "type": "integer"}),
    ("empty", {}),
    ("true", True),  # type: ignore[list-item]
    ("nested-arrays", {"type": "array", "items": {"type": "array", "items": {"type": "null"}}}),
    ("pattern-alternation", {"type": "string", "pattern": "^(cat|dog)s?$"}),
    ("pattern-class", {"type": "string", "pattern": r"^[^a-z\s]{2}\w+\.txt$"}),
    ("pattern-and-length", {"type": "string", "pattern": "[0-9]+", "maxLength": 3}),
    ("formats", {"type": "string", "format": "email"}),
    ("default-valid", {"type": "integer", "minimum": 0, "default": 3}),
    ("default-invalid", {"type": "integer", "minimum": 0, "default": None}),
    ("string-bounds", {"type": "string", "minLength": 5, "maxLength": 5}),
    ("inferred-types", {"properties": {"n": {"maximum": 3}}, "required": ["n"]}),
    (
        "required-extra",
        {
            "type": "object",
            "required": ["x"],
            "additionalProperties": {"type": "boolean"},
            "properties": {},
        },
    ),
]


@pytest.mark.parametrize(("name", "schema"), HANDCRAFTED, ids=[n for n, _ in HANDCRAFTED])
def test_handcrafted_schemas(name: str, schema: Any) -> None:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    sampler = compile_sampler(schema)
    for seed in SEEDS:
        validator.validate(sampler(np.random.default_rng(seed)))


def test_draft4_boolean_exclusive_bounds() -> None:
    schema = {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 2}
    validator = jsonschema.Draft4Validator(schema)
    sampler = compile_sampler(schema)
    values = {sampler(np.random.default_rng(s)) for s in SEEDS}
    assert values == {1, 2}
    for value in values:
        validator.validate(value)


def test_draft4_exclusive_bound_rules_out_a_default_on_the_bound() -> None:
    """A default equal to a draft-4 exclusive minimum is invalid, so it is never sampled."""
    schema = {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1, "default": 0}
    sampler = compile_sampler(schema)
    values = [sampler(np.random.default_rng(s)) for s in SEEDS]
    assert all(0 < v <= 1 for v in values)
    on_bound = {**schema, "default": 1}  # the inclusive maximum: valid, so sometimes drawn
    assert 1 in [compile_sampler(on_bound)(np.random.default_rng(s)) for s in SEEDS]


def test_default_is_used_sometimes_and_only_when_valid() -> None:
    valid = compile_sampler({"type": "integer", "minimum": 0, "maximum": 10**9, "default": 3})
    invalid = compile_sampler({"type": "integer", "minimum": 5, "maximum": 10**9, "default": 3})
    rng = np.random.default_rng(0)
    assert 3 in {valid(rng) for _ in range(300)}
    assert 3 not in {invalid(rng) for _ in range(300)}


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ({"type": "integer", "minimum": 5, "maximum": 4}, "no integer satisfies"),
        ({"type": "number", "minimum": 1, "exclusiveMaximum": 1}, "no number satisfies"),
        ({"enum": []}, "empty enum"),
        (False, "no valid values"),
        ({"$ref": "#/$defs/Missing"}, "does not resolve"),
        ({"$ref": "https://example.com/schema.json"}, "only local refs"),
        ({"type": "string", "minLength": 4, "maxLength": 2}, "minLength"),
        ({"type": "array", "minItems": 3, "maxItems": 1}, "at most 1"),
        ({"type": "frob"}, "unknown JSON Schema type"),
        ({"type": "object", "required": ["a"], "additionalProperties": False}, "not allowed"),
        ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "incompatible types"),
        ({"anyOf": [{"enum": []}, False]}, "no anyOf branch"),
        ({"$defs": {"A": {"allOf": [{"$ref": "#/$defs/A"}]}}, "$ref": "#/$defs/A"}, "too deep"),
    ],
)
def test_unsatisfiable_schemas_raise_schema_error(schema: Any, fragment: str) -> None:
    with pytest.raises(SchemaError, match=None) as info:
        compile_sampler(schema)
    assert fragment in str(info.value)


def test_schema_with_no_finite_instance_raises_when_sampled() -> None:
    schema = {
        "$defs": {
            "Loop": {
                "type": "object",
                "properties": {"next": {"$ref": "#/$defs/Loop"}},
                "required": ["next"],
            }
        },
        "$ref": "#/$defs/Loop",
    }
    sampler = compile_sampler(schema)
    with pytest.raises(SchemaError, match="no finite instance"):
        sampler(np.random.default_rng(0))


def test_sample_from_schema_is_reproducible() -> None:
    schema = Everything.model_json_schema()
    first = [sample_from_schema(schema, np.random.default_rng(s)) for s in range(20)]
    again = [sample_from_schema(schema, np.random.default_rng(s)) for s in range(20)]
    assert first == again
    assert len({json.dumps(v, sort_keys=True) for v in first}) == 20


def test_sub_schema_resolves_refs_against_root() -> None:
    root = Everything.model_json_schema()
    value = sample_from_schema(root["properties"]["point"], np.random.default_rng(0), root=root)
    Point.model_validate(value)


# ------------------------------------------------------------- finite_choices


def _choices(model: type[BaseModel], field: str, **kw: Any) -> list[Any] | None:
    schema = model.model_json_schema()
    return finite_choices(schema["properties"][field], schema, **kw)


def test_finite_choices_of_pydantic_fields() -> None:
    assert _choices(Everything, "kind") == ["a", "b", "c"]
    assert _choices(Everything, "version") == [2]
    assert _choices(Everything, "maybe_kind") == ["x", "y", None]
    assert _choices(Everything, "flag") == [False, True]
    assert _choices(Everything, "color") == ["red", "green"]
    assert _choices(Move, "direction") == ["up", "down", "left", "right"]
    assert _choices(Move, "steps") == [1, 2, 3]
    assert _choices(Search, "top_k") == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert _choices(Search, "strict") == [False, True]
    assert _choices(Everything, "step5") == [0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50]


@pytest.mark.parametrize(
    "field", ["maybe", "score", "count", "tags", "point", "counts", "code", "ratio", "union"]
)
def test_finite_choices_of_infinite_fields_is_none(field: str) -> None:
    assert _choices(Everything, field) is None


def test_finite_choices_edge_cases() -> None:
    assert finite_choices({"type": "integer", "minimum": 0, "maximum": 15}) == list(range(16))
    assert finite_choices({"type": "integer", "minimum": 0, "maximum": 16}) is None
    assert finite_choices({"type": "integer", "minimum": 0, "maximum": 16}, max_int_range=17)
    assert finite_choices({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 3}) == [
        1,
        2,
    ]
    assert finite_choices({"type": ["boolean", "null"]}) == [False, True, None]
    assert finite_choices({"anyOf": [{"const": 1}, {"const": True}, {"const": 1}]}) == [1, True]
    assert finite_choices({"type": "null"}) == [None]
    assert finite_choices({}) is None
    assert finite_choices({"type": "string"}) is None
    assert finite_choices({"type": "integer", "minimum": 0}) is None
    assert finite_choices(False) == []
    ref = {"$defs": {"E": {"enum": ["p", "q"]}}, "$ref": "#/$defs/E"}
    assert finite_choices(ref) == ["p", "q"]
    assert finite_choices({"allOf": [{"enum": [1, 2, 3]}, {"enum": [2, 3, 4]}]}) == [2, 3]


def test_finite_choices_all_validate() -> None:
    schema = Everything.model_json_schema()
    for prop in schema["properties"].values():
        values = finite_choices(prop, schema)
        for value in values or ():
            jsonschema.Draft202012Validator({**prop, "$defs": schema["$defs"]}).validate(value)


# ---------------------------------------------------------------- ToolCallSpace


def _spec(name: str, model: type[BaseModel] | None) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=f"the {name} tool",
        input_schema=model.model_json_schema() if model else None,
    )


TOOLS = [_spec("move", Move), _spec("search", Search), _spec("inspect", Everything)]
TOOLS.append(_spec("look", None))
TERMINAL = TerminalToolSpec(name="answer", arg="answer")
MODEL_OF = {"move": Move, "search": Search, "inspect": Everything}


def test_space_samples_are_valid_calls() -> None:
    space = ToolCallSpace(TOOLS, TERMINAL, seed=0)
    seen = set()
    plain = 0
    for _ in range(300):
        action = space.sample()
        assert set(action) == {"tool_calls", "message"}
        if not action["tool_calls"]:  # a plain message, for the terminal tool
            assert isinstance(action["message"], str) and action in space
            plain += 1
            continue
        assert action["message"] == ""
        (call,) = action["tool_calls"]
        seen.add(call["name"])
        if call["name"] == "look":
            assert call["arguments"] == {}
        else:
            MODEL_OF[call["name"]].model_validate(call["arguments"])
        assert space.contains(action)
        assert action in space
        parsed = parse_action(action)
        assert parsed.errors == () and parsed.tool_calls[0].name == call["name"]
        json.dumps(action)
    assert seen == {"move", "search", "inspect", "look"}
    assert 30 <= plain <= 90  # about one in five (four tools and the terminal one)


def test_without_a_terminal_tool_samples_are_always_calls() -> None:
    space = ToolCallSpace(TOOLS, seed=0)
    assert all(space.sample()["tool_calls"] for _ in range(200))


def test_space_seeding_reproduces_the_sequence() -> None:
    space = ToolCallSpace(TOOLS, TERMINAL, max_calls=3)
    space.seed(123)
    first = [space.sample() for _ in range(50)]
    space.seed(123)
    assert [space.sample() for _ in range(50)] == first
    space.seed(124)
    assert [space.sample() for _ in range(50)] != first
    other = ToolCallSpace(TOOLS, TERMINAL, max_calls=3, seed=123)
    assert [other.sample() for _ in range(50)] == first


def test_max_calls_bounds_the_number_of_calls() -> None:
    space = ToolCallSpace(TOOLS, max_calls=3, seed=0)
    counts = {len(space.sample()["tool_calls"]) for _ in range(200)}
    assert counts == {1, 2, 3}
    with pytest.raises(ValueError, match="max_calls"):
        ToolCallSpace(TOOLS, max_calls=0)


def test_mask_and_probability() -> None:
    space = ToolCallSpace(TOOLS, TERMINAL, seed=0)
    names = {space.sample(mask=np.array([0, 1, 0, 1], np.int8))["tool_calls"][0]["name"]}
    names |= {space.sample(mask=[0, 1, 0, 1])["tool_calls"][0]["name"] for _ in range(100)}
    assert names == {"search", "look"}
    only = {
        space.sample(probability=[0.0, 0.0, 1.0, 0.0])["tool_calls"][0]["name"] for _ in range(50)
    }
    assert only == {"inspect"}
    none = space.sample(mask=np.zeros(4, np.int8))
    assert none["tool_calls"] == [] and isinstance(none["message"], str) and none["message"]
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        space.sample(mask=[1, 0])
    with pytest.raises(ValueError, match="only 0 and 1"):
        space.sample(mask=[2, 0, 0, 0])
    with pytest.raises(ValueError, match="sum to 1"):
        space.sample(probability=[0.5, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="not both"):
        space.sample(mask=[1, 1, 1, 1], probability=[0.25] * 4)


def test_space_without_listed_tools_samples_messages() -> None:
    space = ToolCallSpace([], TERMINAL, seed=0)
    for _ in range(20):
        action = space.sample()
        assert action["tool_calls"] == [] and 1 <= len(action["message"]) <= 32
        assert space.contains(action)


def test_contains_accepts_valid_actions() -> None:
    space = ToolCallSpace(TOOLS, TERMINAL)
    assert space.contains("any text at all ✓ 中文")
    assert space.contains('{"name": "nope", "arguments": {}}')  # text: the env reports it
    assert space.contains({"message": "hi"})
    assert space.contains({})
    assert space.contains({"tool_calls": [{"name": "answer", "arguments": {"answer": "4"}}]})
    assert space.contains({"name": "look"})
    assert space.contains([{"name": "move", "arguments": '{"direction": "up"}'}])
    openai = {"id": "c", "type": "function", "function": {"name": "move", "arguments": "{}"}}
    assert space.contains({"tool_calls": [openai]})
    assert space.contains({"tool_calls": [{"name": "move", "arguments": "{broken"}]})


@pytest.mark.parametrize(
    "action",
    [
        7,
        None,
        b"text",
        2.5,
        np.zeros(3),
        {"tool_calls": [{"name": "unknown_tool", "arguments": {}}]},
        {"name": "unknown_tool", "arguments": {}},
        {"tool_calls": [{"name": "move", "arguments": 3}]},
        {"tool_calls": [{"name": "move", "arguments": ["up"]}]},
        {"tool_calls": [{"arguments": {}}]},
        {"tool_calls": "move"},
        {"tool_calls": [], "extra": 1},
        {"message": 5},
        [{"name": "move"}, {"name": "unknown_tool"}],
    ],
)
def test_contains_rejects_malformed_actions(action: Any) -> None:
    space = ToolCallSpace(TOOLS, TERMINAL)
    assert not space.contains(action)


def test_set_tools_replaces_the_tools() -> None:
    space = ToolCallSpace(TOOLS[:1], seed=0)
    assert space.tools == (TOOLS[0],)
    assert not space.contains({"name": "search"})
    space.set_tools([TOOLS[1]], TERMINAL)
    assert space.tools == (TOOLS[1],) and space.terminal_tool == TERMINAL
    assert space.contains({"name": "search"}) and space.contains({"name": "answer"})
    assert not space.contains({"name": "move"})
    samples = [space.sample() for _ in range(20)]
    assert {a["tool_calls"][0]["name"] for a in samples if a["tool_calls"]} == {"search"}
    assert any(not a["tool_calls"] for a in samples)  # a plain message, for "answer"


def test_set_tools_accepts_dicts() -> None:
    space = ToolCallSpace([{"name": "ping"}], {"name": "done", "arg": None})
    assert space.tools == (ToolSpec(name="ping"),)
    assert {"name": "ping", "arguments": {}} in [
        call for _ in range(10) for call in space.sample()["tool_calls"]
    ]
    with pytest.raises(TypeError, match="ToolSpec"):
        ToolCallSpace(["ping"])  # type: ignore[list-item]


def test_unsampleable_schema_falls_back_to_empty_arguments(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = ToolSpec(name="bad", input_schema={"type": "integer", "minimum": 2, "maximum": 1})
    scalar = ToolSpec(name="scalar", input_schema={"type": "string"})
    with caplog.at_level(logging.WARNING, logger="ors_gym"):
        space = ToolCallSpace([bad, scalar], seed=0)
    assert "'bad'" in caplog.text and "'scalar'" in caplog.text
    for _ in range(10):
        assert space.sample()["tool_calls"][0]["arguments"] == {}


def test_space_equality_and_repr() -> None:
    a = ToolCallSpace(TOOLS, TERMINAL)
    b = ToolCallSpace([t.model_copy() for t in TOOLS], TERMINAL.model_copy())
    assert a == b
    assert a != ToolCallSpace(TOOLS)
    assert a != ToolCallSpace(TOOLS, TerminalToolSpec(name="answer", arg=None))
    assert a != ToolCallSpace(TOOLS[:2], TERMINAL)
    assert a != ToolCallSpace(TOOLS, TERMINAL, max_calls=2)
    changed = [_spec("move", Search), *TOOLS[1:]]
    assert a != ToolCallSpace(changed, TERMINAL)
    assert a != AnyText()
    assert "move" in repr(a) and "answer" in repr(a)
    assert not a.is_np_flattenable


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_pickle_and_deepcopy_keep_space_and_rng(how: str) -> None:
    space = ToolCallSpace(TOOLS, TERMINAL, max_calls=2, seed=5)
    space.sample()
    clone = pickle.loads(pickle.dumps(space)) if how == "pickle" else copy.deepcopy(space)
    assert clone == space
    assert [clone.sample() for _ in range(10)] == [space.sample() for _ in range(10)]


def test_batch_space_for_vector_envs() -> None:
    space = ToolCallSpace(TOOLS, TERMINAL, seed=0)
    batched = batch_space(space, 3)
    assert isinstance(batched, Tuple) and len(batched) == 3
    actions = batched.sample()
    assert len(actions) == 3 and all(space.contains(a) for a in actions)


def test_jsonable_round_trip() -> None:
    space = ToolCallSpace(TOOLS, TERMINAL, seed=0)
    batch = [space.sample() for _ in range(5)] + ["plain text"]
    encoded = json.loads(json.dumps(space.to_jsonable(batch)))
    assert space.from_jsonable(encoded) == batch


# ---------------------------------------------------------- SDK tool schemas


class SdkEnv(Environment):
    """A real SDK environment: its tool discovery generates the specs under test."""

    @tool
    async def move(self, params: Move) -> ToolOutput:
        """Move."""
        return ToolOutput(blocks=[])

    @tool
    async def inspect(self, params: Everything) -> ToolOutput:
        """Inspect."""
        return ToolOutput(blocks=[])

    @terminal
    @tool
    async def answer(self, params: Answer) -> ToolOutput:
        """Answer."""
        return ToolOutput(blocks=[], finished=True)

    def get_prompt(self) -> list[Any]:
        return []

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [{}]


def test_sdk_generated_tool_specs() -> None:
    """Specs produced by the SDK's own tool discovery sample into valid inputs."""
    listed = SdkEnv.list_tools()
    tools = [ToolSpec.model_validate(t.model_dump()) for t in listed.tools]
    assert listed.terminal_tool is not None
    terminal_spec = TerminalToolSpec.model_validate(listed.terminal_tool.model_dump())
    space = ToolCallSpace(tools, terminal_spec, seed=0)
    assert {t.name for t in space.tools} == {"move", "inspect"}
    assert space.contains({"name": "answer", "arguments": {"answer": "x"}})
    for _ in range(200):
        for call in space.sample()["tool_calls"]:  # none: a plain message for the terminal tool
            MODEL_OF[call["name"]](**call["arguments"])  # exactly how the SDK validates input


# --------------------------------------------------------------------- AnyText


@given(st.text())
def test_any_text_accepts_any_unicode(text: str) -> None:
    assert AnyText().contains(text)


def test_any_text_and_image_basics() -> None:
    space = AnyText(max_length=5)
    assert space.contains("\U0001f600\x00\ud7ff中文")
    assert not space.contains("x" * 6)
    assert not space.contains(b"bytes") and not space.contains(3)
    assert space == AnyText(max_length=5) and space != AnyText(max_length=6)
    image = AnyImage(seed=0)
    assert image.contains(image.sample())
    assert not image.contains(np.zeros((2, 2), np.uint8))
