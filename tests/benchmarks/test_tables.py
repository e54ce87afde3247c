"""The results tables of the README and docs/ are generated from committed JSON (`benchmarks.tables`), the At a glance
rows carry verdicts from tests, and no page speaks of a tie without an ``equivalent`` row behind it."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks import tables
from theseus_zoo.training import stats

TIE_WORDS = re.compile(r"(?<![-\w])(tie|ties|tied|level)(?![-\w])", re.IGNORECASE)
BACKED_BY_EQUIVALENT: dict[str, tuple[str, str]] = {}
"""Sentences (a distinctive part of them) that may say "tie" or "level", each with the At a glance row (setting,
alternative) whose ``equivalent`` verdict backs it. Empty: the pages say "equivalent" where a row is."""


def test_every_generated_table_and_at_a_glance_json_match_their_json():
    """What ``python -m benchmarks.tables --check`` checks, in CI: each page's generated tables, every table declared
    generated or not, ``at-a-glance.json``, and the ``benchmarks/results`` tables that render from their JSON."""
    assert tables.differences() == []


def test_the_check_names_a_table_edited_by_hand_and_a_table_declared_nowhere():
    page = (tables.ROOT / "docs" / "results" / "index.md").read_text()
    body = tables.tables_of(page)["at-a-glance"]
    edited = page.replace(body, body.replace("| ", "| edited by hand ", 1))
    assert edited != page
    assert tables.tables_of(tables.render(edited))["at-a-glance"] != tables.tables_of(edited)["at-a-glance"]
    assert tables.tables_of(tables.render(edited)) == tables.tables_of(page)
    assert tables.undeclared_tables("text\n\n| a | b |\n|---|---|\n| 1 | 2 |\n") == [3]
    with pytest.raises(KeyError, match="no table named"):
        tables.render("<!-- table: nothing-like-it -->\n\n<!-- /table -->\n")


def test_a_marker_the_pages_do_not_read_is_named():
    read = "<!-- table: a-1.5_b -->\n| x |\n<!-- /table -->\n"
    assert tables.unread_markers(read) == []
    assert tables.unread_markers("text\n<!-- table: a b -->\n\n<!-- /table -->\n") == [2]  # a space in the name
    assert tables.unread_markers(read + "<!-- table: open -->\n| y |\n") == [4]  # no end
    assert tables.unread_markers("<!-- table: open -->\n| y |\n" + read) == [1]  # no end, before a whole block
    assert list(tables.tables_of("<!-- table: open -->\n| y |\n" + read)) == ["a-1.5_b"]
    assert all(tables.unread_markers(page.read_text()) == [] for page in tables.pages())


def test_at_a_glance_has_a_row_per_setting_and_every_verdict_from_its_test():
    rows = json.loads(tables.AT_A_GLANCE.read_text())
    assert {row["setting"] for row in rows} == {setting.setting for setting in tables.SETTINGS}
    fields = {"setting", "family", "seeds", "variant", "alternative", "difference", "seed_interval", "verdict"}
    for row in rows:
        assert fields <= set(row), row
        assert row["seeds"] == len(row["per_seed"])
        if row["seeds"] < stats.SEED_VERDICT_MINIMUM:
            assert row["verdict"] is None and row["seed_interval"] is None
            continue
        assert row["verdict"] in stats.VERDICTS
        if row["verdict"] == "equivalent":
            assert row["unit"] == "points" and row["equivalence_margin"] == stats.EQUIVALENCE_MARGIN
            assert stats.tost(row["per_seed"], stats.EQUIVALENCE_MARGIN)["equivalent"]
        else:
            assert "equivalence_margin" not in row
        if row["unit"] == "points":
            assert row["difference"] == pytest.approx(sum(row["per_seed"]) / row["seeds"])
            assert row["seed_interval"] == pytest.approx(list(stats.t_interval(row["per_seed"])))


def sentences_with_tie_words() -> list[tuple[str, str]]:
    """(page, sentence) for every sentence of the README and docs/ outside generated tables that says tie(s),
    tied or level (a hyphenated compound, "seed-level", is a different word)."""
    found = []
    for page in tables.pages():
        text = tables.BLOCK.sub("", page.read_text())
        for match in TIE_WORDS.finditer(text):
            start = max(text.rfind(". ", 0, match.start()), text.rfind("\n\n", 0, match.start()))
            end = text.find(". ", match.end())
            sentence = " ".join(text[start + 1 : end if end != -1 else None].split())
            found.append((page.relative_to(tables.ROOT).as_posix(), sentence))
    return found


def test_no_page_says_tie_or_level_without_an_equivalent_row_behind_it():
    rows = {(row["setting"], row["alternative"]): row for row in json.loads(tables.AT_A_GLANCE.read_text())}
    for key, backing in BACKED_BY_EQUIVALENT.items():
        assert rows[backing]["verdict"] == "equivalent", (key, backing)
    unbacked = [
        (page, sentence)
        for page, sentence in sentences_with_tie_words()
        if not any(key in sentence for key in BACKED_BY_EQUIVALENT)
    ]
    assert unbacked == [], "say what the data say (not distinguishable, with the interval):\n" + "\n".join(
        f"{page}: {sentence}" for page, sentence in unbacked
    )


def test_the_word_check_finds_a_tie_and_passes_over_compounds(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("Theseus ties KD here. The seed-level interval is wide; a near-tie of two logits.\n")
    monkeypatch.setattr(tables, "pages", lambda: [page])
    monkeypatch.setattr(tables, "ROOT", tmp_path)
    assert sentences_with_tie_words() == [("page.md", "Theseus ties KD here")]


def test_page_numbers_are_rounded_once_from_the_json():
    """Two intervals used to be typed from a ``.md``'s four-decimal value rounded again (−0.02949 → −0.0295 → −3.0):
    the pages' helpers round the JSON's value once."""
    from benchmarks import page_tables

    assert page_tables.points(-0.029494534545056128) == "−2.9"
    assert page_tables.points_interval({"low": -0.02951, "high": 0.00824}) == "[−3.0, +0.8]"
    assert page_tables.millions(21_289_802) == "21.3M" and page_tables.millions(469_066) == "0.47M"
    assert page_tables.rate(2e-4) == "2e-4" and page_tables.rate(5e-5) == "5e-5"


def test_a_search_cell_rows_compare_its_searched_model_with_each_uniform_one_of_the_cell_it_runs_against():
    source = "campaign-gcn-polblogs-search-swaps-measured-latency-0.25.json"
    setting = tables.search_setting("search", "gnn", source)
    data = json.loads((tables.RESULTS / source).read_text())
    assert [comparison.key for comparison in setting.comparisons] == [
        "polblogs: theseus+warmup+kd",
        "polblogs: kd",
        "polblogs: truncated",
        "polblogs: scratch",
    ]
    for comparison in setting.comparisons:
        row = tables.comparison_row(setting, comparison)
        assert row["variant"] == "searched theseus+warmup+kd"
        assert row["per_seed"] == data["comparisons"][f"{data['best']} − {comparison.key}"]["per_seed"]


def test_a_search_cell_against_several_cells_names_each_row_with_its_cell(tmp_path, monkeypatch):
    from benchmarks import page_tables

    monkeypatch.setattr(page_tables, "RESULTS", tmp_path)
    models = ["searched: theseus+warmup+kd", "light: theseus+warmup+kd", "light: kd", "shape: kd", "shape: truncated"]
    summary = {"against": ["light", "shape"], "best": models[0], "models": {model: {} for model in models}}
    (tmp_path / "searched.json").write_text(json.dumps(summary))
    setting = tables.search_setting("search", "resnet", "searched.json")
    assert [(comparison.alternative, comparison.key) for comparison in setting.comparisons] == [
        ("uniform theseus+warmup+kd (light)", "light: theseus+warmup+kd"),
        ("kd (light)", "light: kd"),
        ("kd (shape)", "shape: kd"),
        ("truncated (shape)", "shape: truncated"),
    ]


def test_a_search_cells_baselines_on_the_searched_architecture_follow_the_other_cells_rows(tmp_path, monkeypatch):
    from benchmarks import page_tables

    monkeypatch.setattr(page_tables, "RESULTS", tmp_path)
    models = ["searched: theseus+warmup+kd", "searched: kd+searched", "light: kd", "searched: truncated+searched"]
    summary = {"against": ["light"], "best": models[0], "models": {model: {} for model in models}}
    (tmp_path / "searched.json").write_text(json.dumps(summary))
    setting = tables.search_setting("search", "resnet", "searched.json", {"light": ["kd"]})
    assert [(comparison.alternative, comparison.key) for comparison in setting.comparisons] == [
        ("kd", "light: kd"),
        ("kd into the searched architecture", "searched: kd+searched"),
        ("truncated, the searched architecture", "searched: truncated+searched"),
    ]


def test_a_search_cell_can_be_compared_with_chosen_methods_of_chosen_cells(tmp_path, monkeypatch):
    from benchmarks import page_tables

    monkeypatch.setattr(page_tables, "RESULTS", tmp_path)
    models = ["searched: theseus+warmup+kd", "light: theseus+warmup+kd", "light: kd", "shape: kd", "shape: truncated"]
    summary = {"against": ["light", "shape"], "best": models[0], "models": {model: {} for model in models}}
    (tmp_path / "searched.json").write_text(json.dumps(summary))
    only = {"shape": ["truncated", "kd"], "light": ["theseus+warmup+kd"]}
    setting = tables.search_setting("search", "resnet", "searched.json", only)
    assert [comparison.key for comparison in setting.comparisons] == [
        "shape: kd",
        "shape: truncated",
        "light: theseus+warmup+kd",
    ]
    with pytest.raises(ValueError, match="not \\['other'\\]"):
        tables.search_setting("search", "resnet", "searched.json", {"other": ["kd"]})
