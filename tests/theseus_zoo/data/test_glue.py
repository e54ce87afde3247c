"""GLUE: the task table, loading the GLUE distribution's TSV layouts, the hub path, and the paper's scores."""

import contextlib
import dataclasses
from pathlib import Path

import pytest

from theseus_zoo.data import glue

# One small file per split in the layout of the original GLUE distribution. Each row's expected
# (texts, label) follows in EXPECTED. Quotes are unbalanced on purpose: GLUE files are not CSV-quoted.
MNLI_HEADER = "index\tpromptID\tpairID\tgenre\ts1_bp\ts2_bp\ts1_p\ts2_p\tsentence1\tsentence2"
MNLI_DEV_HEADER = f"{MNLI_HEADER}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
STSB_HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
QQP_HEADER = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
FILES = {
    "CoLA": {
        "train.tsv": "gj04\t1\t\tOur friends won't buy this analysis, let alone the next one we propose.\n"
        'clc95\t0\t*\tThe more "we study verbs.\n',
        "dev.tsv": "gj04\t1\t\tThe sailors rode the breeze clear of the rocks.\n",
    },
    "MNLI": {
        "train.tsv": f"{MNLI_HEADER}\tlabel1\tgold_label\n"
        "0\t1\t1e\tgov\t(x)\t(y)\t(X)\t(Y)\tA man eats.\tA person eats.\tentailment\tentailment\n",
        "dev_matched.tsv": MNLI_DEV_HEADER
        + "0\t2\t2n\tfic\t(x)\t(y)\t(X)\t(Y)\tIt rains.\tIt is dry.\tcontradiction\tnone\t-\t-\t-\tcontradiction\n"
        + "1\t3\t3n\tfiction\t(x)\t(y)\t(X)\t(Y)\tHe left.\tHe left early.\tneutral\tneutral\t-\t-\t-\tneutral\n",
        "dev_mismatched.tsv": MNLI_DEV_HEADER
        + '0\t4\t4e\tletters\t(x)\t(y)\t(X)\t(Y)\t"Dear friend,\tA letter.\tentailment\t-\t-\t-\t-\tentailment\n',
    },
    "MRPC": {  # the GLUE script writes MRPC with a byte-order mark
        "train.tsv": "\ufeff" + MRPC_HEADER + "1\t702876\t702977\tHe said hi .\tHe greeted us .\n",
        "dev.tsv": MRPC_HEADER + "0\t1\t2\tShares rose 5 % .\tShares fell .\n",
    },
    "QNLI": {
        "train.tsv": "index\tquestion\tsentence\tlabel\n0\tWho wrote it?\tShe wrote it.\tentailment\n",
        "dev.tsv": "index\tquestion\tsentence\tlabel\n0\tWhen?\tThe sky is blue.\tnot_entailment\n",
    },
    "QQP": {  # one malformed row, as in some copies of QQP's train.tsv
        "train.tsv": QQP_HEADER + "0\t1\t2\tHow to cook?\tHow do I cook?\t1\n1\t3\t4\tA question cut short\n",
        "dev.tsv": QQP_HEADER + '5\t6\t7\tWhy "now?\tWhat time is it?\t0\n',
    },
    "RTE": {
        "train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tDogs bark.\tAnimals make noise.\tentailment\n",
        "dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tCats sleep.\tCats fly.\tnot_entailment\n",
    },
    "SST-2": {
        "train.tsv": "sentence\tlabel\nit 's a charming journey \t1\na dull , \"lifeless film\t0\n",
        "dev.tsv": "sentence\tlabel\nunflinchingly bleak\t0\n",
    },
    "STS-B": {
        "train.tsv": STSB_HEADER
        + "0\tcaptions\tMSRvid\t2012\t1\tnone\tnone\tA plane takes off.\tA plane leaves.\t5.000\n",
        "dev.tsv": STSB_HEADER + "0\tcaptions\tMSRvid\t2012\t0\tnone\tnone\tA man plays.\tA woman cooks.\t0.250\n",
    },
}
EXPECTED = {
    "cola": {
        "train": [
            (("Our friends won't buy this analysis, let alone the next one we propose.",), 1),
            (('The more "we study verbs.',), 0),
        ],
        "validation": [(("The sailors rode the breeze clear of the rocks.",), 1)],
    },
    "mnli": {
        "train": [(("A man eats.", "A person eats."), 0)],
        "validation_matched": [(("It rains.", "It is dry."), 2), (("He left.", "He left early."), 1)],
        "validation_mismatched": [(('"Dear friend,', "A letter."), 0)],
    },
    "mrpc": {
        "train": [(("He said hi .", "He greeted us ."), 1)],
        "validation": [(("Shares rose 5 % .", "Shares fell ."), 0)],
    },
    "qnli": {
        "train": [(("Who wrote it?", "She wrote it."), 0)],
        "validation": [(("When?", "The sky is blue."), 1)],
    },
    "qqp": {
        "train": [(("How to cook?", "How do I cook?"), 1)],
        "validation": [(('Why "now?', "What time is it?"), 0)],
    },
    "rte": {
        "train": [(("Dogs bark.", "Animals make noise."), 0)],
        "validation": [(("Cats sleep.", "Cats fly."), 1)],
    },
    "sst2": {
        "train": [(("it 's a charming journey ",), 1), (('a dull , "lifeless film',), 0)],
        "validation": [(("unflinchingly bleak",), 0)],
    },
    "stsb": {
        "train": [(("A plane takes off.", "A plane leaves."), 5.0)],
        "validation": [(("A man plays.", "A woman cooks."), 0.25)],
    },
}
HUB_COLUMNS = {  # the columns of nyu-mll/glue
    "cola": ["sentence", "label", "idx"],
    "mnli": ["premise", "hypothesis", "label", "idx"],
    "mrpc": ["sentence1", "sentence2", "label", "idx"],
    "qnli": ["question", "sentence", "label", "idx"],
    "qqp": ["question1", "question2", "label", "idx"],
    "rte": ["sentence1", "sentence2", "label", "idx"],
    "sst2": ["sentence", "label", "idx"],
    "stsb": ["sentence1", "sentence2", "label", "idx"],
}
# Xu et al. 2020, Table 1 (GLUE dev): the eight task scores and the macro score of each complete row.
PAPER_ROWS = {
    "BERT-base": ([54.3, 83.5, 89.5, 91.2, 89.8, 71.1, 91.5, 88.9], 82.5),
    "fine-tuned 6L": ([43.4, 80.1, 86.0, 86.9, 87.8, 62.1, 89.6, 81.9], 77.2),
    "vanilla KD": ([45.1, 80.1, 86.2, 88.0, 88.1, 64.9, 90.5, 84.9], 78.5),
    "BERT-PKD": ([45.5, 81.3, 85.7, 88.4, 88.4, 66.5, 91.3, 86.2], 79.2),
    "Theseus 6L": ([51.1, 82.3, 89.0, 89.5, 89.6, 68.2, 91.5, 88.7], 81.2),
    "fine-tuned 3L": ([27.5, 78.1, 81.9, 80.4, 86.5, 57.7, 85.9, 76.8], 71.9),
    "Theseus 3L": ([35.0, 78.8, 84.3, 82.1, 87.3, 59.5, 87.2, 78.9], 74.1),
}


