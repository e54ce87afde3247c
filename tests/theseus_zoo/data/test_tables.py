"""A user's own data (`theseus_zoo.data.tables`), BBC News (`theseus_zoo.data.bbc_news`), the bert family on both."""

import json
from collections import Counter

import pytest

from theseus_zoo.data import bbc_news, tables
from theseus_zoo.data.assets import MissingAssetError

pytest.importorskip("datasets", reason="tables load as datasets")


def rows(count=60, labels=("pos", "neg", "mid")):
    return [
        {"text": f"review number {i} is {labels[i % len(labels)]}", "label": labels[i % len(labels)]}
        for i in range(count)
    ]


def write(path, records, delimiter=","):
    import csv

    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(record) + "\n" for record in records))
    else:
        with open(path, "w", newline="") as stream:
            writer = csv.DictWriter(stream, fieldnames=list(records[0]), delimiter=delimiter)
            writer.writeheader()
            writer.writerows(records)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_string_classes_in_every_format_split_stratified(tmp_path, suffix):
    table = tables.load_table(write(tmp_path / f"data{suffix}", rows(), "\t" if suffix == ".tsv" else ","))
    assert table.label_names == ("mid", "neg", "pos") and table.num_labels == 3
    sizes = {name: split.num_rows for name, split in table.splits.items()}
    assert sizes == {"train": 48, "validation": 6, "test": 6}
    assert Counter(table.splits["test"]["label"]) == {0: 2, 1: 2, 2: 2}
    again = tables.load_table(tmp_path / f"data{suffix}")
    assert again.splits["test"]["text"] == table.splits["test"]["text"]  # fixed by the seed
    other = tables.load_table(tmp_path / f"data{suffix}", seed=1)
    assert other.splits["test"]["text"] != table.splits["test"]["text"]


def test_integer_classes_float_regression_pairs_and_a_split_column(tmp_path):
    integers = [{"text": f"t{i}", "label": 3 + i % 2} for i in range(40)]
    table = tables.load_table(write(tmp_path / "int.jsonl", integers))
    assert table.label_names == ("3", "4")
    floats = [
        {"s1": f"a{i}", "s2": f"b{i}", "score": i / 7, "split": ["train", "dev", "test"][i % 3]} for i in range(30)
    ]
    table = tables.load_table(
        write(tmp_path / "pairs.csv", floats), text_column="s1", text_pair_column="s2", label_column="score"
    )
    assert table.label_names is None and table.num_labels == 1
    assert table.splits["validation"].column_names == ["text", "text_pair", "label"]
    assert {name: split.num_rows for name, split in table.splits.items()} == {"train": 10, "validation": 10, "test": 10}
    assert table.splits["test"]["label"][0] == pytest.approx(2 / 7)


def test_a_save_to_disk_folder(tmp_path):
    import datasets

    datasets.Dataset.from_list(rows()).save_to_disk(str(tmp_path / "folder"))
    assert tables.load_table(tmp_path / "folder").splits["train"].num_rows == 48


@pytest.mark.parametrize(
    ("content", "options", "message"),
    [
        ("text,label\nfine,1\n,0\n", {}, r"data.csv, row 3: the 'text' text is empty"),
        ("words,label\nfine,1\n", {}, r"data.csv, row 2: no column \['text'\]"),
        ("text,label\na,1\nb,1\nc,1\n", {}, "every row has the label 1"),
        ("text,label\na,1\nb,0,extra\n", {}, "data.csv, line 3: 3 fields where the header has 2"),
        ("text,label\na,1\nb,\n", {}, "row 3: no label"),
        ("text,label,split\na,1,train\nb,0,holdout\n", {}, "row 3: split 'holdout'"),
        ("text,label\na,1\nb,0\n", {}, "the validation split is empty"),
        ("text,label\na,1\n", {"label_column": "y"}, r"no column \['y'\]"),
    ],
)
def test_bad_files_end_in_one_line_naming_file_and_row(tmp_path, content, options, message):
    path = tmp_path / "data.csv"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        tables.load_table(path, **options)


def test_unreadable_inputs(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"text": "a", "label": 1}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl, line 2: not a JSON object"):
        tables.load_table(tmp_path / "bad.jsonl")
    (tmp_path / "data.xlsx").write_text("x")
    with pytest.raises(ValueError, match=r"give a \.csv, \.tsv, \.jsonl file"):
        tables.load_table(tmp_path / "data.xlsx")
    with pytest.raises(ValueError, match="no file or folder"):
        tables.load_table(tmp_path / "absent.csv")
    (tmp_path / "latin.csv").write_bytes("text,label\ncaf\xe9,1\n".encode("latin-1"))
    with pytest.raises(ValueError, match="cannot read it as UTF-8"):
        tables.load_table(tmp_path / "latin.csv")


def test_bbc_news_reader_on_a_small_copy(tmp_path):
    for topic in bbc_news.TOPICS:
        (tmp_path / topic).mkdir()
        for number in range(10):
            body = f"Headline {topic} {number}\n\nBody of a {topic} story."
            (tmp_path / topic / f"{number:03d}.txt").write_bytes(body.encode("latin-1" if number == 3 else "utf-8"))
    articles = bbc_news.read_articles(tmp_path)
    assert len(articles) == 50 and articles[0] == bbc_news.Article("business/000.txt", 0, articles[0].text)
    assert articles[0].text == "Headline business 0 Body of a business story."
    splits = bbc_news.load_bbc_news(tmp_path)
    assert {name: split.num_rows for name, split in splits.items()} == {"train": 40, "validation": 5, "test": 5}
    assert Counter(splits["test"]["label"]) == {label: 1 for label in range(5)}
    (tmp_path / "tech" / "000.txt").unlink()
    for path in (tmp_path / "tech").iterdir():
        path.unlink()
    with pytest.raises(ValueError, match="no articles in"):
        bbc_news.read_articles(tmp_path)


def test_the_real_bbc_asset():
    try:
        splits = bbc_news.load_bbc_news()
    except MissingAssetError:
        pytest.skip("BBC News asset not fetched (theseus fetch bbc-news)")
    assert {name: split.num_rows for name, split in splits.items()} == {"train": 1779, "validation": 223, "test": 223}
