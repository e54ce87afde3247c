"""The bert family through `theseus compress`: a tiny random BERT and tokenizer written to disk, GLUE TSVs."""

import hashlib
import json
import random
import re

import pytest
import torch
from transformers import (
    AutoModelForSequenceClassification,
    BertConfig,
    BertForSequenceClassification,
    BertTokenizerFast,
)

import theseus_core as th
from theseus_zoo import cli
from theseus_zoo.recipes import text as text_recipes
from theseus_zoo.tasks import text

WORDS = ["good", "great", "fine", "bad", "awful", "dull", "film", "plot", "actor", "story", "a", "the", "is", "was"]
POSITIVE, NEGATIVE = WORDS[:3], WORDS[3:6]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A 4-layer random BERT with its WordPiece tokenizer in a folder, as `from_pretrained` reads it."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(WORDS) + 5, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=48
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    return folder


def sentences(count: int, seed: int) -> list[tuple[str, int]]:
    """Sentences whose label is the sentiment word in them."""
    generator = random.Random(seed)
    rows = []
    for _ in range(count):
        label = generator.randrange(2)
        words = [generator.choice(WORDS[6:]) for _ in range(generator.randrange(2, 9))]
        words.insert(generator.randrange(len(words)), generator.choice(POSITIVE if label else NEGATIVE))
        rows.append((" ".join(words), label))
    return rows


def write_glue(root, task: str):
    """Train and dev TSVs of SST-2, STS-B or MNLI (two dev splits) in the GLUE distribution's layout."""
    train, dev = sentences(64, 0), sentences(24, 1)
    if task == "sst2":
        folder, files = root / "SST-2", {"train.tsv": train, "dev.tsv": dev}
        for name, rows in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows))
    elif task == "stsb":
        folder = root / "STS-B"
        folder.mkdir(parents=True)
        header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
        for name, rows in {"train.tsv": train, "dev.tsv": dev}.items():
            lines = [
                f"{i}\tx\tx\t2012\t{i}\tnone\tnone\t{s}\tthe film\t{5.0 * y:.3f}\n" for i, (s, y) in enumerate(rows)
            ]
            (folder / name).write_text(header + "".join(lines))
    else:
        folder = root / "MNLI"
        folder.mkdir(parents=True)
        header = "index\tpromptID\tpairID\tgenre\ts1_bp\ts2_bp\ts1_p\ts2_p\tsentence1\tsentence2\tgold_label\n"
        labels = ("entailment", "neutral", "contradiction")
        for name, rows in {"train.tsv": train, "dev_matched.tsv": dev, "dev_mismatched.tsv": dev[:10]}.items():
            lines = [
                f"{i}\t1\t1e\tg\tx\ty\tX\tY\t{s}\tthe plot\t{labels[y + (i % 2)]}\n" for i, (s, y) in enumerate(rows)
            ]
            (folder / name).write_text(header + "".join(lines))
    return root


