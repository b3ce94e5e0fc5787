"""Star and grid expansion (through psweep), hashes and ids that survive a restart."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import psweep as ps

from tests.sweep.conftest import FAKE, REPO, write_spec
from workloads.sweep.expand import expand, find
from workloads.sweep.spec import load_spec

SIX_BY_TEN = {
    "learning_rate": [float(v) for v in range(1, 11)],
    "style_weight": [float(v) for v in range(20, 30)],
    "tv_weight": [float(v) for v in range(30, 40)],
    "content_weight": [float(v) for v in range(40, 50)],
    "style_layer_weight_exp": [float(v) for v in range(50, 60)],
    "content_weight_blend": [v / 10 for v in range(10)],
}


def style_spec(tmp_path: Path, mode: str, vary: Mapping[str, object], **defaults: object) -> Path:
    return write_spec(
        tmp_path / f"{mode}.yaml", {"workload": "style", "mode": mode, "defaults": defaults,
                                    "vary": vary},
    )


def test_star_of_six_parameters_with_ten_values_is_sixty_runs(tmp_path: Path) -> None:
    # the centre lies off every scan here, so no run repeats: 6 x 10, not 10^6
    spec = load_spec(style_spec(tmp_path, "star", SIX_BY_TEN, learning_rate=100,
                                style_weight=100, tv_weight=100, content_weight=100,
                                style_layer_weight_exp=100, content_weight_blend=0.95))
    plan = expand(spec)
    assert len(plan) == 60
    assert [p.vary for p in plan[::10]] == list(SIX_BY_TEN)
    for pset in plan:  # one parameter off-centre, all others at the centre
        off = [k for k in SIX_BY_TEN if pset.params[k] != spec.center[k]]
        assert off == [pset.vary]


def test_star_runs_the_shared_centre_once(tmp_path: Path) -> None:
    spec = load_spec(style_spec(tmp_path, "star", {"learning_rate": [1, 10], "tv_weight": [100, 5]},
                                learning_rate=10, tv_weight=100))
    plan = expand(spec)
    assert len(plan) == 3  # (1,100) (10,100) (10,5): the centre (10,100) is in both scans
    assert len({p.pset_hash for p in plan}) == 3


def test_grid_is_the_full_product(tmp_path: Path) -> None:
    vary = {"learning_rate": [1, 3, 10], "tv_weight": [0, 100], "pooling": ["max", "avg"]}
    plan = expand(load_spec(style_spec(tmp_path, "grid", vary, width=64)))
    assert len(plan) == 12
    combos = {(p.params["learning_rate"], p.params["tv_weight"], p.params["pooling"]) for p in plan}
    assert len(combos) == 12
    assert all(p.params["width"] == 64 and p.vary is None for p in plan)


def test_the_seed_study_has_226_runs() -> None:
    plan = expand(load_spec(REPO / "examples" / "style_study.yaml"))
    assert len(plan) == 226  # 227 in the seed's list; lr 10 and style scale 1 share the centre


def test_hashes_are_psweeps_and_stable_across_spellings(tmp_path: Path) -> None:
    a = expand(load_spec(style_spec(tmp_path, "star", {"learning_rate": [10, "1e-3"]})))
    b_path = tmp_path / "b"
    b_path.mkdir()
    b = expand(load_spec(style_spec(b_path, "star", {"learning_rate": [10.0, 0.001]})))
    assert [p.pset_hash for p in a] == [p.pset_hash for p in b]
    assert [p.pset_id for p in a] == [p.pset_id for p in b]  # same run directory after a restart
    for pset in a:
        assert pset.pset_hash == ps.pset_hash(pset.params)


def test_find_by_index_id_or_hash(tmp_path: Path) -> None:
    plan = expand(load_spec(write_spec(tmp_path / "s.yaml", f"workload: {FAKE}\n"
                                       "vary: {value: [1, 2, 3]}\n")))
    assert find(plan, "2") is plan[2]
    assert find(plan, plan[1].pset_id) is plan[1]
    assert find(plan, plan[0].pset_hash) is plan[0]
