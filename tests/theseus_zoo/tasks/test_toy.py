"""`theseus compress` on the toy recipe: outputs, export, resume, bad input."""

import json

import pytest
import torch

from theseus_core.testing import ToyStack
from theseus_zoo import cli
from theseus_zoo.recipes import Phase
from theseus_zoo.tasks import toy

TINY = {
    "predecessor": {"steps": 30, "eval_every": 10},
    "replacing": {"steps": 40, "eval_every": 10},
    "steps_to_one": 20,
    "patience": None,
}


def compress(tmp_path, out="run", *extra):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    args = ["compress", "--recipe", "toy", "--config", str(config), "--out", str(tmp_path / out), "--no-progress"]
    return cli.main([*args, *extra])


def test_recipes_lists_the_toy_recipe(capsys):
    assert cli.main(["recipes"]) == 0
    assert "toy" in capsys.readouterr().out


def test_compress_writes_report_plot_metrics_and_an_ordinary_model(tmp_path, capsys):
    assert compress(tmp_path) == 0
    out = tmp_path / "run"
    report = json.loads((out / "report.json").read_text())
    baselines = {"baseline:truncated", "baseline:scratch", "baseline:kd"}
    assert set(report["models"]) == {"predecessor", "theseus", *baselines}
    assert report["models"]["theseus"]["parameters"] < report["models"]["predecessor"]["parameters"]
    assert {report["models"][name]["parameters"] for name in baselines} == {report["models"]["theseus"]["parameters"]}
    assert {name for name in report["phases"]} == {"predecessor", "replacing", *baselines}
    assert report["speedup"] > 0 and (out / "curves.png").stat().st_size > 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["phase"] == "replacing"] == list(range(1, 41))
    rates = [r["rate"] for r in records if r["phase"] == "replacing"]
    assert rates == sorted(rates) and rates[0] == pytest.approx(0.3) and rates[-1] == 1.0
    model = ToyStack(**json.loads((out / "model" / "config.json").read_text()))
    model.load_state_dict(torch.load(out / "model" / "model.pt"), strict=True)
    assert len(model.blocks) == 3
    accuracy = toy.ToyTask({}, 0).evaluate(model, "test")["accuracy"]
    assert accuracy == report["models"]["theseus"]["test"]["accuracy"]
    assert "| theseus |" in capsys.readouterr().out


def test_an_export_gives_its_files_one_mode_and_refuses_what_does_not_reload(tmp_path):
    from theseus_zoo.tasks.exported import ExportRefusedError, file_mode

    task = toy.ToyTask({}, 0)
    torch.manual_seed(0)
    model = ToyStack(**task.config(3))
    files = task.export(model, tmp_path / "model")
    assert {path.stat().st_mode & 0o777 for path in files} == {file_mode()}
    (tmp_path / "model" / "model.pt").chmod(0o600)  # as safetensors writes it
    files = task.export(model, tmp_path / "model")
    assert {path.stat().st_mode & 0o777 for path in files} == {file_mode()}
    unsaved = ToyStack(**task.config(3))
    unsaved.blocks[0].norm.eps = 1.0  # changes the outputs; no file records it
    extra = ToyStack(**task.config(3))
    extra.register_buffer("stray", torch.zeros(1))  # a key ToyStack(**config) does not have
    for broken, cause in ((unsaved, r"outputs differ .* by up to"), (extra, r"Unexpected key\(s\).*stray")):
        with pytest.raises(ExportRefusedError, match=rf"^export refused: .*{cause}.*files were removed$") as refused:
            task.export(broken, tmp_path / "broken")
        assert "\n" not in str(refused.value) and not list((tmp_path / "broken").iterdir())