def compress(tmp_path, options, *, baselines=("truncated", "scratch", "kd"), out="run"):
    config = {
        "options": options,
        "predecessor": {"steps": 12, "eval_every": 6, "batch_size": 16, "lr": 1e-3},
        "replacing": {"steps": 12, "eval_every": 6, "batch_size": 16, "lr": 1e-3},
        "steps_to_one": 6,
        "methods": None,  # the paper's Theseus and these baselines (the recipe runs its best variant)
        "baselines": list(baselines),
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    args = ["compress", "--recipe", "minilm-rotten-tomatoes", "--config", str(path), "--out", str(tmp_path / out)]
    return cli.main([*args, "--no-progress"])


@pytest.mark.parametrize("task", ["sst2", "stsb", pytest.param("mnli", marks=pytest.mark.slow)])
def test_compress_on_glue_exports_a_plain_transformers_model_that_scores_as_reported(tiny_model, tmp_path, task):
    options = {"model": str(tiny_model), "dataset": f"glue/{task}", "data_dir": str(write_glue(tmp_path, task))}
    options["num_layers"] = 2
    assert compress(tmp_path, options) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["metric"] == "score"
    baselines = {"baseline:truncated", "baseline:scratch", "baseline:kd"}
    assert set(report["models"]) == {"predecessor", "theseus", *baselines}
    exported = AutoModelForSequenceClassification.from_pretrained(tmp_path / "run" / "model")
    assert exported.config.num_hidden_layers == 2 and len(exported.bert.encoder.layer) == 2
    task_object = text.TextClassificationTask(options, 0)
    assert task_object.evaluate(exported, "test") == report["models"]["theseus"]["test"]
    if task == "mnli":  # the paper's MNLI number: mean of matched and mismatched accuracy
        scores = report["models"]["theseus"]["test"]
        matched, mismatched = scores["validation_matched/accuracy"], scores["validation_mismatched/accuracy"]
        assert scores["score"] == pytest.approx((matched + mismatched) / 2)


def test_dynamic_padding_pads_to_the_longest_example_of_the_batch(tiny_model, tmp_path):
    options = {"model": str(tiny_model), "dataset": "glue/sst2", "data_dir": str(write_glue(tmp_path, "sst2"))}
    task = text.TextClassificationTask(options, 0)
    examples = task.dataset("train")[:5]
    batch = task.collate(examples)
    assert batch["input_ids"].shape == (5, max(len(e["input_ids"]) for e in examples))
    assert batch["attention_mask"].sum(1).tolist() == [len(e["input_ids"]) for e in examples]
    assert batch["labels"].tolist() == [e["labels"] for e in examples]


def test_the_truncated_baseline_is_the_bottom_layers_of_the_predecessor(tiny_model, tmp_path):
    options = {"model": str(tiny_model), "dataset": "glue/sst2", "data_dir": str(write_glue(tmp_path, "sst2"))}
    task = text.TextClassificationTask({**options, "num_layers": 2}, 0)
    predecessor = task.build_predecessor()
    truncated = task.truncated(predecessor)
    assert truncated.config.num_hidden_layers == 2 and predecessor.config.num_hidden_layers == 4
    for index in range(2):
        for (name, mine), theirs in zip(
            truncated.bert.encoder.layer[index].state_dict().items(),
            predecessor.bert.encoder.layer[index].state_dict().values(),
            strict=True,
        ):
            assert torch.equal(mine, theirs), name
    assert task.scratch().config.num_hidden_layers == 2


def test_slim_successors_and_their_baselines_share_one_narrower_shape(tiny_model, tmp_path):
    options = {"model": str(tiny_model), "dataset": "glue/sst2", "data_dir": str(write_glue(tmp_path, "sst2"))}
    task = text.TextClassificationTask({**options, "num_layers": 2, "intermediate_size": 24}, 0)
    predecessor = task.build_predecessor()
    truncated, scratch = task.truncated(predecessor), task.scratch()
    for model in (truncated, scratch):
        assert model.config.intermediate_size == 24 and model.config.num_hidden_layers == 2
        assert all(layer.intermediate.dense.out_features == 24 for layer in model.bert.encoder.layer)
    assert truncated.num_parameters() == scratch.num_parameters() < predecessor.num_parameters()
    assert compress(tmp_path, {**options, "num_layers": 2, "intermediate_size": 24}) == 0
    exported = BertForSequenceClassification.from_pretrained(tmp_path / "run" / "model")
    assert exported.config.intermediate_size == 24 and exported.config.num_hidden_layers == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_layers": 4}, "num_layers must be an integer in [1, 4)"),
        ({"dataset": "imdb"}, "unknown dataset 'imdb'"),
        ({"dataset": "glue/wnli"}, "unknown GLUE task 'wnli'"),
        ({"colour": 1}, "unknown bert options ['colour']"),
        ({"num_layers": 2, "intermediate_size": 64}, "intermediate_size must be an integer in [1, 48]"),
        ({"num_layers": 2, "heads": 2}, "heads= needs a config that sets head_dim"),
        ({"num_layers": 2, "init": "middle"}, "init must be one of"),
    ],
)
def test_bad_options_end_in_one_line_before_training(tiny_model, tmp_path, capsys, options, message):
    assert compress(tmp_path, {"model": str(tiny_model), **options}) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1 and not (tmp_path / "run" / "checkpoint.pt").exists()