def write_glue(root: Path, folders=FILES) -> Path:
    for folder, files in folders.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (root / folder / name).write_text(content, encoding="utf-8")
    return root


def test_the_paper_tasks():
    assert list(glue.GLUE_TASKS) == ["cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb"]
    assert {name: task.max_length for name, task in glue.GLUE_TASKS.items() if task.max_length != 128} == {"qnli": 256}
    assert {name: task.num_labels for name, task in glue.GLUE_TASKS.items()} == {
        "cola": 2,
        "mnli": 3,
        "mrpc": 2,
        "qnli": 2,
        "qqp": 2,
        "rte": 2,
        "sst2": 2,
        "stsb": 1,
    }
    assert [name for name, task in glue.GLUE_TASKS.items() if task.is_regression] == ["stsb"]
    assert glue.get_task("MNLI").dev_splits == ("validation_matched", "validation_mismatched")
    assert glue.get_task("mnli").tsv_file("validation_mismatched") == "dev_mismatched.tsv"
    assert glue.get_task("SST-2") is glue.get_task("sst2") is glue.get_task("SST_2")
    assert glue.get_task("STS-B").metrics == ("pearson", "spearman")
    assert glue.get_task("CoLA").metrics == ("matthews_correlation",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        glue.get_task("cola").max_length = 512


@pytest.fixture
def hf():
    return pytest.importorskip("datasets", reason="loading GLUE needs the datasets library")


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("name", list(glue.GLUE_TASKS))
def test_loads_every_task_layout_from_the_glue_root(hf, tmp_path, name):
    task = glue.get_task(name)
    with pytest.warns(UserWarning, match="skipped 1 rows") if name == "qqp" else contextlib.nullcontext():
        loaded = glue.load_glue(name, write_glue(tmp_path))
    assert list(loaded) == list(task.splits)
    for split, rows in EXPECTED[name].items():
        dataset = loaded[split]
        assert dataset.column_names == HUB_COLUMNS[name]
        assert [tuple(example[column] for column in task.text_columns) for example in dataset] == [r[0] for r in rows]
        assert dataset["label"] == pytest.approx([r[1] for r in rows])
        assert dataset["idx"] == list(range(len(rows)))
    label = loaded["train"].features["label"]
    if task.is_regression:
        assert label.dtype == "float32"
    else:
        assert label.names == list(task.label_names)


def test_loads_from_the_task_folder_and_selected_splits(hf, tmp_path):
    folder = write_glue(tmp_path)
    loaded = glue.load_glue("MNLI", folder / "MNLI", splits=["validation_mismatched"])
    assert list(loaded) == ["validation_mismatched"]
    assert loaded["validation_mismatched"]["premise"] == ['"Dear friend,']
    assert loaded["validation_mismatched"].features["label"].names == ["entailment", "neutral", "contradiction"]


def test_labels_may_be_names_or_ids(hf, tmp_path):
    files = {"RTE": {"train.tsv": "index\tsentence1\tsentence2\tlabel\n0\ta\tb\t1\n1\tc\td\tentailment\n"}}
    loaded = glue.load_glue("rte", write_glue(tmp_path, files), splits=["train"])
    assert loaded["train"]["label"] == [1, 0]


def test_hub_path_asks_for_nyu_mll_glue_and_keeps_train_and_dev(hf, monkeypatch):
    calls = []

    def load_dataset(*args):
        calls.append(args)
        split = hf.Dataset.from_dict({"sentence": ["x"], "label": [1], "idx": [0]})
        return hf.DatasetDict({"train": split, "validation": split, "test": split})

    monkeypatch.setattr(hf, "load_dataset", load_dataset)
    loaded = glue.load_glue("SST-2")
    assert calls == [("nyu-mll/glue", "sst2")]
    assert list(loaded) == ["train", "validation"]


@pytest.mark.parametrize(
    ("task", "files", "splits", "message"),
    [
        ("wnli", {}, None, "unknown GLUE task 'wnli'; the paper's tasks are cola, mnli"),
        ("sst2", {}, ["test"], "GLUE sst2 has the splits train, validation, not 'test'"),
        (
            "sst2",
            {"SST-2": {"train.tsv": "sentence\tlabel\n"}},
            None,
            r"no GLUE SST-2 file .*dev\.tsv; data_dir must be",
        ),
        (
            "mnli",
            {"MNLI": {"train.tsv": "", "dev_matched.tsv": ""}},
            None,
            r"no GLUE MNLI file .*dev_mismatched\.tsv.* with train\.tsv, dev_matched\.tsv, dev_mismatched\.tsv",
        ),
        (
            "sst2",
            {"SST-2": {"train.tsv": "sentence\tlabel\n", "dev.tsv": "sentence\tscore\nfine\t1\n"}},
            None,
            r"dev\.tsv: no label column \['label'\] \(its header: sentence, score\)",
        ),
        (
            "qqp",
            {"QQP": {"train.tsv": "id\tq1\tq2\tis_duplicate\n", "dev.tsv": ""}},
            None,
            r"train\.tsv: no text columns \['question1', 'question2'\]",
        ),
        (
            "cola",
            {"CoLA": {"train.tsv": "sentence\tlabel\n", "dev.tsv": ""}},
            None,
            r"train\.tsv: GLUE CoLA rows have at least 4 tab-separated fields \(no header\), the first has 2",
        ),
    ],
)
def test_bad_input_raises_one_line_before_reading_any_row(hf, tmp_path, monkeypatch, task, files, splits, message):
    monkeypatch.setattr(glue, "_read_tsv", lambda *args: pytest.fail("read a file before checking them all"))
    with pytest.raises(ValueError, match=message) as error:
        glue.load_glue(task, write_glue(tmp_path, files), splits=splits)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("folder", "content", "message"),
    [
        ("RTE", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailed\n", "line 2: label 'entailed' is not one of"),
        ("RTE", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\t2\n", r"not one of entailment, not_entailment or 0\.\.1"),
        ("STS-B", "sentence1\tsentence2\tscore\na\tb\thigh\n", "label 'high' is not a number"),
    ],
)
def test_a_label_outside_the_task_raises(hf, tmp_path, folder, content, message):
    write_glue(tmp_path, {folder: {"train.tsv": content}})
    with pytest.raises(ValueError, match=message):
        glue.load_glue(folder, tmp_path, splits=["train"])


def test_compute_metrics_per_task_by_hand():
    predicted, true = [1, 1, 0, 1, 0], [1, 0, 0, 1, 1]  # TP 2, TN 1, FP 1, FN 1
    cola = glue.compute_metrics("cola", predicted, true)
    assert cola == pytest.approx({"matthews_correlation": 1 / 6, "score": 1 / 6})
    mrpc = glue.compute_metrics("mrpc", predicted, true)
    assert mrpc == pytest.approx({"f1": 2 / 3, "accuracy": 3 / 5, "score": (2 / 3 + 3 / 5) / 2})
    assert glue.compute_metrics("qqp", predicted, true) == mrpc
    for name in ("qnli", "rte", "sst2", "mnli"):
        assert glue.compute_metrics(name, predicted, true) == pytest.approx({"accuracy": 0.6, "score": 0.6})
    stsb = glue.compute_metrics("stsb", [[1.0], [2.0], [2.0], [5.0]], [1.0, 3.0, 2.0, 4.0])
    # deviations (-1.5, -.5, -.5, 2.5) · (-1.5, .5, -.5, 1.5); ranks (1, 2.5, 2.5, 4) · (1, 3, 2, 4)
    pearson, spearman = 6 / 45**0.5, 4.5 / 22.5**0.5
    assert stsb == pytest.approx({"pearson": pearson, "spearman": spearman, "score": (pearson + spearman) / 2})


def test_mnli_score_is_the_mean_of_matched_and_mismatched():
    matched = glue.compute_metrics("mnli", [[0.9, 0.1, 0.0], [0.0, 0.2, 0.8]], [0, 1])  # accuracy 1/2
    mismatched = glue.compute_metrics("mnli", [2, 2, 1, 0], [2, 2, 1, 0])  # accuracy 1
    results = {"validation_matched": matched, "validation_mismatched": mismatched}
    assert glue.task_score("mnli", results) == pytest.approx(0.75)
    assert glue.task_score("sst2", {"validation": {"accuracy": 0.9, "score": 0.9}}) == pytest.approx(0.9)
    with pytest.raises(ValueError, match=r"scored on validation_matched, validation_mismatched; results lack"):
        glue.task_score("mnli", {"validation_matched": matched})


@pytest.mark.parametrize("row", list(PAPER_ROWS))
def test_macro_score_reproduces_the_paper(row):
    scores, macro = PAPER_ROWS[row]
    # the paper rounds to one decimal, halves up (fine-tuned 3L: 71.85 → 71.9)
    assert glue.macro_score(dict(zip(glue.GLUE_TASKS, scores, strict=True))) == pytest.approx(macro, abs=0.05 + 1e-9)


def test_macro_score_needs_each_task_once():
    scores = dict(zip(glue.GLUE_TASKS, PAPER_ROWS["BERT-base"][0], strict=True))
    with pytest.raises(ValueError, match="missing rte"):
        glue.macro_score({name: value for name, value in scores.items() if name != "rte"})
    with pytest.raises(ValueError, match="named twice"):
        glue.macro_score({**scores, "SST-2": 91.5})
    with pytest.raises(ValueError, match="unknown GLUE task 'wnli'"):
        glue.macro_score({**scores, "wnli": 56.3})


def test_a_task_definition_is_checked():
    with pytest.raises(ValueError, match=r"give metrics from accuracy, .*, got \['bleu'\]"):
        glue.GlueTask("wnli", "WNLI", ("sentence1", "sentence2"), ("no", "yes"), ("bleu",))
    with pytest.raises(ValueError, match="all header names or all indices"):
        glue.GlueTask("x", "X", ("sentence",), ("no", "yes"), ("accuracy",), tsv_text_columns=(0,))
    custom = glue.GlueTask("wnli", "WNLI", ("sentence1", "sentence2"), ("not_entailment", "entailment"), ("accuracy",))
    assert custom.tsv_text_columns == ("sentence1", "sentence2") and custom.tsv_label_column == "label"
