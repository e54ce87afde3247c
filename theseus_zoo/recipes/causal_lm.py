"""The causal-LM family's recipes: SmolLM2-135M-Instruct compressed on BBC News text, offline, on two CPU cores.

No predecessor phase: the predecessor is the released model. Budget (the default recipe within 30 minutes
on two free cores), timed on a fresh clone (install, ``theseus fetch``, one ``theseus compress``): 200 steps of
4 × 128 tokens per model (102k tokens, a ninth of the training articles) took 7.7 minutes for Theseus, 8.0 for the
``truncated`` baseline and 13.7 for ``kd`` (the 30-layer teacher's forward and a soft cross-entropy over 49,152
tokens of vocabulary per position: 4.1 s a step against 2.4), plus 4 minutes of loading, dev and test evaluation
(64 and 256 sequences), timing and export: 33.5 minutes with all three. So the default recipe trains Theseus and
``truncated`` (about 20 minutes), and ``kd`` is a recipe of its own, as the ShortGPT and LLM-Streamline baselines
are: ``-kd``, ``-shortgpt`` and ``-streamline`` train one baseline (``theseus: false``) on the same data order and
steps, so their reports compare with the main recipe's (same test sequences, per-sequence predictions in
``report.json``).

Each successor starts from the last layer of its group (``init="group_last"``), whose output the next group and
the final norm expect, as in the MiniLM recipes. Untrained, no init is close: on 16 dev sequences the 15-layer
starts measured perplexity 5.0e9 (``"first"``), 1.3e6 (``"every_other"``) and 5.1e6 (``"group_last"``) against 54
for the predecessor and 708 for ShortGPT's layers (``python -m benchmarks.llm``).
"""

from __future__ import annotations

from .recipe import Phase, Recipe, register_recipe

SMOLLM2 = {"model": "smollm2-135m-instruct", "dataset": "bbc-news", "sequence_length": 128, "init": "group_last"}
SMOLLM2_PHASE = Phase(steps=200, lr=1e-4, batch_size=4, eval_every=100)


def _smollm2_recipe(num_layers: int, truncation: str = "plan") -> Recipe:
    """The main recipe (``"plan"``: Theseus and ``truncated``) or one of its one-baseline recipes on the same steps:
    ``"kd"`` (KD into the main recipe's layers), ``"shortgpt"``, ``"streamline"`` (``truncated`` from their model)."""
    options, suffix, theseus = {**SMOLLM2, "num_layers": num_layers}, f"-{truncation}", False
    baselines: tuple[str, ...] = ("truncated",)
    if truncation == "plan":
        suffix, theseus = "", True
        method = f"{num_layers} layers, LM loss on BBC News text, with the truncated baseline (CPU, ~20 min)"
    elif truncation == "kd":
        baselines = ("kd",)
        method = f"{num_layers} layers by vanilla KD into the main recipe's layers (baseline; CPU, ~18 min)"
    else:
        names = {
            "shortgpt": "ShortGPT (lowest Block Influence removed)",
            "streamline": "LLM-Streamline (run -> 1 layer)",
        }
        options["truncation"] = truncation
        method = f"{num_layers} by {names[truncation]}, then the LM loss (baseline)"
    return Recipe(
        name=f"smollm2-30to{num_layers}{suffix}",
        family="causal_lm",
        description=f"SmolLM2-135M-Instruct 30 -> {method}",
        options=options,
        replacing=SMOLLM2_PHASE,
        steps_to_one=100,
        baselines=baselines,
        theseus=theseus,
    )


SMOLLM2_RECIPES = {
    (num_layers, truncation): register_recipe(_smollm2_recipe(num_layers, truncation))
    for num_layers in (15, 20)
    for truncation in ("plan", "kd", "shortgpt", "streamline")
}

SMOLLM2_INFLUENCE = {
    num_layers: register_recipe(
        Recipe(
            name=f"smollm2-30to{num_layers}-influence",
            family="causal_lm",
            description=f"SmolLM2-135M-Instruct 30 -> {num_layers} layers, Theseus from ShortGPT's layers "
            "(groups by Block Influence), LM loss on BBC News text",
            options={**SMOLLM2, "num_layers": num_layers, "groups": "block_influence", "init": "first"},
            replacing=SMOLLM2_PHASE,
            steps_to_one=100,
            baselines=(),
        )
    )
    for num_layers in (15, 20)
}
"""Theseus whose untrained successor model is ShortGPT's (``groups: block_influence``): each layer ShortGPT keeps
starts the successor of a group made of it and the removed layers after it. No baseline: its ``truncated`` would be
the ``-shortgpt`` recipe's, trained on the same steps and data order."""

SMOLLM2_GPU = register_recipe(
    Recipe(
        name="smollm2-30to15-gpu",
        family="causal_lm",
        description="SmolLM2-135M-Instruct 30 -> 15 layers, LM loss on BBC News text, sized for one GPU (not run yet)",
        options={**SMOLLM2, "num_layers": 15, "sequence_length": 512, "dev_sequences": 256, "test_sequences": None},
        replacing=Phase(steps=1000, lr=1e-4, batch_size=8, eval_every=100),
        steps_to_one=500,
        baselines=("truncated", "kd"),
    )
)
"""The CPU recipe's run at GPU scale: 1,000 steps of 8 × 512 tokens (4.1M tokens, about four passes over the
training articles, against a ninth of a pass on CPU), every test sequence scored. Its ``-shortgpt`` /
``-streamline`` counterparts are the CPU ones with ``--config`` overrides of the same fields."""
