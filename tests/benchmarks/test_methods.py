"""`benchmarks.methods`: each method at the rate its dev metric chose, paired per seed against the others."""

import json

import numpy
import pytest

from benchmarks import methods


def write_run(root, lr, seed, dev, test):
    """A finished run of methods theseus+warmup, kd with the given dev / test metrics per model."""
    out = root / f"lr{lr}" / f"seed{seed}"
    out.mkdir(parents=True)
    report = {
        "recipe": {"methods": ["theseus+warmup", "kd"]},
        "metric": "accuracy",
        "models": {name: {"test": {"accuracy": value}} for name, value in test.items()},
        "speedup": 1.0,
        "phases": {
            "warmup": {"best_metric": 0.0, "seconds": 1.0},
            "replacing": {"best_metric": dev["theseus"], "seconds": 3.0},
            "baseline:kd": {"best_metric": dev["baseline:kd"], "seconds": 6.0},
        },
    }
    (out / "report.json").write_text(json.dumps(report))


def edit_report(root, setting, seed, change):
    """Applies ``change`` to the parsed report of the run at ``root/lr<setting>/seed<seed>`` and writes it back."""
    path = root / f"lr{setting}" / f"seed{seed}" / "report.json"
    report = json.loads(path.read_text())
    change(report)
    path.write_text(json.dumps(report))


def test_each_method_takes_the_rate_its_dev_metric_chose_and_pairs_per_seed(tmp_path):
    for seed in range(3):
        # Theseus is best on dev at 1e-3, KD at 1e-2; tests differ so a wrong choice shows.
        write_run(
            tmp_path,
            "1e-3",
            seed,
            {"theseus": 0.9, "baseline:kd": 0.5},
            {"theseus": 0.80 + seed / 100, "baseline:kd": 0.10, "predecessor": 0.9},
        )
        write_run(
            tmp_path,
            "1e-2",
            seed,
            {"theseus": 0.1, "baseline:kd": 0.8},
            {"theseus": 0.20, "baseline:kd": 0.70 + seed / 100, "predecessor": 0.9},
        )
    summary = methods.summarize(methods.collect(tmp_path))
    theseus, kd = summary["methods"]["theseus"], summary["methods"]["baseline:kd"]
    assert (theseus["method"], theseus["setting"], kd["method"], kd["setting"]) == (
        "theseus+warmup",
        "1e-3",
        "kd",
        "1e-2",
    )
    assert theseus["median_seconds"] == 4.0 and kd["seconds_ratio_to_theseus"] == pytest.approx(1.5)
    headline = summary["headline"]
    assert headline["per_seed"] == pytest.approx([10.0, 10.0, 10.0]) and headline["mean"] == pytest.approx(10.0)
    assert headline["seed_interval"] == pytest.approx([10.0, 10.0]) and methods.verdict(headline) == "ahead"
    assert methods.verdict({"per_seed": [1.0], "mean": 1.0}) == "one seed: no verdict"
    same_setting = summary["at_each_setting"]  # the two side by side at each rate, whatever dev chose
    assert same_setting["1e-3"]["per_seed"] == pytest.approx([70.0, 71.0, 72.0])
    assert same_setting["1e-2"]["per_seed"] == pytest.approx([-50.0, -51.0, -52.0])


def test_no_finished_run_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="no finished runs"):
        methods.collect(tmp_path)


def write_matched(root, seed, test, predecessor_predictions=[0, 1]):  # noqa: B006 (never changed)
    """A finished compute-matched run: truncated fine-tuning for 10 steps on the seed's predecessor."""
    out = root / f"seed{seed}"
    out.mkdir(parents=True)
    report = {
        "recipe": {"methods": ["truncated"]},
        "metric": "accuracy",
        "models": {
            "predecessor": {"test": {"accuracy": 0.9}, "test_predictions": predecessor_predictions},
            "baseline:truncated": {"test": {"accuracy": test}},
        },
        "speedup": 1.0,
        "phases": {"baseline:truncated": {"best_metric": 0.5, "seconds": 4.0, "steps": 10}},
    }
    (out / "report.json").write_text(json.dumps(report))


def test_compute_matched_runs_pair_with_the_best_variant_on_the_same_predecessor(tmp_path):
    for seed in range(3):
        write_run(
            tmp_path / "grid",
            "1e-3",
            seed,
            {"theseus": 0.9, "baseline:kd": 0.5},
            {"theseus": 0.80 + seed / 100, "baseline:kd": 0.10, "predecessor": 0.9},
        )
        edit_report(
            tmp_path / "grid", "1e-3", seed, lambda r: r["models"]["predecessor"].update(test_predictions=[0, 1])
        )
        write_matched(tmp_path / "matched", seed, 0.75)
    grid = methods.collect(tmp_path / "grid")
    summary = methods.summarize(grid, [methods.collect_matched(tmp_path / "matched")])
    entry = summary["compute_matched"]["truncated, 10 steps"]
    assert entry["comparison"]["per_seed"] == pytest.approx([5.0, 6.0, 7.0])
    assert entry["median_seconds"] == 4.0
    assert "theseus+warmup − truncated, 10 steps" in methods.markdown(summary, "cell", "command")

    write_matched(tmp_path / "other", 0, 0.75, predecessor_predictions=[1, 1])
    with pytest.raises(
        SystemExit, match="seed 0: the runs at setting 1e-3 and compute-matched have different predecessors"
    ):
        methods.summarize(grid, [methods.collect_matched(tmp_path / "other")])
    write_matched(tmp_path / "blind", 0, 0.75, predecessor_predictions=None)
    with pytest.raises(SystemExit, match="seed 0: the run at compute-matched keeps no predecessor predictions"):
        methods.summarize(grid, [methods.collect_matched(tmp_path / "blind")])