def test_a_missing_asset_names_the_command_that_fetches_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("THESEUS_CACHE", str(tmp_path / "empty"))
    assert compress(tmp_path, {}) == 2
    assert "theseus fetch all-minilm-l6-v2" in capsys.readouterr().err


def test_the_paper_glue_recipes_use_its_setup():
    from theseus_zoo.recipes import get_recipe

    for task, size in text_recipes.GLUE_TRAIN_SIZES.items():
        recipe = get_recipe(f"bert-base-glue-{task}")
        assert recipe.options == {"model": "bert-base-uncased", "dataset": f"glue/{task}", "num_layers": 6}
        assert (recipe.predecessor.lr, recipe.predecessor.batch_size) == (2e-5, 32)
        assert recipe.predecessor.steps * 32 >= 4 * size > (recipe.predecessor.steps - 1) * 32  # four epochs
        assert recipe.replacing.lr == 2e-5 and recipe.schedule_base == 0.3 and recipe.patience is not None
    assert text.TextClassificationTask({"dataset": "glue/qnli"}, 0).max_length == 256


def test_a_model_that_cannot_be_loaded_ends_in_one_line(tmp_path, capsys):
    assert compress(tmp_path, {"model": str(tmp_path / "no-such-model")}) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("theseus: error: cannot load the model") and "local folder" in error


def test_intermediate_task_transfer_fine_tunes_an_exported_successor_on_another_task(tiny_model, tmp_path):
    sst2 = {"model": str(tiny_model), "dataset": "glue/sst2", "data_dir": str(write_glue(tmp_path / "a", "sst2"))}
    assert compress(tmp_path, {**sst2, "num_layers": 2}, baselines=(), out="first") == 0
    stsb = {"model": str(tmp_path / "first" / "model"), "dataset": "glue/stsb", "num_layers": 1}
    assert compress(tmp_path, {**stsb, "data_dir": str(write_glue(tmp_path / "b", "stsb"))}, baselines=()) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    transferred = report["models"]["predecessor"]
    assert {"validation/pearson", "validation/spearman"} <= set(transferred["test"])  # scored as STS-B
    first = json.loads((tmp_path / "first" / "report.json").read_text())
    assert transferred["parameters"] == first["models"]["theseus"]["parameters"] - 33  # head: 2 x (32 + 1) -> 32 + 1


