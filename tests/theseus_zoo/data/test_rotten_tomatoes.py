"""Rotten Tomatoes snippets: parsing, the fixed stratified split, the DatasetDict, and the real cached asset."""

import re
from collections import Counter

import pytest

from theseus_zoo.data import rotten_tomatoes as rt
from theseus_zoo.data.assets import MissingAssetError


def write_snippets(path, scores):
    """A ground-truth file as the asset has it: CRLF lines, id<TAB>valence<TAB>text, no final newline."""
    lines = [
        f"{number}\t{score}\tsnippet {number} — it\u2019s {'good' if score > 0 else 'bad'}, ok"
        for number, score in enumerate(scores, start=1)
    ]
    path.write_text("\r\n".join(lines), encoding="utf-8", newline="")
    return path


FETCH = re.escape("theseus fetch rotten-tomatoes")
SCORES = [2.26666666667, -0.6, 0.0, 1.5, -3.2, *([1.0] * 25), *([-1.0] * 17)]  # 27 positive, 19 negative, 1 zero


def test_reads_ids_valence_and_text(tmp_path):
    snippets = rt.read_snippets(write_snippets(tmp_path / "truth.txt", SCORES))
    assert len(snippets) == len(SCORES)
    assert snippets[0] == rt.Snippet(1, 2.26666666667, "snippet 1 — it\u2019s good, ok")
    assert [snippet.label for snippet in snippets[:5]] == [1, 0, None, 1, 0]
    assert snippets[-1].text.endswith("bad, ok")  # no stray "\r" from the CRLF lines


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("12\tnot-a-number\ttext", "line 2: expected 'id<TAB>valence<TAB>text'"),
        ("13\t1.0", "line 2"),
        ("14\tnan\tx", "finite"),
    ],
)
def test_a_malformed_line_raises_naming_it(tmp_path, line, message):
    path = tmp_path / "truth.txt"
    path.write_text(f"11\t1.0\tfine\n{line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        rt.read_snippets(path)


def test_split_is_stratified_disjoint_complete_and_drops_zeros(tmp_path):
    snippets = rt.read_snippets(write_snippets(tmp_path / "truth.txt", SCORES))
    splits = rt.split_snippets(snippets)
    assert list(splits) == ["train", "validation", "test"]
    ids = [snippet.id for members in splits.values() for snippet in members]
    assert len(ids) == len(set(ids)) == len(SCORES) - 1 and 3 not in ids
    counts = {name: Counter(snippet.label for snippet in members) for name, members in splits.items()}
    # positives 27: round(2.7) = 3 each for validation and test; negatives 19: round(1.9) = 2
    assert counts == {"train": {1: 21, 0: 15}, "validation": {1: 3, 0: 2}, "test": {1: 3, 0: 2}}


def test_split_is_fixed_by_the_seed(tmp_path):
    snippets = rt.read_snippets(write_snippets(tmp_path / "truth.txt", SCORES))
    first, again = rt.split_snippets(snippets, seed=0), rt.split_snippets(list(reversed(snippets)), seed=0)
    assert first == again  # depends on the ids, not on the order of the file
    assert rt.split_snippets(snippets, seed=1)["test"] != first["test"]
    assert [snippet.label for snippet in first["train"]] != sorted(snippet.label for snippet in first["train"])


def test_split_fractions_are_checked_before_reading(tmp_path):
    with pytest.raises(ValueError, match="sum < 1"):
        rt.load_rotten_tomatoes(tmp_path / "absent.txt", dev_fraction=0.5, test_fraction=0.5)
    with pytest.raises(ValueError, match="≥ 0"):
        rt.split_snippets([], dev_fraction=-0.1)
    duplicate = [rt.Snippet(1, 1.0, "a"), rt.Snippet(1, -1.0, "b")]
    with pytest.raises(ValueError, match="ids must be unique"):
        rt.split_snippets(duplicate)


def test_loads_a_dataset_dict_with_text_and_label(tmp_path):
    pytest.importorskip("datasets", reason="the dataset needs the datasets library")
    loaded = rt.load_rotten_tomatoes(write_snippets(tmp_path / "truth.txt", SCORES), dev_fraction=0.2, test_fraction=0)
    assert {name: split.num_rows for name, split in loaded.items()} == {"train": 37, "validation": 9, "test": 0}
    train = loaded["train"]
    assert train.column_names == ["text", "label", "id"]
    assert train.features["label"].names == ["negative", "positive"]
    by_id = dict(enumerate(SCORES, start=1))
    assert all((by_id[example["id"]] > 0) == (example["label"] == 1) for example in train)
    assert all(example["text"].endswith(("good, ok", "bad, ok")) for example in train)


def test_missing_file_or_asset_names_the_fetch_command(tmp_path, monkeypatch):
    pytest.importorskip("datasets", reason="the dataset needs the datasets library")
    with pytest.raises(ValueError, match=FETCH):
        rt.load_rotten_tomatoes(tmp_path / "absent.txt")
    monkeypatch.setenv("THESEUS_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(MissingAssetError, match=FETCH):
        rt.load_rotten_tomatoes()


@pytest.fixture
def real_file():
    try:
        return rt.snippets_path()
    except MissingAssetError:
        pytest.skip("Rotten Tomatoes asset not fetched (theseus fetch rotten-tomatoes)")


def test_the_real_asset_and_its_documented_split(real_file):
    snippets = rt.read_snippets(real_file)
    assert len(snippets) == 10_605
    assert Counter(snippet.label for snippet in snippets) == {1: 5_242, 0: 5_326, None: 37}
    splits = rt.split_snippets(snippets)
    sizes = {name: (len(members), sum(snippet.label for snippet in members)) for name, members in splits.items()}
    assert sizes == {"train": (8_454, 4_194), "validation": (1_057, 524), "test": (1_057, 524)}
    # the first id of each split pins the keying (sha256 of "0:<id>"); a changed algorithm moves them
    assert [members[0].id for members in splits.values()] == [3947, 9977, 1075]


def test_five_classes_are_valence_quintiles_and_regression_keeps_the_valence(tmp_path):
    pytest.importorskip("datasets", reason="the dataset needs the datasets library")
    scores = [round(-4 + 8 * i / 99, 3) for i in range(100)]  # 100 distinct valences, 0 not among them
    path = write_snippets(tmp_path / "truth.txt", scores)
    boundaries = rt.quintile_boundaries(rt.read_snippets(path))
    assert boundaries == sorted(boundaries) and len(boundaries) == 4
    five = rt.load_rotten_tomatoes(path, labels="five", dev_fraction=0.2, test_fraction=0.2)
    labels = [example["label"] for split in five.values() for example in split]
    assert Counter(labels) == {grade: 20 for grade in range(5)}  # quintiles: 20 snippets each
    assert five["train"].features["label"].names[0] == "very negative"
    by_id = dict(enumerate(scores, start=1))
    for split in five.values():  # a higher grade never has a lower valence
        pairs = sorted((example["label"], by_id[example["id"]]) for example in split)
        assert [valence for _, valence in pairs] == sorted(valence for _, valence in pairs)
        assert Counter(example["label"] for example in split) == {g: split.num_rows // 5 for g in range(5)}
    regression = rt.load_rotten_tomatoes(path, labels="regression", dev_fraction=0.2, test_fraction=0.2)
    assert all(example["label"] == pytest.approx(by_id[example["id"]]) for example in regression["test"])
    assert sum(split.num_rows for split in regression.values()) == 100  # valence 0 is a label here
    with pytest.raises(ValueError, match="labels must be one of"):
        rt.load_rotten_tomatoes(path, labels="three")
