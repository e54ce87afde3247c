"""theseus_zoo.tasks.protocols: which assets each built-in family's options read (known without loading anything)."""

import pytest

from theseus_zoo.data.assets import ASSETS, missing_assets
from theseus_zoo.tasks import build_task
from theseus_zoo.tasks.protocols import ReadsAssets, assets_read


@pytest.mark.parametrize(
    ("family", "options", "assets"),
    [
        ("bert", {"model": "all-minilm-l6-v2", "dataset": "rotten-tomatoes"}, ("all-minilm-l6-v2", "rotten-tomatoes")),
        ("bert", {"model": "some/hub-model", "dataset": "bbc-news"}, ("bbc-news",)),
        ("bert", {"model": "all-minilm-l6-v2", "dataset": "glue/sst2"}, ("all-minilm-l6-v2",)),
        ("resnet", {}, ("fashion-mnist",)),
        ("resnet", {"data_dir": "/my/fashion-mnist"}, ()),
        ("resnet", {"source": "torchvision"}, ()),
        ("gnn", {"dataset": "polblogs"}, ("polblogs",)),
        ("gnn", {"dataset": "karate"}, ()),
        (
            "causal_lm",
            {"model": "smollm2-135m-instruct", "dataset": "rotten-tomatoes"},
            ("smollm2-135m-instruct", "rotten-tomatoes"),
        ),
        ("toy", {}, ()),
    ],
)
def test_a_task_names_the_assets_its_options_read(family, options, assets, tmp_path, monkeypatch):
    monkeypatch.setenv("THESEUS_CACHE", str(tmp_path))  # nothing fetched: naming them must not need them
    task = build_task(family, options, seed=0)
    assert assets_read(task) == assets and set(assets) <= set(ASSETS)
    assert isinstance(task, ReadsAssets) or not assets


def test_missing_assets_are_those_not_fetched_in_order_once(tmp_path, monkeypatch):
    monkeypatch.setenv("THESEUS_CACHE", str(tmp_path))
    (tmp_path / "polblogs").mkdir()
    (tmp_path / "polblogs" / ".complete").touch()
    (tmp_path / "drosophila").mkdir()  # an interrupted fetch: not complete
    assert missing_assets(["drosophila", "polblogs", "fashion-mnist", "drosophila"]) == ["drosophila", "fashion-mnist"]
    with pytest.raises(KeyError, match="unknown asset 'mnist'"):
        missing_assets(["mnist"])