def test_runs_whose_theseus_is_another_variant_are_not_pooled(tmp_path):
    for lr in ("1e-3", "3e-4"):
        write_run(tmp_path, lr, 0, {"theseus": 0.9, "baseline:kd": 0.5}, {"theseus": 0.8, "baseline:kd": 0.7})
    edit_report(tmp_path, "3e-4", 0, lambda r: r["recipe"].update(methods=None))  # the paper's Theseus
    with pytest.raises(SystemExit, match="'theseus' is theseus\\+warmup at 1e-3 but theseus at 3e-4"):
        methods.summarize(methods.collect(tmp_path))


def test_seed_runs_without_a_grid_are_one_grid_point_at_the_recipes_rate(tmp_path):
    for seed in range(2):
        write_run(tmp_path / "grid", "1e-3", seed, {"theseus": 0.9, "baseline:kd": 0.5}, {"theseus": 0.8})
        report = json.loads((tmp_path / "grid" / "lr1e-3" / f"seed{seed}" / "report.json").read_text())
        report["recipe"]["replacing"] = {"lr": 3e-4}
        (tmp_path / "flat" / f"seed{seed}").mkdir(parents=True)
        (tmp_path / "flat" / f"seed{seed}" / "report.json").write_text(json.dumps(report))
    grid = methods.collect(tmp_path / "flat")
    assert list(grid) == ["0.0003"] and sorted(grid["0.0003"]) == [0, 1]


def test_a_schedule_point_run_without_baselines_is_a_setting_for_the_theseus_variants_alone(tmp_path):
    for seed in range(3):
        write_run(
            tmp_path,
            "1e-3",
            seed,
            {"theseus": 0.6, "baseline:kd": 0.5},
            {"theseus": 0.60, "baseline:kd": 0.50 + seed / 100, "predecessor": 0.9},
        )
        write_run(  # b = 0.1, p = 1 at step 50: Theseus alone, better on dev
            tmp_path, "1e-3-b0.1-one50", seed, {"theseus": 0.7, "baseline:kd": 0.0}, {"theseus": 0.75}
        )
        edit_report(tmp_path, "1e-3-b0.1-one50", seed, lambda r: r["phases"].pop("baseline:kd"))
    summary = methods.summarize(methods.collect(tmp_path))
    theseus, kd = summary["methods"]["theseus"], summary["methods"]["baseline:kd"]
    assert theseus["setting"] == "1e-3-b0.1-one50" and list(kd["dev_by_setting"]) == ["1e-3"]
    assert summary["headline"]["per_seed"] == pytest.approx([25.0, 24.0, 23.0])


def test_a_tie_on_dev_up_to_summation_order_goes_to_the_first_setting_in_directory_order(tmp_path):
    # 100 and 102 of 123 dev nodes, or 101 twice: the same mean, one float apart (5e-3's the larger)
    devs = {"1e-2": [100 / 123, 102 / 123], "5e-3": [101 / 123, 101 / 123]}
    for setting, values in devs.items():
        for seed, value in enumerate(values):
            dev, test = {"theseus": value, "baseline:kd": 0.5}, {"theseus": 0.5, "baseline:kd": 0.5}
            write_run(tmp_path, setting, seed, dev, test)
    assert methods.summarize(methods.collect(tmp_path))["methods"]["theseus"]["setting"] == "1e-2"


def test_a_tie_of_float32_scores_goes_to_the_first_setting_too(tmp_path):
    # 0.892 + 0.902 + 0.898 and 0.900 + 0.897 + 0.895 dev accuracy, as a run stores them (float32): 2e-8 apart
    devs = {"2.4e-3": [0.892, 0.902, 0.898], "4.8e-3": [0.900, 0.897, 0.895]}
    for setting, values in devs.items():
        for seed, value in enumerate(values):
            dev = {"theseus": float(numpy.float32(value)), "baseline:kd": 0.5}
            write_run(tmp_path, setting, seed, dev, {"theseus": 0.5, "baseline:kd": 0.5})
    dev = methods.summarize(methods.collect(tmp_path))["methods"]["theseus"]["dev_by_setting"]
    assert dev["2.4e-3"] != dev["4.8e-3"] and abs(dev["2.4e-3"] - dev["4.8e-3"]) < 1e-7
    for order in (["4.8e-3", "2.4e-3"], ["2.4e-3", "4.8e-3"]):  # whichever is read first wins
        grid = methods.collect(tmp_path)
        grid = {setting: grid[setting] for setting in order}
        assert methods.summarize(grid)["methods"]["theseus"]["setting"] == order[0]


def test_runs_of_one_seed_on_different_predecessors_are_refused_not_paired(tmp_path):
    for setting, predictions in (("1e-2", [0, 1]), ("5e-3", [1, 1])):
        write_run(tmp_path, setting, 0, {"theseus": 0.9, "baseline:kd": 0.5}, {"theseus": 0.8, "predecessor": 0.9})
        edit_report(
            tmp_path, setting, 0, lambda r, p=predictions: r["models"]["predecessor"].update(test_predictions=p)
        )
    with pytest.raises(SystemExit, match="seed 0: the runs at 1e-2 and 5e-3 have different predecessors"):
        methods.summarize(methods.collect(tmp_path))
