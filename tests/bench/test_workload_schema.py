"""One workload schema: `servelab bench`'s options, a recipe's [bench] table and WorkloadSpec
share their names, defaults and validation (servelab.bench.spec)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import typer

from servelab.bench.spec import (
    FIELDS,
    RECIPE_DEFAULTS,
    RECIPE_KEYS,
    RECIPE_RENAMED,
    WorkloadSpec,
    option_default,
)
from servelab.cli.bench_cmd import bench
from servelab.errors import RecipeError
from servelab.serve.recipe import parse_recipe

MINIMAL = 'name = "r"\n[model]\nrepo = "a/b"\n'


def _options() -> dict[str, Any]:
    cmd = typer.main.get_command(_app())
    return {o: p for p in cmd.params if p.param_type_name == "option" for o in p.opts}


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(bench)
    return app


def test_every_field_is_a_workload_field_and_a_bench_option() -> None:
    names = {f.name for f in dataclasses.fields(WorkloadSpec)}
    assert set(FIELDS) <= names and set(RECIPE_KEYS) <= set(FIELDS)
    assert set(RECIPE_RENAMED.values()) <= set(RECIPE_KEYS)
    options = _options()
    for name, field in FIELDS.items():
        opt = options[field.flag]
        assert opt.help == field.help, name
        if name != "depths":  # "0": no depth grid
            assert opt.default == option_default(name), name


def test_a_recipe_reads_the_same_names_as_the_spec() -> None:
    w = parse_recipe(MINIMAL + "[bench]\nprompt_lens = [64, 128]\noutput_len = 8\n"
                     "concurrency = [2]\nrequests = 4\nmax_repeats = 3\nci_target = 0.1\n"
                     "warmup_requests = 0\nrequest_rates = [1.5]\nprofile = \"constant\"\n"
                     ).bench.workload()
    assert w == WorkloadSpec(prompt_lens=(64, 128), output_len=8, concurrency=(2,),
                             requests=4, max_repeats=3, ci_target=0.1, warmup_requests=0,
                             request_rates=(1.5,), profile="constant")
    # nothing given: the recipe's defaults (a verification run, not a study)
    d = parse_recipe(MINIMAL).bench.workload()
    assert {k: getattr(d, k) for k in RECIPE_DEFAULTS} == dict(RECIPE_DEFAULTS)


def test_earlier_recipe_names_still_read_with_their_units() -> None:
    old = parse_recipe(MINIMAL + "[bench]\nprompt_tokens = [64]\noutput_tokens = 8\n"
                       "repetitions = 3\nmax_repetitions = 10\nci_target_pct = 10.0\n"
                       "warmup = 2\narrival_profile = \"gamma\"\n").bench.workload()
    # 10 requests in all at 3 a batch: 4 batches; 10 % is a fraction of 0.1
    assert (old.prompt_lens, old.output_len, old.requests, old.max_repeats, old.ci_target,
            old.warmup_requests, old.profile) == ((64,), 8, 3, 4, pytest.approx(0.1), 2,
                                                  "gamma")
    # repetitions alone kept the earlier 10-requests budget
    assert parse_recipe(MINIMAL + "[bench]\nrepetitions = 5\n").bench.workload().max_repeats == 2


@pytest.mark.parametrize(("table", "words"), [
    ("prompt_lens = [64]\nprompt_tokens = [32]\n", "give prompt_lens or its earlier name"),
    ("repetitions = 5\nmax_repetitions = 2\n", "max_repetitions must be >= repetitions"),
    ("concurrency = [0]\n", "bench.concurrency: Value error, concurrency must be >= 1"),
    ("ci_target_pct = 150.0\n", "bench.ci_target_pct: Value error, CI target"),
    ("profile = \"ramp\"\n", "bench.profile"),
    ("prompt_len = [64]\n", "bench.prompt_len: unknown key"),
])
def test_a_bad_bench_table_names_the_key(table: str, words: str, tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as err:
        parse_recipe(MINIMAL + "[bench]\n" + table, source=tmp_path / "r.toml")
    assert words in str(err.value) and "r.toml" in str(err.value)