def test_compress_on_the_users_own_csv_and_jsonl(tiny_model, tmp_path):
    import csv

    rows = sentences(90, 2)
    with open(tmp_path / "reviews.csv", "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["review", "verdict"])
        writer.writerows((sentence, ["bad", "good"][label]) for sentence, label in rows)
    options = {"model": str(tiny_model), "dataset": str(tmp_path / "reviews.csv"), "num_layers": 2}
    options |= {"text_column": "review", "label_column": "verdict"}
    assert compress(tmp_path, options, baselines=("truncated",)) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["metric"] == "accuracy" and len(report["models"]["theseus"]["test_predictions"]) == 9
    exported = AutoModelForSequenceClassification.from_pretrained(tmp_path / "run" / "model")
    assert exported.config.num_labels == 2
    graded = tmp_path / "graded.jsonl"  # floats: a regression, scored like STS-B
    graded.write_text(
        "".join(json.dumps({"text": s, "label": y + 0.25 * (i % 3)}) + "\n" for i, (s, y) in enumerate(rows))
    )
    assert compress(tmp_path, {"model": str(tiny_model), "dataset": str(graded)}, baselines=(), out="graded") == 0
    report = json.loads((tmp_path / "graded" / "report.json").read_text())
    assert report["metric"] == "score" and {"pearson", "spearman"} <= set(report["models"]["theseus"]["test"])


def test_a_bad_data_file_ends_in_one_line_naming_the_file_and_row(tiny_model, tmp_path, capsys):
    (tmp_path / "reviews.csv").write_text("text,label\nfine film,1\n,0\n")
    assert compress(tmp_path, {"model": str(tiny_model), "dataset": str(tmp_path / "reviews.csv")}) == 2
    error = capsys.readouterr().err
    assert "reviews.csv, row 3" in error and error.count("\n") == 1
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def write_reviews(path, rows, *, bom=False, extra=""):
    body = "review,verdict\r\n" + "".join(f"{s},{['negative', 'positive'][y]}\r\n" for s, y in rows) + extra
    path.write_bytes(body.encode("utf-8-sig" if bom else "utf-8"))
    return path


def test_own_data_from_excel_trains_and_its_export_and_report_carry_the_class_names(tiny_model, tmp_path, capsys):
    reviews = write_reviews(tmp_path / "reviews.csv", sentences(60, 3), bom=True)  # Excel's "CSV UTF-8"
    options = {"model": str(tiny_model), "dataset": str(reviews), "num_layers": 2}
    options |= {"text_column": "review", "label_column": "verdict"}
    assert compress(tmp_path, options, baselines=()) == 0
    out = capsys.readouterr().out
    assert "theseus: reviews.csv: labels: classes (every label is a class name: negative, positive)" in out
    digest = hashlib.sha256(reviews.read_bytes()).hexdigest()[:12]  # what a resume compares
    assert f"theseus: your data: reviews.csv (sha256 {digest}): 60 rows, text column 'review', 2 classes in " in out
    exported = AutoModelForSequenceClassification.from_pretrained(tmp_path / "run" / "model")
    assert exported.config.id2label == {0: "negative", 1: "positive"}
    assert exported.config.label2id == {"negative": 0, "positive": 1}
    report = (tmp_path / "run" / "report.md").read_text()
    assert report.startswith("# Compression report: reviews.csv\n")  # titled by the user's file, not the recipe
    assert "Rotten Tomatoes" not in report
    assert (
        f"Recipe minilm-rotten-tomatoes on the user's data. reviews.csv (sha256 {digest}): 60 rows, text column "
        "'review', 2 classes in 'verdict' (negative, positive), inferred from the labels" in report
    )
    assert "stratified by class (seed 0): 48 / 6 / 6 rows train / dev / test" in report


def test_a_resume_on_changed_data_is_refused_naming_the_data(tiny_model, tmp_path, capsys, monkeypatch):
    """Labels swapped in the file, same rows: the run would have reported a predecessor trained on the old labels
    and the rest on the new as one run."""
    from theseus_zoo.training import session

    rows = sentences(60, 3)
    reviews = write_reviews(tmp_path / "reviews.csv", rows)
    options = {"model": str(tiny_model), "dataset": str(reviews), "num_layers": 2}
    options |= {"text_column": "review", "label_column": "verdict"}

    def dies(state, path):
        raise KeyboardInterrupt  # right after the first checkpoint is written

    save = session.atomic_save
    monkeypatch.setattr(session, "atomic_save", lambda state, path: (save(state, path), dies(state, path)))
    assert compress(tmp_path, options, baselines=()) == 130
    monkeypatch.setattr(session, "atomic_save", save)
    write_reviews(reviews, [(text, 1 - label) for text, label in rows])
    config = tmp_path / "config.json"
    args = ["compress", "--recipe", "minilm-rotten-tomatoes", "--config", str(config), "--out", str(tmp_path / "run")]
    capsys.readouterr()
    assert cli.main([*args, "--no-progress", "--resume"]) == 2
    error = capsys.readouterr().err
    assert "--resume: the data changed since the run in" in error and "sha256" in error
    assert "another recipe" not in error


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("a film,NaN\r\n", "reviews.csv: 1 row with no label in 'verdict' (row 62 ('NaN'))"),
        ("a film,nan\r\nthe plot,NA\r\n", "2 rows with no label in 'verdict' (rows 62 ('nan'), 63 ('NA'))"),
        ("a film,null\r\n", "row 62 ('null')"),
        ("a film,\r\n", "row 62 ('')"),
        ("a film,0.5\r\n", "mix numbers and class names: 1 number among 60 class names (row 62 ('0.5'))"),
    ],
)
def test_bad_labels_are_refused_in_one_line_before_any_training_or_write(tiny_model, tmp_path, capsys, extra, message):
    reviews = write_reviews(tmp_path / "reviews.csv", sentences(60, 3), extra=extra)
    options = {"model": str(tiny_model), "dataset": str(reviews), "text_column": "review", "label_column": "verdict"}
    assert compress(tmp_path, options) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_numeric_labels_with_a_stray_value_are_refused_and_missing_ones_dropped_when_asked(
    tiny_model, tmp_path, capsys
):
    rows = sentences(60, 3)
    (tmp_path / "graded.csv").write_text("text,label\n" + "".join(f"{s},{y}\n" for s, y in rows) + "a film,0.5\n")
    options = {"model": str(tiny_model), "dataset": str(tmp_path / "graded.csv")}
    assert compress(tmp_path, options) == 2
    assert "integers but for 1 (row 62 ('0.5'))" in capsys.readouterr().err
    (tmp_path / "graded.csv").write_text("text,label\n" + "".join(f"{s},{y}\n" for s, y in rows) + "a film,NA\n")
    task = text.TextClassificationTask({**options, "missing_labels": "drop", "labels": "classes"}, 0)
    assert task.num_labels == 2 and "1 row without a label dropped" in task.describe_data()
    assert task.label_inference() is None  # given, not inferred


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"labels": "five"}, "reviews.csv set labels to 'classes' (class labels) or 'regression'"),
        ({"dataset": "rotten-tomatoes", "labels": "classes"}, "Rotten Tomatoes takes labels 'binary', 'five'"),
        ({"dataset": "bbc-news", "labels": "five"}, "bbc-news has labels of its own; leave labels out (null)"),
        ({"dataset": "rotten-tomatoes", "missing_labels": "drop"}, "missing_labels is for your own data"),
    ],
)
def test_a_label_option_for_another_dataset_names_the_one_to_use(tmp_path, options, message):
    reviews = write_reviews(tmp_path / "reviews.csv", sentences(20, 3))
    with pytest.raises(ValueError, match=re.escape(message)):
        text.TextClassificationTask({"dataset": str(reviews), **options}, 0)


