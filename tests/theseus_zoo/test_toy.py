"""The toy demo runs end to end (one epoch per phase)."""

from theseus_zoo import toy


def test_toy_demo_runs_end_to_end(capsys):
    results = toy.main(["--epochs", "1"])
    assert set(results) == {"predecessor", "theseus", "truncated", "speedup"}
    assert all(0.0 <= results[name] <= 1.0 for name in ("predecessor", "theseus", "truncated"))
    assert results["speedup"] > 0
    output = capsys.readouterr().out
    assert "| Theseus successor | 3 |" in output and "'blocks[0:3]': 3 × ToyBlock" in output