def test_a_resumed_run_ends_exactly_where_an_uninterrupted_one_does(tmp_path, monkeypatch):
    assert compress(tmp_path, "whole") == 0
    original_criterion = toy.ToyTask.criterion
    calls = {"n": 0}

    def crash_once(self, logits, batch):  # Ctrl-C in the middle of the replacing phase (step 25 of 40)
        calls["n"] += 1
        if calls["n"] == 30 + 25:
            raise KeyboardInterrupt
        return original_criterion(self, logits, batch)

    monkeypatch.setattr(toy.ToyTask, "criterion", crash_once)
    assert compress(tmp_path, "crashed") == 130
    monkeypatch.setattr(toy.ToyTask, "criterion", original_criterion)
    assert (tmp_path / "crashed" / "checkpoint.pt").exists() and not (tmp_path / "crashed" / "report.json").exists()
    assert compress(tmp_path, "crashed", "--resume") == 0
    whole = json.loads((tmp_path / "whole" / "report.json").read_text())
    resumed = json.loads((tmp_path / "crashed" / "report.json").read_text())
    assert resumed["models"] == whole["models"]  # test metrics, parameters, size on disk

    def without_seconds(phases):  # wall-clock differs; everything else must not
        return {name: {k: v for k, v in phase.items() if k != "seconds"} for name, phase in phases.items()}

    assert without_seconds(resumed["phases"]) == without_seconds(whole["phases"])  # best dev metric and step
    metrics = {run: (tmp_path / run / "metrics.jsonl").read_text() for run in ("whole", "crashed")}
    assert metrics["crashed"] == metrics["whole"]  # same losses, rates and dev metrics, step by step, no duplicates


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compress", "--recipe", "nope"], "unknown recipe 'nope'"),
        (["compress", "--recipe", "toy", "--resume"], "no checkpoint.pt"),
        (["compress", "--recipe", "toy", "--config", "missing.json"], "does not exist"),
        (["compress", "--recipe", "toy", "--steps-to-one", "5000"], "steps_to_one must be"),
    ],
)
def test_bad_input_fails_in_one_line_before_training(args, message, tmp_path, capsys):
    assert cli.main([*args, "--out", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_bad_family_options_fail_before_training(tmp_path, capsys):
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"options": {"num_layers": 8}}))
    assert cli.main(["compress", "--recipe", "toy", "--config", str(config), "--out", str(tmp_path / "run")]) == 2
    assert "num_layers must be in [1, num_blocks=8)" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_resuming_with_another_recipe_is_refused(tmp_path, capsys):
    assert compress(tmp_path) == 0
    assert compress(tmp_path, "run", "--resume", "--seed", "7") == 2
    assert "used another recipe (seed: 0 in the run, 7 given now)" in capsys.readouterr().err  # names what differs


def test_an_existing_run_is_not_overwritten(tmp_path, capsys):
    assert compress(tmp_path) == 0
    assert compress(tmp_path) == 2
    assert "pass --resume" in capsys.readouterr().err


def test_phase_validation():
    with pytest.raises(ValueError, match="steps"):
        Phase(steps=0, lr=1e-3)
    with pytest.raises(ValueError, match="lr"):
        Phase(steps=1, lr=-1)


def test_the_kd_loss_is_the_task_loss_plus_the_tempered_divergence_from_the_teacher(tmp_path):
    from theseus_zoo.recipes import get_recipe
    from theseus_zoo.training.methods import Context, distillation_loss

    task = toy.ToyTask({}, 0)
    batch = task.collate(task.dataset("train")[:16])
    teacher, student = task.build_predecessor().eval(), task.scratch().eval()  # no dropout noise
    for alpha, temperature in [(1.0, 2.0), (0.0, 1.0), (0.3, 4.0)]:
        recipe = get_recipe("toy").with_overrides({"kd_alpha": alpha, "kd_temperature": temperature})
        loss, logits = distillation_loss(Context(task, recipe, teacher), alpha)(student, batch)
        soft = torch.nn.functional.kl_div(
            torch.log_softmax(student(batch[0]) / temperature, -1),
            torch.softmax(teacher(batch[0]) / temperature, -1),
            reduction="batchmean",
        )
        expected = alpha * task.criterion(student(batch[0]), batch) + (1 - alpha) * temperature**2 * soft
        torch.testing.assert_close(loss, expected)
        torch.testing.assert_close(logits, student(batch[0]))
    recipe = get_recipe("toy").with_overrides({"kd_alpha": 0.0})
    same, _ = distillation_loss(Context(task, recipe, teacher), 0.0)(teacher, batch)
    assert same.abs().item() < 1e-6  # a student that matches its teacher has nothing left to learn


def test_kd_runs_the_student_forward_once_per_step(tmp_path):
    from theseus_zoo.recipes import get_recipe
    from theseus_zoo.training.methods import Context, distillation_loss
    from theseus_zoo.training.run import Run

    run = Run(get_recipe("toy"), tmp_path / "kd", progress=False)
    batch = run.task.collate(run.task.dataset("train")[:16])
    teacher, student = run.task.build_predecessor(), run.task.scratch()
    calls = {"student": 0, "teacher": 0}
    logits = run.task.logits

    def counting(model, batch):
        calls["student" if model is student else "teacher"] += 1
        return logits(model, batch)

    run.task.logits = counting
    distillation_loss(Context(run.task, run.recipe, teacher), 0.5)(student, batch)
    assert calls == {"student": 1, "teacher": 1}


def test_metrics_go_to_tensorboard_when_it_is_installed(tmp_path, monkeypatch):
    from theseus_zoo.training import metrics_log

    class Writer:  # records what a SummaryWriter would be given
        def __init__(self):
            self.scalars, self.closed = [], False

        def add_scalar(self, tag, value, step):
            self.scalars.append((tag, value, step))

        def close(self):
            self.closed = True

    writer = Writer()
    monkeypatch.setattr(metrics_log, "_tensorboard_writer", lambda directory: writer)
    assert compress(tmp_path) == 0
    tags = {tag for tag, _, _ in writer.scalars}
    assert {"predecessor/loss", "predecessor/dev_accuracy", "replacing/rate", "baseline:kd/loss"} <= tags
    rates = [value for tag, value, _ in writer.scalars if tag == "replacing/rate"]
    assert len(rates) == TINY["replacing"]["steps"] and rates[-1] == 1.0 and writer.closed