def test_the_demo_recipe_is_the_five_grade_one_layer_cell_at_a_fraction_of_its_budget():
    from theseus_zoo.recipes import get_recipe

    demo, full = get_recipe("minilm-rt-five-1l-demo"), get_recipe("minilm-rt-five-1l")
    assert demo.options == {**full.options, "max_length": 64} and demo.methods == (
        "theseus+warmup+kd",
        "truncated",
        "kd",
    )
    assert demo.predecessor.steps == 150 < full.predecessor.steps and demo.replacing.steps == 200 < full.replacing.steps
    assert demo.theseus and demo.steps_to_one == demo.replacing.steps // 2


def test_binary_on_own_data_means_two_classes(tmp_path):
    reviews = write_reviews(tmp_path / "reviews.csv", sentences(30, 3))
    columns = {"text_column": "review", "label_column": "verdict"}
    assert text.TextClassificationTask({"dataset": str(reviews), "labels": "binary", **columns}, 0).num_labels == 2
    (tmp_path / "three.csv").write_text("text,label\n" + "".join(f"t{i},{'abc'[i % 3]}\n" for i in range(60)))
    task = text.TextClassificationTask({"dataset": str(tmp_path / "three.csv"), "labels": "binary"}, 0)
    with pytest.raises(
        ValueError,
        match=r"labels='binary' asks for two classes; .*three\.csv has 3 \(a, b, c\): set labels to 'classes'",
    ):
        _ = task.label_names


