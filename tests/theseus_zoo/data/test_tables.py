"""A user's own data (`theseus_zoo.data.tables`), BBC News (`theseus_zoo.data.bbc_news`), the bert family on both."""

import hashlib
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


def test_a_class_label_column_gives_its_names_and_minus_one_is_a_missing_label(tmp_path):
    import datasets

    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])})
    records = [{"text": f"t{i}", "label": i % 2} for i in range(40)]
    datasets.Dataset.from_list(records, features=features).save_to_disk(str(tmp_path / "named"))
    assert tables.load_table(tmp_path / "named").label_names == ("neg", "pos")
    datasets.Dataset.from_list([*records, {"text": "x", "label": -1}], features=features).save_to_disk(
        str(tmp_path / "hidden")
    )
    with pytest.raises(ValueError, match=r"1 row with no label in 'label' \(row 41 \(null\)\)"):
        tables.load_table(tmp_path / "hidden")


@pytest.mark.parametrize(
    ("content", "options", "message"),
    [
        ("text,label\nfine,1\n,0\n", {}, r"data.csv, row 3: the 'text' text is empty"),
        ("words,label\nfine,1\n", {}, r"data.csv, row 2: no column \['text'\]"),
        ("text,label\na,1\nb,1\nc,1\n", {}, "every row has the label '1'"),
        ("text,label\na,1\nb,0,extra\n", {}, "data.csv, line 3: 3 fields where the header has 2"),
        ("text,label\na,1\nb,\n", {}, r"1 row with no label in 'label' \(row 3 \(''\)\)"),
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


def zero_one(count=40):
    return "text,label\n" + "".join(f"review {i},{i % 2}\n" for i in range(count))


@pytest.mark.parametrize("cell", ["NaN", "nan", "NA", "null", "", "N/A", " NULL "])
def test_a_missing_label_in_any_spelling_is_refused_naming_its_row(tmp_path, cell):
    path = tmp_path / "data.csv"
    path.write_text(zero_one() + f"one more,{cell}\nand another,1\n")
    with pytest.raises(
        ValueError, match=r"data\.csv: 1 row with no label in 'label' \(row 42 .*missing_labels"
    ) as error:
        tables.load_table(path)
    assert "\n" not in str(error.value)


def test_missing_labels_in_json_and_many_rows_are_named_in_one_line(tmp_path):
    lines = [json.dumps({"text": f"t{i}", "label": i % 2}) for i in range(40)]
    lines += ['{"text": "a", "label": null}', '{"text": "b", "label": NaN}', '{"text": "c", "label": "NA"}']
    lines += ['{"text": "d"}']  # a JSON line leaves out what it does not have
    (tmp_path / "data.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(
        ValueError,
        match=r"4 rows with no label in 'label' \(rows 41 \(null\), 42 \(NaN\), 43 \('NA'\), 44 \(no key\)\)",
    ):
        tables.load_table(tmp_path / "data.jsonl")
    assert tables.load_table(tmp_path / "data.jsonl", missing="drop").dropped == (41, 42, 43, 44)
    (tmp_path / "many.csv").write_text(zero_one() + "x,nan\n" * 12)
    with pytest.raises(ValueError, match=r"12 rows .* and 2 more\)") as error:
        tables.load_table(tmp_path / "many.csv")
    assert "\n" not in str(error.value)


def test_missing_labels_dropped_when_asked_with_a_count(tmp_path):
    (tmp_path / "data.csv").write_text(zero_one() + "x,NaN\ny,\n")
    table = tables.load_table(tmp_path / "data.csv", missing="drop")
    assert table.dropped == (42, 43) and table.label_names == ("0", "1")
    assert sum(split.num_rows for split in table.splits.values()) == 40
    assert "2 rows without a label dropped" in table.description


@pytest.mark.parametrize(
    ("extra", "options", "message"),
    [
        ("x,0.5\n", {}, r"integers but for 1 \(row 42 \('0\.5'\)\).*set the option labels"),
        ("x,positive\n", {}, r"mix numbers and class names: 1 class name among 40 numbers \(row 42 \('positive'\)\)"),
        ("x,positive\n", {"labels": "classes"}, "mix numbers and class names"),
        ("x,inf\n", {}, r"not finite numbers: row 42 \('inf'\)"),
    ],
)
def test_bad_labels_are_refused_in_one_line_naming_the_rows(tmp_path, extra, options, message):
    (tmp_path / "data.csv").write_text(zero_one() + extra)
    with pytest.raises(ValueError, match=message) as error:
        tables.load_table(tmp_path / "data.csv", **options)
    assert "\n" not in str(error.value)


def test_the_task_kind_is_given_or_inferred_only_when_unambiguous(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text(zero_one())
    inferred = tables.load_table(path)
    assert inferred.kind == "classes" and "every label is an integer, 2 different: 0, 1" in inferred.inference
    assert tables.load_table(path, labels="classes").inference is None
    assert tables.load_table(path, labels="regression").kind == "regression"
    path.write_text(zero_one() + "x,0.5\n")
    assert tables.load_table(path, labels="regression").num_labels == 1
    assert tables.load_table(path, labels="classes").label_names == ("0", "0.5", "1")
    path.write_text("text,label\n" + "".join(f"t{i},{i % 30}\n" for i in range(90)))  # 30 different integers
    with pytest.raises(ValueError, match="30 different integers: classes, or numbers to predict"):
        tables.load_table(path)
    classes = tables.load_table(path, labels="classes", dev_fraction=0.25, test_fraction=0.25)
    assert classes.num_labels == 30 and classes.label_names[:3] == ("0", "1", "2")  # numeric order: 2 before 10
    path.write_text("text,label\n" + "".join(f"t{i},{i / 7:.3f}\n" for i in range(30)))
    assert tables.load_table(path).kind == "regression"
    assert "regression (the labels are numbers, 30 different" in tables.load_table(path).inference
    path.write_text("text,label\n" + "".join(f"t{i},{'ab'[i % 2]}\n" for i in range(30)))
    assert "every label is a class name: a, b" in tables.load_table(path).inference
    with pytest.raises(ValueError, match="labels='regression' needs numbers"):
        tables.load_table(path, labels="regression")


def test_a_csv_with_a_byte_order_mark_reads_as_excel_wrote_it(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes(
        "text,label\r\n".encode("utf-8-sig") + "".join(f"caf\u00e9 {i},{'ab'[i % 2]}\r\n" for i in range(30)).encode()
    )
    table = tables.load_table(path)
    assert table.label_names == ("a", "b") and table.splits["train"]["text"][0].startswith("caf\u00e9")


def test_the_description_names_file_columns_classes_and_split(tmp_path):
    path = write(tmp_path / "reviews.csv", rows())
    table = tables.load_table(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]  # what a resume compares
    assert table.description == (
        f"reviews.csv (sha256 {digest}): 60 rows, text column 'text', 3 classes in 'label' (mid, neg, pos), inferred "
        "from the labels (the option labels sets it); split 80% / 10% / 10% stratified by class (seed 0): 48 / 6 / 6 "
        "rows train / dev / test"
    )


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


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
@pytest.mark.parametrize("inside", ["\n", "\u2028", "\x0c"])
def test_a_text_keeps_the_line_breaks_its_format_allows(tmp_path, suffix, inside):
    """A quoted CSV cell may hold a newline, a JSON string a raw U+2028 or form feed: each was cut or joined by
    ``str.splitlines`` (the CSV cell's lines glued together, the JSON line refused as not JSON)."""
    records = rows()
    records[3]["text"] = f"first line{inside}second line"
    if suffix == ".jsonl":
        if inside == "\n":
            pytest.skip("JSON escapes a newline in a string")
        (tmp_path / "data.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    else:
        write(tmp_path / "data.csv", records)
    table = tables.load_table(tmp_path / f"data{suffix}")
    texts = [text for split in table.splits.values() for text in split["text"]]
    assert len(texts) == len(records) and f"first line{inside}second line" in texts


def test_a_repeated_column_or_an_overlong_cell_is_refused_in_one_line(tmp_path):
    (tmp_path / "twice.csv").write_text("text,label,label\n" + "a,pos,x\nb,neg,x\n" * 10)
    with pytest.raises(ValueError, match=r"twice\.csv: the header names the column 'label' twice"):
        tables.load_table(tmp_path / "twice.csv")  # the last 'label' was read, silently: one class 'x'
    (tmp_path / "long.csv").write_text("text,label\n" + "a,pos\n" + "b" * 200_000 + ",neg\n")
    with pytest.raises(ValueError, match=r"long\.csv, line 3: not a row of \.csv \(field larger"):
        tables.load_table(tmp_path / "long.csv")  # was csv.Error, a traceback


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


def test_only_a_class_with_few_examples_or_under_a_percent_of_the_rows_is_warned_about(tmp_path):
    balanced = write(tmp_path / "balanced.csv", rows(60))
    assert tables.load_table(balanced).warnings == ()
    many = rows(600, labels=("pos", "neg")) + rows(5, labels=("mid",))  # 5 examples, under 1% of 605 rows
    many += rows(1, labels=("odd",))
    [warning] = tables.load_table(write(tmp_path / "many.csv", many)).warnings
    assert warning.startswith("many.csv: 2 classes in 'label' with fewer than 5 examples or under 1% of the 606 rows")
    assert "'odd': 1 example (row 607 ('odd')); 'mid': 5 examples;" in warning
