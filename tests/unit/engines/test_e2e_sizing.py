"""tests/e2e/sizing.py replays the gate's own sampled test: the figures the sampled e2e tests' docstrings quote."""

from __future__ import annotations

from tests.e2e import sizing


def test_json_cells_nest_the_schema_in_valid_json() -> None:
    parse, schema = sizing.json_cells([(3, 1), (0, 2)], 4, [(0.5, 0.25), (0.0, 0.0)])
    assert parse.baseline == [1.0, 0.5] and schema.baseline == [0.75, 0.0]
    assert parse.candidate == [0.75, 0.0] and schema.candidate == [0.5, 0.0]


def test_a_total_loss_is_found_at_the_first_look_and_rounds_stop_there() -> None:
    cells = sizing.json_cells([(16, 0)] * 16, 20, [(0.0, 0.0)] * 16)
    draws = sizing.simulate(cells, budget=10, trials=5)
    assert all(d.decision == {"json_parse": "drop", "json_schema": "drop"} and d.samples == 2 for d in draws)
    assert all(d.p_holm["json_parse"] < 1e-4 for d in draws)


def test_a_fixed_design_takes_every_sample_in_one_look_and_a_faithful_candidate_shows_nothing() -> None:
    rates = [(12, 3)] * 16
    cells = sizing.json_cells(rates, 20, [(0.6, 0.15)] * 16)
    draws = sizing.simulate(cells, budget=6, trials=5, fixed=True)
    assert all(d.samples == 6 for d in draws)
    assert not any(sizing.strong_evidence(d) for d in draws)
