"""``ors_gym.catalog.Catalog`` over a small in-memory backend: what it asks, caches and answers.

``Shelf`` implements the discovery half of the ``AsyncBackend`` protocol from
plain dicts and counts every question, so each test can check that a catalog
asks once, however many envs ask it at the same time.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import numpy as np
import pytest

from ors_gym.catalog import Catalog, check_reset_options
from ors_gym.errors import OrsProtocolError, OrsRequestError
from ors_gym.protocol import ListToolsOutput, Split, ToolSpec


class Shelf:
    """Environments as dicts: ``{name: {"tools": [...], "splits": {split: tasks or count}}}``.

    A split given as an int is index-only: ``tasks`` refuses it, ``task`` answers each.
    """

    location = "memory://shelf"

    def __init__(self, envs: dict[str, dict[str, Any]]) -> None:
        self.envs = envs
        self.asked: Counter[str] = Counter()

    async def _answer(self, what: str) -> None:
        self.asked[what] += 1
        await asyncio.sleep(0)  # a real backend waits: let concurrent askers pile up

    async def list_environments(self) -> list[str]:
        await self._answer("list_environments")
        return list(self.envs)

    async def tools(self, env_name: str) -> ListToolsOutput:
        await self._answer("tools")
        return ListToolsOutput(tools=[ToolSpec(name=n) for n in self.envs[env_name]["tools"]])

    async def splits(self, env_name: str) -> list[Split]:
        await self._answer("splits")
        return [Split(name=s) for s in self.envs[env_name]["splits"]]

    async def tasks(self, env_name: str, split: str) -> list[dict[str, Any]]:
        await self._answer("tasks")
        tasks = self.envs[env_name]["splits"][split]
        if isinstance(tasks, int):
            raise OrsRequestError("list_tasks is not supported", server=self.location)
        return [dict(t) for t in tasks]

    async def num_tasks(self, env_name: str, split: str) -> int:
        await self._answer("num_tasks")
        tasks = self.envs[env_name]["splits"][split]
        return tasks if isinstance(tasks, int) else len(tasks)

    async def task(self, env_name: str, split: str, index: int) -> dict[str, Any]:
        await self._answer("task")
        return {"split": split, "index": index}


MATH = {"math": {"tools": ["add", "answer"],
                 "splits": {"test": [{"q": "1+1"}], "train": [{"q": "2+2"}, {"q": "3+3"}]}}}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_concurrent_first_questions_ask_the_backend_once() -> None:
    shelf = Shelf(MATH)
    catalog = Catalog(shelf)

    async def many() -> list[Any]:
        return await asyncio.gather(*(catalog.tools() for _ in range(50)),
                                    *(catalog.num_tasks() for _ in range(50)))

    answers = run(many())
    assert [t.name for t in answers[0].tools] == ["add", "answer"]
    assert answers[50:] == [2] * 50  # the default split is train
    assert shelf.asked == {"list_environments": 1, "tools": 1, "splits": 1, "num_tasks": 1}
    assert catalog.known_name == "math" and catalog.known_split == "train"
    assert catalog.known_tools is answers[0]


@pytest.mark.parametrize(("splits", "given", "expected"), [
    ({"test": [], "train": []}, None, "train"),  # train where listed
    ({"dev": [], "test": []}, None, "dev"),  # else the first
    ({"dev": [], "test": []}, "test", "test"),  # the one given, without asking
])
def test_default_split(splits: dict[str, Any], given: str | None, expected: str) -> None:
    shelf = Shelf({"env": {"tools": ["t"], "splits": splits}})
    catalog = Catalog(shelf, "ENV", given)
    assert run(catalog.default_split()) == expected
    assert shelf.asked["splits"] == (0 if given else 1)
    assert shelf.asked["list_environments"] == 0  # the name was given (lower-cased)


@pytest.mark.parametrize(("envs", "call", "error", "match"), [
    ({}, "name", OrsProtocolError, "lists no environments"),
    ({"e": {"tools": [], "splits": {}}}, "default_split", OrsProtocolError, "no task splits"),
    (MATH, "task", OrsRequestError, r"task index 5 is out of range: split 'train' has 2"),
])
def test_refusals_name_what_is_missing(envs: dict[str, Any], call: str, error: type[Exception],
                                        match: str) -> None:
    catalog = Catalog(Shelf(envs))
    coro = catalog.task(5) if call == "task" else getattr(catalog, call)()
    with pytest.raises(error, match=match):
        run(coro)


def test_tasks_are_listed_once_per_split_and_handed_out_as_copies() -> None:
    shelf = Shelf(MATH)
    catalog = Catalog(shelf, "math")

    async def read() -> tuple[dict[str, Any], ...]:
        first = await catalog.task(0)
        first["q"] = "changed"
        return first, await catalog.task(0), await catalog.task(1), await catalog.task(0, "test")

    changed, again, second, test = run(read())
    assert (changed["q"], again["q"], second["q"], test["q"]) == ("changed", "2+2", "3+3", "1+1")
    assert shelf.asked["tasks"] == 2  # one list per split


def test_an_index_only_split_is_asked_task_by_task() -> None:
    shelf = Shelf({"big": {"tools": ["t"], "splits": {"train": 10**6}}})
    catalog = Catalog(shelf)

    async def read() -> list[dict[str, Any]]:
        return [await catalog.task(i) for i in (3, 7)]

    assert run(read()) == [{"split": "train", "index": 3}, {"split": "train", "index": 7}]
    assert shelf.asked["tasks"] == 1 and shelf.asked["task"] == 2


@pytest.mark.parametrize(("options", "expected"), [
    ({"task_spec": {"q": "9+9"}}, ({"q": "9+9"}, None, None)),
    ({"index": 1}, ({"q": "3+3"}, "train", 1)),
    ({"index": 0, "split": "test"}, ({"q": "1+1"}, "test", 0)),
])
def test_choose_task_from_options(options: dict[str, Any], expected: tuple[Any, ...]) -> None:
    catalog = Catalog(Shelf(MATH))
    assert run(catalog.choose_task(options, np.random.default_rng(0))) == expected


def test_choose_task_draws_with_the_generator_given() -> None:
    catalog = Catalog(Shelf(MATH))

    def draws(seed: int) -> list[int | None]:
        rng = np.random.default_rng(seed)
        return [run(catalog.choose_task({}, rng))[2] for _ in range(20)]

    assert draws(3) == draws(3)
    assert set(draws(3)) == {0, 1}


def test_choose_task_refusals() -> None:
    catalog = Catalog(Shelf({"e": {"tools": ["t"], "splits": {"train": []}}}))
    rng = np.random.default_rng(0)
    with pytest.raises(OrsRequestError, match="split 'train' has no tasks"):
        run(catalog.choose_task({}, rng))
    with pytest.raises(TypeError, match="'task_spec' must be a dict"):
        run(catalog.choose_task({"task_spec": [1]}, rng))


def test_shared_gives_one_catalog_per_backend_name_and_split() -> None:
    one, other = Shelf(MATH), Shelf(MATH)
    assert Catalog.shared(one, "Math") is Catalog.shared(one, "math")
    assert Catalog.shared(one, "math") is not Catalog.shared(one, "math", "test")
    assert Catalog.shared(one, "math") is not Catalog.shared(other, "math")


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"seed": 1}, ValueError, r"unknown reset option\(s\) \['seed'\]"),
    ([("index", 1)], TypeError, "reset options must be a dict"),
])
def test_check_reset_options(options: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        check_reset_options(options)
    assert check_reset_options(None) == {}
    assert check_reset_options({"index": 2}) == {"index": 2}