def test_a_class_with_few_examples_is_warned_on_the_console_and_in_the_report(tiny_model, tmp_path, capsys):
    from theseus_zoo.recipes import get_recipe

    grades = tmp_path / "grades.jsonl"  # one "0.5" among integer labels: a third class of one example
    records = [{"text": s, "label": y} for s, y in sentences(60, 4)] + [{"text": "a film", "label": 0.5}]
    grades.write_text("".join(json.dumps(record) + "\n" for record in records))
    options = {"model": str(tiny_model), "dataset": str(grades), "labels": "classes"}
    recipe = cli._own_data(get_recipe("minilm-rotten-tomatoes").with_overrides({"options": options}), False)
    warning = (
        "grades.jsonl: 1 class in 'label' with fewer than 5 examples or under 1% of the 61 rows, which a classifier "
        "can hardly learn: '0.5': 1 example (row 61 ('0.5')); check those labels, or drop the rows"
    )
    assert f"theseus: warning: {warning}\n" in capsys.readouterr().out
    assert recipe.description.endswith(f" Warning: {warning}.")  # the second line of report.md


@pytest.mark.parametrize("intermediate_size", [None, 24])
def test_a_searched_bert_with_layers_of_several_forms_exports_and_reloads_through_load_exported(
    tiny_model, tmp_path, intermediate_size
):
    """Kept layers beside a layer without attention and the plan's own successor (slim or not): the export holds
    (`hold_export` reloads it with `text.load_exported`, strictly) and computes the same logits."""
    pytest.importorskip("scipy")
    options = {"model": str(tiny_model), "dataset": "glue/sst2", "data_dir": str(write_glue(tmp_path, "sst2"))}
    task = text.TextClassificationTask({**options, "num_layers": 3, "intermediate_size": intermediate_size}, 0)
    model = task.build_predecessor().eval()
    offered, hook = task.candidates(model)
    inputs = task.example_inputs()[1]
    library = th.CandidateLibrary(model, offered, example_kwargs=inputs, on_finalize=hook)
    choice = dict(zip(library.paths, ["keep", "no_attention", "one"], strict=True))  # groups of 2, 1 and 1 layers
    finalized = th.replace_(model, library.plan(choice), example_kwargs=inputs).finalize().eval()
    assert [form["heads"] for form in finalized.config.theseus_layers] == [4, 4, 0, 4]
    task.export(finalized, tmp_path / "model")
    with torch.no_grad():
        torch.testing.assert_close(
            text.load_exported(tmp_path / "model").eval()(**inputs).logits, finalized(**inputs).logits
        )


@pytest.mark.parametrize(
    "budget", [{"params": 0.95}, pytest.param({"latency": 0.9}, marks=pytest.mark.slow)]
)  # latency: each choice assembled, measured
def test_a_budget_on_bert_exports_a_transformers_model_of_the_layers_chosen(tiny_model, tmp_path, budget):
    """Whatever the search chose (the layers of a group, none, or one layer in any form), the export is a
    transformers model that `hf.load_pretrained` rebuilds strictly (plain ``from_pretrained`` when its layers have
    one shape) with a layer per layer kept."""
    pytest.importorskip("scipy")
    options = {"model": str(tiny_model), "dataset": "glue/sst2", "data_dir": str(write_glue(tmp_path, "sst2"))}
    config = tmp_path / "budget.json"
    config.write_text(
        json.dumps(
            {
                "options": {**options, "num_layers": 2},
                "predecessor": {"steps": 6, "eval_every": 6, "batch_size": 16, "lr": 1e-3},
                "replacing": {"steps": 6, "eval_every": 6, "batch_size": 16, "lr": 1e-3},
                "steps_to_one": 3,
                "budget": {**budget, "steps": 3},
            }
        )
    )
    out = tmp_path / "budget"
    args = [
        "compress",
        "--recipe",
        "minilm-rotten-tomatoes",
        "--config",
        str(config),
        "--out",
        str(out),
        "--no-progress",
    ]
    assert cli.main([*args, "--methods", "theseus,truncated"]) == 0
    search = json.loads((out / "report.json").read_text())["search"]
    assert ("latency" in budget) == bool(search["measured_choices"])
    exported = text.load_exported(out / "model")
    kept = sum(2 if name == "keep" else 0 if name == "skip" else 1 for name in search["chosen"].values())
    assert exported.config.num_hidden_layers == kept == len(exported.bert.encoder.layer)
    if set(search["chosen"].values()) <= {"keep", "skip", "one"}:
        AutoModelForSequenceClassification.from_pretrained(out / "model")
