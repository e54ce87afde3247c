"""`benchmarks.llm` on a tiny random Llama: every start and baseline measured once, a run's export added, and
``--resume`` keeping what was measured."""

import json

import pytest

from benchmarks import llm
from tests.theseus_zoo.tasks.test_causal_lm import compress, corpus, options, tiny_model  # noqa: F401 - fixtures


def test_every_model_is_measured_once_and_resume_keeps_them(tiny_model, corpus, tmp_path, monkeypatch):  # noqa: F811
    tiny = options(tiny_model, corpus)
    args = ["--layers", "2", "--calibration", "4", "--streamline-steps", "2", "--new-tokens", "2", "--threads", "1"]
    args += ["--options", json.dumps(tiny), "--out", str(tmp_path / "out"), "--name", "tiny"]
    llm.main(args)
    first = json.loads((tmp_path / "out" / "tiny.json").read_text())
    assert list(first["models"]) == [
        "predecessor",
        "start: init=first (untrained)",
        "start: init=every_other (untrained)",
        "start: init=group_last (untrained)",
        "ShortGPT (untrained)",
        "LLM-Streamline (MSE stage only)",
    ]
    assert first["models"]["predecessor"]["layers"] == 4 and first["models"]["ShortGPT (untrained)"]["layers"] == 2
    assert len(first["models"]["ShortGPT (untrained)"]["kept"]) == 2

    assert compress(tmp_path, {"options": tiny, "baselines": []}) == 0
    measured = []
    real = llm.measure
    monkeypatch.setattr(llm, "measure", lambda task, model, *rest: measured.append(model) or real(task, model, *rest))
    llm.main([*args, "--resume", "--runs", str(tmp_path / "run")])
    second = json.loads((tmp_path / "out" / "tiny.json").read_text())
    assert len(measured) == 1  # only the run's export is new
    assert second["models"]["run: exported successor"]["layers"] == 2
    assert all(second["models"][name] == entry for name, entry in first["models"].items())
    assert "theseus" in second["runs"][str(tmp_path / "run")]
    with pytest.raises(SystemExit, match="other settings"):
        llm.main([*(a if a != "2" else "3" for a in args[:2]), *args[2:], "--resume"])
