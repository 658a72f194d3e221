"""STRIPS planning over skills: optimal, fast, validated, explained."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxfst.runtime.planner import Plan, Unsolvable, alternatives, plan, validate_plan
from ctxfst.runtime.strips import Operator, Problem, from_skill_index

from .planner_catalogs import catalog, reference_bfs


def op(name, pre=(), add=(), delete=(), pre_not=(), cost=1.0):
    return Operator(name, frozenset(pre), frozenset(pre_not), frozenset(add),
                    frozenset(delete), float(cost))


def detour() -> Problem:
    """One costly step to the goal (10), or three cheap ones (1 each)."""
    return Problem([
        op("direct", ["s:start"], ["s:goal"], cost=10),
        op("a", ["s:start"], ["s:1"], cost=1),
        op("b", ["s:1"], ["s:2"], cost=1),
        op("c", ["s:2"], ["s:goal"], cost=1),
    ])


def test_cheapest_plan_wins_over_shortest():
    problem = detour()
    init, goal = frozenset({"s:start"}), frozenset({"s:goal"})
    for algorithm in ("astar", "ucs"):
        found = plan(problem, init, goal, algorithm)
        assert isinstance(found, Plan) and found.steps == ["a", "b", "c"] and found.cost == 3
    (other, why), = alternatives(problem, init, goal, plan(problem, init, goal))
    assert other.steps == ["direct"] and why == "costs 7 more with 2 fewer step(s)"


def test_negative_preconditions_and_deletes_are_respected():
    problem = Problem([
        op("lock", ["s:open"], ["s:locked"], delete=["s:open"]),
        op("enter", ["s:open"], ["s:inside"], pre_not=["s:locked"]),
        op("finish", ["s:inside", "s:locked"], ["s:done"]),
        op("unlock", ["s:locked"], ["s:open"], delete=["s:locked"]),
    ])
    found = plan(problem, frozenset({"s:open"}), frozenset({"s:done"}))
    assert isinstance(found, Plan) and found.steps == ["enter", "lock", "finish"]
    assert validate_plan(problem.operators, frozenset({"s:open"}), frozenset({"s:done"}),
                         found.steps).ok


def test_validator_rejects_bad_plans():
    problem = Problem([op("a", ["s:x"], ["s:y"]), op("b", ["s:y"], ["s:z"], pre_not=["s:x"])])
    init, goal = frozenset({"s:x"}), frozenset({"s:z"})
    check = validate_plan(problem.operators, init, goal, ["a", "b"])
    assert not check.ok and check.problems == ["step 2 (b): must not hold: s:x"]
    assert validate_plan(problem.operators, init, goal, ["b"]).problems == [
        "step 1 (b): missing s:y; must not hold: s:x"]
    assert validate_plan(problem.operators, init, goal, ["zzz"]).problems == [
        "step 1: no skill named 'zzz'"]
    assert validate_plan(problem.operators, init, goal, ["a"]).problems == [
        "goal not reached: s:z"]


def test_unsolvable_goals_are_explained():
    problem = Problem([op("a", ["s:seed"], ["s:mid"]), op("b", ["s:mid", "s:never"], ["s:goal"]),
                       op("x", ["s:p"], ["s:q"], delete=["s:p"]),
                       op("y", ["s:p"], ["s:r"], delete=["s:p"])])
    result = plan(problem, frozenset({"s:seed"}), frozenset({"s:goal"}))
    assert isinstance(result, Unsolvable) and result.unreachable == ["s:goal"]
    assert "it needs s:never, which no skill produces" in result.reason
    both = plan(problem, frozenset({"s:p"}), frozenset({"s:q", "s:r"}))
    assert isinstance(both, Unsolvable) and both.unreachable == []
    assert "not together" in both.reason
    # A precondition only its own skill produces: named, not left out as "produced".
    circular = Problem([op("refine", ["s:draft"], ["s:draft", "s:goal"]),
                        op("polish", ["s:draft", "s:seed"], ["s:draft"])])
    stuck = plan(circular, frozenset({"s:seed"}), frozenset({"s:goal"}))
    assert isinstance(stuck, Unsolvable)
    assert stuck.reason == ("no sequence of skills reaches s:goal: it needs s:draft, which "
                            "only polish and refine produce, needing it already")


def test_upstream_chain(tmp_path, capsys):
    import shutil

    from ctxfst.pipeline.runner import run_build

    from .conftest import UPSTREAM, make_project

    make_project(tmp_path)
    (tmp_path / "ctxfst.toml").write_text('embedding_model = "hash-32"\n')
    shutil.copytree(UPSTREAM / "skills", tmp_path / "skills", dirs_exist_ok=True)
    shutil.copy(UPSTREAM / "world-model-example.md", tmp_path / "content")
    assert run_build(tmp_path, []) == 0
    capsys.readouterr()
    index = json.loads((tmp_path / "build/skill-index.json").read_text())["skills"]
    problem = from_skill_index(index)
    found = plan(problem, frozenset({"entity:has-raw-resume"}),
                 frozenset({"entity:learn-kubernetes-path"}))
    assert found.steps == ["analyze-resume", "match-skills", "generate-plan"]
    assert found.cost == 6.0  # low 1 + medium 2 + high 3


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_astar_and_greedy_plans_are_valid_and_astar_is_optimal(seed):
    problem, init, goal = catalog(60, seed)
    best = plan(problem, init, goal, "ucs")
    for algorithm in ("astar", "greedy"):
        found = plan(problem, init, goal, algorithm)
        assert isinstance(found, Plan) == isinstance(best, Plan)
        if isinstance(found, Plan):
            check = validate_plan(problem.operators, init, goal, found.steps)
            assert check.ok and check.cost == found.cost
            if algorithm == "astar":
                assert found.cost == best.cost


def test_beats_the_reference_planner_on_cost_and_depth():
    problem = Problem([op(f"step-{i}", [f"s:{i}"], [f"s:{i + 1}"]) for i in range(8)]
                      + [op("costly", ["s:0"], ["s:8"], cost=50)])
    init, goal = frozenset({"s:0"}), frozenset({"s:8"})
    assert reference_bfs(problem, init, goal) == ["costly"]
    assert plan(problem, init, goal).steps == [f"step-{i}" for i in range(8)]
    deep = Problem([op(f"step-{i}", [f"s:{i}"], [f"s:{i + 1}"]) for i in range(8)])
    assert reference_bfs(deep, init, goal) is None  # stops at depth 5
    assert len(plan(deep, init, goal).steps) == 8


def test_unknown_algorithm():
    with pytest.raises(ValueError):
        plan(Problem([]), frozenset(), frozenset(), "dfs")


def test_a_depth_bound_keeps_the_cheapest_plan_within_it():
    problem = detour()
    init, goal = frozenset({"s:start"}), frozenset({"s:goal"})
    for algorithm in ("astar", "ucs", "greedy"):
        for depth, steps in ((1, ["direct"]), (2, ["direct"]), (3, ["a", "b", "c"])):
            found = plan(problem, init, goal, algorithm, max_depth=depth)
            assert isinstance(found, Plan) and len(found.steps) <= depth, (algorithm, depth)
            if algorithm != "greedy":
                assert found.steps == steps, (algorithm, depth)
    chain = Problem([operator for operator in problem.operators if operator.name != "direct"])
    short = plan(chain, init, goal, "astar", max_depth=2)
    assert isinstance(short, Unsolvable)
    assert short.reason == "no plan of at most 2 step(s); the cheapest takes 3 (a -> b -> c)"


def test_a_state_reached_cheaply_but_deep_does_not_hide_a_shallow_way():
    """With a bound the search's nodes are (state, depth): p is first reached at cost 3
    three steps deep; the costlier one-step way to p is what a two-step plan needs."""
    problem = Problem([
        op("x1", ["s:start"], ["s:m"]), op("x2", ["s:m"], ["s:n"]), op("x3", ["s:n"], ["s:p"]),
        op("y", ["s:start"], ["s:p"], cost=5), op("z", ["s:p"], ["s:goal"]),
    ])
    init, goal = frozenset({"s:start"}), frozenset({"s:goal"})
    assert plan(problem, init, goal, "ucs").steps == ["x1", "x2", "x3", "z"]
    for algorithm in ("astar", "ucs"):
        found = plan(problem, init, goal, algorithm, max_depth=2)
        assert isinstance(found, Plan) and found.steps == ["y", "z"] and found.cost == 6


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 6))
def test_bounded_astar_is_the_cheapest_within_the_bound(seed, depth):
    problem, init, goal = catalog(40, seed)
    bounded = plan(problem, init, goal, "astar", max_depth=depth)
    uniform = plan(problem, init, goal, "ucs", max_depth=depth)
    assert isinstance(bounded, Plan) == isinstance(uniform, Plan)
    if isinstance(bounded, Plan):
        assert len(bounded.steps) <= depth and bounded.cost == uniform.cost
        assert validate_plan(problem.operators, init, goal, bounded.steps).ok
    unbounded = plan(problem, init, goal, "astar")
    if isinstance(unbounded, Plan) and len(unbounded.steps) <= depth:
        assert isinstance(bounded, Plan) and bounded.cost == unbounded.cost
