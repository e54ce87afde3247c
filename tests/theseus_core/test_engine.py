"""Properties of replace_ and the Theseus handle, over random toy models and groupings."""

import copy
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import theseus_core as th
from theseus_core.testing import (
    ToyBlock,
    ToyConvBlock,
    ToyConvNet,
    ToyStack,
    assert_replacement_equivalence,
    replacement_cases,
)


def run(model, inputs, *, training, seed=0):
    model.train(training)
    torch.manual_seed(seed)
    return model(*inputs)


def state(model):
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def assert_same_state(actual, expected):
    assert list(actual) == list(expected)
    for name, tensor in expected.items():
        assert torch.equal(actual[name], tensor), name


# ------------------------------------------------------------- equivalences


@given(replacement_cases())
def test_rate_zero_reproduces_the_original_in_training_mode(case):
    expected = run(case.model, case.example_inputs, training=True)
    theseus = th.replace_(case.model, case.specs, seed=3)
    theseus.rate = 0.0
    assert torch.equal(run(case.model, case.example_inputs, training=True), expected)


@given(replacement_cases(), st.sampled_from([True, False]))
def test_rate_one_and_eval_equal_the_finalized_model(case, training):
    theseus = th.replace_(case.model, case.specs)
    theseus.rate = 1.0
    expected = run(case.model, case.example_inputs, training=training)
    compact = theseus.finalize()
    assert not any(isinstance(m, th.ReplacementSite) for m in compact.modules())
    torch.testing.assert_close(run(compact, case.example_inputs, training=training), expected, rtol=0, atol=0)


@given(replacement_cases())
def test_eval_mode_runs_successors_whatever_the_rate(case):
    theseus = th.replace_(case.model, case.specs)
    theseus.rate = 0.0  # eval ignores the rate
    evaluated = run(case.model, case.example_inputs, training=False)
    theseus.rate = 1.0
    assert torch.equal(run(case.model, case.example_inputs, training=False), evaluated)
    assert all(route is None for route in theseus.last_routes.values())  # no draw in eval


@given(replacement_cases())
def test_eval_route_predecessor_reproduces_the_original_in_eval(case):
    expected = run(case.model, case.example_inputs, training=False)
    th.replace_(case.model, case.specs, eval_route="predecessor")
    assert torch.equal(run(case.model, case.example_inputs, training=False), expected)


@given(replacement_cases(max_blocks=4))
def test_assert_replacement_equivalence_accepts_every_random_case(case):
    assert_replacement_equivalence(case.model, case.specs, case.example_inputs)


def test_assert_replacement_equivalence_takes_the_batches_replace_takes_and_checks_each():
    class NoBatchOfThree(ToyBlock):
        def forward(self, x, scale=None):
            if x.shape[0] == 3:
                raise ValueError("no batch of three")
            return super().forward(x, scale)

    model = ToyStack(num_blocks=4)
    specs = [th.ModuleSpec("blocks[0:2]", lambda group: NoBatchOfThree(16))]
    (x,) = model.example_inputs(batch_size=4)
    assert_replacement_equivalence(model, specs, [(x,), {"x": x[:2]}])  # a tuple, a dict of keyword arguments
    # replace_ runs successors on the first batch only; the properties hold on every batch
    with pytest.raises(AssertionError, match=r"at rate 1 \(example batch 1\) raised ValueError .*: no batch of three"):
        assert_replacement_equivalence(model, specs, [(x,), (x[:3],)])
    with pytest.raises(TypeError, match=r"example_inputs must be a tuple .* got Tensor"):  # not split into rows
        assert_replacement_equivalence(model, specs, x[:1])


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_recomputes_the_route_its_forward_took(reentrant):
    """A checkpointed segment holding a site runs again inside the backward: it must take the same route (a new
    draw made the recompute differ, which torch refuses), and the draw is not counted twice."""

    class Checkpointed(ToyStack):
        def forward(self, x):
            hidden = self.embed(x)
            if reentrant:  # the reentrant form passes gradients on only for inputs that require grad
                hidden = hidden.detach().requires_grad_()
            return self.head(torch.utils.checkpoint.checkpoint(self.blocks, hidden, use_reentrant=reentrant))

    def train(model):
        theseus = th.replace_(model, th.plan(model, "blocks", num_groups=2, successor=th.copy_module(0)), seed=2)
        theseus.rate = 0.5
        gradients = []
        for step in range(8):
            torch.manual_seed(step)
            output = model.train()(*model.example_inputs(seed=step))
            if output.requires_grad:
                output.square().mean().backward()
            gradients.append([p.grad.clone() if p.grad is not None else None for p in theseus.successor_parameters()])
            for p in theseus.successor_parameters():
                p.grad = None
        return gradients, theseus.route_counts

    torch.manual_seed(0)
    plain = ToyStack(num_blocks=4)
    checkpointed = Checkpointed(num_blocks=4)
    checkpointed.load_state_dict(plain.state_dict())
    (expected, counts), (gradients, checkpointed_counts) = train(plain), train(checkpointed)
    assert checkpointed_counts == counts and all(calls == 8 for calls, _ in counts.values())
    for wanted, got in zip(expected, gradients, strict=True):
        for a, b in zip(wanted, got, strict=True):
            assert (a is None) == (b is None) and (a is None or torch.allclose(a, b))

    model = Checkpointed(num_blocks=4)  # a hybrid evaluation between a forward and its backward replays nothing
    theseus = th.replace_(
        model, th.plan(model, "blocks", num_groups=2, successor=th.copy_module(0)), eval_route="hybrid"
    )
    theseus.rate = 0.5
    for step in range(6):
        output = model.train()(*model.example_inputs(seed=step))
        with torch.no_grad():
            model.eval()(*model.example_inputs(seed=step))
        model.train()  # a recompute runs in the mode the model is in
        if output.requires_grad:
            output.square().mean().backward()  # a recompute on another route than its forward's would raise


# ------------------------------------------------------------- gradients


@given(replacement_cases(), st.floats(0, 1))
def test_only_successor_parameters_get_gradients(case, rate):
    theseus = th.replace_(case.model, case.specs, seed=1)
    successors = {id(p) for p in theseus.successor_parameters()}
    theseus.rate = rate
    loss = run(case.model, case.example_inputs, training=True).square().mean()
    if loss.requires_grad:  # every group may have taken its frozen predecessor
        loss.backward()
    else:
        assert all(route is False for route in theseus.last_routes.values())
    for name, param in case.model.named_parameters():
        assert (param.grad is None) or id(param) in successors, name
        assert param.requires_grad == (id(param) in successors), name


@given(replacement_cases(), st.booleans())
def test_optimizer_steps_leave_predecessors_unchanged(case, train_others):
    theseus = th.replace_(case.model, case.specs, seed=2, train_others=train_others)
    predecessors = {name: p.clone() for name, p in case.model.named_parameters() if ".predecessor." in name}
    others = {name: p.clone() for name, p in case.model.named_parameters() if ".successor." not in name}
    optimizer = torch.optim.AdamW(theseus.trainable_parameters(), lr=0.1, weight_decay=0.1)
    schedule = th.LinearSchedule(base=0.3, k=0.2)
    for step in range(5):
        theseus.rate = schedule(step)
        loss = run(case.model, case.example_inputs, training=True, seed=step).square().mean()
        if loss.requires_grad:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()
    current = dict(case.model.named_parameters())
    for name, before in predecessors.items():
        assert torch.equal(current[name], before), name
    if not train_others:
        for name, before in others.items():
            assert torch.equal(current[name], before), name


def test_train_others_makes_the_head_trainable():
    model = ToyStack()
    theseus = th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))], train_others=True)
    trainable = {id(p) for p in theseus.trainable_parameters()}
    assert id(model.head.weight) in trainable and id(model.embed.weight) in trainable
    assert not any(p.requires_grad for p in theseus.sites[0].predecessor.parameters())
    theseus.finalize()
    assert model.head.weight.requires_grad and model.blocks[0].fc1.weight.requires_grad


def test_a_parameter_a_group_shares_with_the_rest_stays_frozen_under_train_others():
    """Tied weights (a head reusing a layer's): frozen means frozen, so that restore gives back the same values."""
    model = ToyStack()
    model.tied = nn.Linear(model.blocks[1].fc1.in_features, model.blocks[1].fc1.out_features)
    model.tied.weight = model.blocks[1].fc1.weight
    before = {key: value.clone() for key, value in model.state_dict().items()}
    theseus = th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))], train_others=True)
    trainable = {id(p) for p in theseus.trainable_parameters()}
    assert id(model.tied.weight) not in trainable and id(model.tied.bias) in trainable
    theseus.restore()
    assert all(torch.equal(before[key], value) for key, value in model.state_dict().items())
    assert model.tied.weight is model.blocks[1].fc1.weight and model.tied.weight.requires_grad


# ------------------------------------------------------------ finalize / restore


@given(replacement_cases())
def test_finalize_leaves_no_predecessor_parameter(case):
    predecessor_ids = set()
    theseus = th.replace_(case.model, case.specs)
    for site in theseus.sites:
        predecessor_ids |= {id(p) for p in site.predecessor.parameters()}
    expected = sum(p.numel() for n, p in case.model.named_parameters() if ".predecessor." not in n)
    compact = theseus.finalize()
    assert sum(p.numel() for p in compact.parameters()) == expected
    assert not predecessor_ids & {id(p) for p in compact.parameters()}
    assert all(p.requires_grad for p in compact.parameters())  # an ordinary model again


@given(replacement_cases())
def test_restore_round_trips_the_state_dict_and_the_modules(case):
    before = state(case.model)
    modules_before = [(name, id(m)) for name, m in case.model.named_modules()]
    flags = [p.requires_grad for p in case.model.parameters()]
    theseus = th.replace_(case.model, case.specs, seed=5)
    theseus.rate = 0.5
    run(case.model, case.example_inputs, training=True)
    restored = theseus.restore()
    assert restored is case.model
    assert_same_state(state(case.model), before)
    assert [(name, id(m)) for name, m in case.model.named_modules()] == modules_before
    assert [p.requires_grad for p in case.model.parameters()] == flags


@pytest.mark.parametrize("predecessor_eval", [False, True])
def test_restore_gives_the_groups_the_models_mode_and_leaves_the_other_modules_theirs(predecessor_eval):
    model = ToyConvNet(num_blocks=4).train()
    model.blocks[3].bn.eval()  # a batch norm the user keeps frozen
    theseus = th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))], predecessor_eval=predecessor_eval)
    theseus.restore()
    assert [module.training for module in model.blocks] == [True] * 4
    assert not model.blocks[3].bn.training


def test_finished_handles_refuse_further_work():
    model = ToyStack()
    theseus = th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))])
    theseus.finalize()
    with pytest.raises(RuntimeError, match="already finalized: the model keeps its successors for good"):
        theseus.restore()
    for parameters in (theseus.successor_parameters, theseus.trainable_parameters):  # when called, not iterated
        with pytest.raises(RuntimeError, match="already finalized"):
            parameters()
    for setting in ({"rate": 0.5}, {"eval_route": "predecessor"}):  # nothing routes any more: not silently kept
        with pytest.raises(RuntimeError, match="already finalized"):
            setattr(theseus, *next(iter(setting.items())))
    assert theseus.rate == 0.0 and theseus.eval_route == "successor"  # still read, for a report
    theseus.load_state_dict(theseus.state_dict())  # a checkpoint saved after finalize still loads (Lightning's test)
    restored = th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))])
    restored.restore()
    with pytest.raises(RuntimeError, match="already restored: the model is the original again; call replace_ again"):
        restored.rate = 1.0


def test_replace_after_finalize_compresses_again():
    model = ToyStack(num_blocks=4)
    th.replace_(model, th.plan(model, "blocks", group_sizes=[2, 2], successor=th.copy_module(0))).finalize()
    assert len(model.blocks) == 2
    th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))]).finalize()
    assert len(model.blocks) == 1


def test_on_finalize_hook_runs_on_the_compact_model():
    model = ToyStack(num_blocks=4)
    seen = []
    plan = th.Plan(th.plan(model, "blocks", num_groups=3, successor=th.copy_module(0)).specs, seen.append)
    th.replace_(model, plan).finalize()
    assert seen == [model] and len(model.blocks) == 3


class ReadsItsFirstBlock(nn.Module):
    """A container that reads an attribute of its first block, as ``nn.TransformerEncoder`` does."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(ToyBlock(8, dropout=0.0) for _ in range(4))
        self.blocks[0].gain = 2.0

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x * self.blocks[0].gain


def fresh_block(gain: float | None):
    def build(group):
        block = ToyBlock(8, dropout=0.0)
        if gain is not None:
            block.gain = gain
        return block

    return build


@pytest.mark.parametrize(
    ("gain", "message"),
    [
        (None, r"^the finalized model raised AttributeError on the example batch in eval mode, .*'gain'.*still "),
        (3.0, r"^on the example batch in eval mode the finalized model's output differs by up to .* at rate 1"),
    ],
    ids=["raises", "differs"],
)
def test_a_finalize_that_would_break_the_model_is_refused_and_undone(gain, message):
    torch.manual_seed(0)
    model = ReadsItsFirstBlock()
    x = torch.randn(4, 8)
    edited = {"layers": 4}

    def hook(compact):
        edited["layers"] = len(compact.blocks)
        return lambda: edited.update(layers=4)

    specs = th.plan(model, "blocks", num_groups=2, successor=fresh_block(gain))
    before = state(model)
    theseus = th.replace_(model, th.Plan(specs.specs, hook), example_inputs=(x,))
    flags = [p.requires_grad for p in model.parameters()]
    children = list(model.blocks)
    with pytest.raises(th.VerificationError, match=message) as refused:
        theseus.finalize()
    assert "\n" not in str(refused.value)
    assert list(model.blocks) == children and all(isinstance(b, th.ReplacementSite) for b in children)
    assert [p.requires_grad for p in model.parameters()] == flags and edited == {"layers": 4}
    theseus.rate = 1.0
    model(x)  # still replacing
    theseus.restore()
    assert_same_state(state(model), before)


class ReadsItsFirstBlockInTraining(ReadsItsFirstBlock):
    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x * self.blocks[0].gain if self.training else x


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (ReadsItsFirstBlock, r"^the finalized model raised AttributeError on the example batch in eval mode.*'gain'"),
        (
            ReadsItsFirstBlockInTraining,  # finalize checks eval mode; the kit runs the finalized model in both
            r"^the finalized model raised AttributeError in training mode on the example inputs: 'ToyBlock' object "
            r"has no attribute 'gain'",
        ),
    ],
    ids=["at-finalize", "in-training"],
)
def test_the_test_kit_names_the_cause_when_the_finalized_model_raises(model, message):
    torch.manual_seed(0)
    model = model()
    specs = th.plan(model, "blocks", num_groups=2, successor=fresh_block(None))
    with pytest.raises((th.VerificationError, AssertionError), match=message):
        assert_replacement_equivalence(model, specs, (torch.randn(4, 8),))


@pytest.mark.parametrize("options", [{"predecessor_eval": True}, {"eval_route": "predecessor"}])
@pytest.mark.parametrize("toy", [ToyStack, ToyConvNet])
def test_the_test_kit_takes_every_replace_option(toy, options):
    torch.manual_seed(0)
    model = toy()  # dropout (ToyStack) and batch norm (ToyConvNet) behave otherwise in eval mode
    assert_replacement_equivalence(
        model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))], model.example_inputs(), **options
    )


def test_a_finalize_that_keeps_the_model_passes_its_check():
    torch.manual_seed(0)
    model, x = ReadsItsFirstBlock(), torch.randn(4, 8)
    theseus = th.replace_(
        model, th.plan(model, "blocks", num_groups=2, successor=fresh_block(2.0)), example_inputs=(x,)
    )
    theseus.rate = 1.0
    expected = run(model, (x,), training=False)
    assert torch.equal(run(theseus.finalize(), (x,), training=False), expected)


# ---------------------------------------------------------------- routing


def routes(model, theseus, inputs, steps, start=0):
    taken = []
    for step in range(start, start + steps):
        theseus.rate = 0.5
        run(model, inputs, training=True, seed=step)
        taken.append(tuple(theseus.last_routes.values()))
    return taken


@given(replacement_cases(), st.integers(0, 2**31))
def test_same_seed_takes_the_same_routes(case, seed):
    twin = copy.deepcopy(case.model)
    first = routes(case.model, th.replace_(case.model, case.specs, seed=seed), case.example_inputs, 12)
    second = routes(twin, th.replace_(twin, case.specs, seed=seed), case.example_inputs, 12)
    assert first == second


@given(replacement_cases(), st.integers(1, 10))
def test_resuming_from_the_state_dict_takes_the_same_routes(case, interrupt_at):
    twin = copy.deepcopy(case.model)
    uninterrupted = routes(case.model, th.replace_(case.model, case.specs, seed=7), case.example_inputs, 12)

    theseus = th.replace_(twin, case.specs, seed=7)
    before = routes(twin, theseus, case.example_inputs, interrupt_at)
    saved = copy.deepcopy(theseus.state_dict())
    routes(twin, theseus, case.example_inputs, 3)  # work lost in the crash
    theseus.restore()
    resumed = th.replace_(twin, case.specs, seed=123)  # the seed comes back from the state
    resumed.load_state_dict(saved)
    after = routes(twin, resumed, case.example_inputs, 12 - interrupt_at, start=interrupt_at)
    assert before + after == uninterrupted


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda state: state.pop("calls"), "has no 'calls'"),
        (lambda state: state.update(paths=["blocks[0:3]"]), "is for groups"),
        (lambda state: state.update(rate=1.5), "rate must be a number in"),
        (lambda state: state.update(eval_route="other"), "eval_route must be one of"),
        (lambda state: state.update(seed="x"), "seed must be an integer"),
        (lambda state: state.update(calls=[1, 2, 3]), r"calls must be 2 integers \(one per group\)"),
        (lambda state: state.update(successor_calls=[0.5, 1]), "successor_calls must be 2 integers"),
        (lambda state: state.update(generator_state=torch.zeros(3, dtype=torch.uint8)), "generator's state"),
    ],
)
def test_a_bad_routing_state_is_refused_before_any_of_it_is_written(change, message):
    """Every entry checked first: a state that fails on its generator or counters leaves the rate and the seed."""
    model = ToyStack(num_blocks=4)
    theseus = th.replace_(model, th.plan(model, "blocks", num_groups=2, successor=th.copy_module(0)), seed=3)
    theseus.rate = 0.25
    model.train()(*model.example_inputs())
    before = copy.deepcopy(theseus.state_dict())
    state = {**copy.deepcopy(before), "rate": 0.9, "seed": 123}
    change(state)
    with pytest.raises(ValueError, match=message):
        theseus.load_state_dict(state)
    after = theseus.state_dict()
    assert after.keys() == before.keys() and torch.equal(after.pop("generator_state"), before.pop("generator_state"))
    assert after == before


@pytest.mark.parametrize("rate", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_replacement_frequency_matches_the_rate(rate):
    model = ToyStack(num_blocks=6, container="list")
    theseus = th.replace_(model, th.plan(model, "blocks", num_groups=3, successor=th.copy_module(0)), seed=11)
    theseus.rate = rate
    draws = 20_000
    with torch.no_grad():
        for _ in range(4):  # through the model: every site draws once per forward
            model(*model.example_inputs())
    calls, successor_calls = theseus.route_counts["blocks[0:2]"]
    assert calls == 4
    router = theseus.sites[0]._router
    successes = sum(router.choose(0, True) for _ in range(draws))  # then directly, to see the rate precisely
    assert theseus.route_counts["blocks[0:2]"] == (draws + 4, successes + successor_calls)
    # 4.5 standard deviations of a binomial: ±1.6 points at p = 0.5, a false alarm about once in 150,000 runs
    assert abs(successes - rate * draws) <= 4.5 * math.sqrt(draws * rate * (1 - rate))


def test_routes_do_not_touch_the_global_rng():
    model = ToyStack(dropout=0.0)  # dropout would draw from the global RNG itself
    theseus = th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))])
    theseus.rate = 0.5
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    model.train()
    with torch.no_grad():
        for _ in range(5):
            model.blocks[0](torch.zeros(2, 16))
    assert torch.equal(torch.rand(3), expected)


# ----------------------------------------------------------- rate validation


@pytest.mark.parametrize("bad", [-0.01, 1.01, float("nan"), float("inf"), "0.5", None, True])
def test_invalid_rates_raise_and_keep_the_rate(bad):
    theseus = th.replace_(ToyStack(), [th.ModuleSpec("blocks[0:2]", th.copy_module(0))])
    theseus.rate = 0.25
    with pytest.raises(ValueError, match="rate"):
        theseus.rate = bad
    assert theseus.rate == 0.25


def test_rate_accepts_a_scalar_tensor():
    theseus = th.replace_(ToyStack(), [th.ModuleSpec("blocks[0:2]", th.copy_module(0))])
    theseus.rate = torch.tensor(0.75)
    assert theseus.rate == 0.75


# ------------------------------------------------- invalid input, model untouched


def bad_specs(model):
    """Each entry: (specs, options, the message the error must match)."""
    narrow = lambda group: ToyBlock(4)  # noqa: E731 - a narrower block without projections
    copy0 = th.copy_module(0)
    return [
        ([th.ModuleSpec("blokcs[0:2]", copy0)], {}, "no submodule 'blokcs'"),
        ([th.ModuleSpec("blocks[0:9]", copy0)], {}, "out of range"),
        ([th.ModuleSpec("blocks[2:2]", copy0)], {}, "out of range or empty"),
        ([th.ModuleSpec("blocks[7]", copy0)], {}, "out of range"),
        ([th.ModuleSpec("head[0:1]", copy0)], {}, "only an nn.ModuleList or nn.Sequential"),
        ([th.ModuleSpec("blocks[0:2]", copy0), th.ModuleSpec("blocks[1:3]", copy0)], {}, "overlap"),
        ([th.ModuleSpec("blocks", copy0), th.ModuleSpec("blocks[3]", copy0)], {}, "overlap"),
        (  # a stateless module of a group is no group of its own
            [th.ModuleSpec("blocks[0:2]", copy0), th.ModuleSpec("blocks[1].dropout", lambda g: nn.Identity())],
            {},
            r"'blocks\[1\].dropout' lies inside group 'blocks\[0:2\]'",
        ),
        ([th.ModuleSpec("blocks[0:2]", copy0), th.ModuleSpec("blocks[0:2]", copy0)], {}, "appears twice"),
        ([th.ModuleSpec("blocks[0:2]", copy0), th.ModuleSpec("blocks[0:2]", copy0)][:1] * 2, {}, "appears twice"),
        ([th.ModuleSpec("blocks[0:2]", lambda group: group[0])], {}, "contains a module of the model"),
        ([th.ModuleSpec("blocks[0:2]", lambda group: 3)], {}, "not an nn.Module"),
        ([th.ModuleSpec("blocks[0:2]")], {}, "no successor registered"),
        ([th.ModuleSpec("blocks[0:2]", lambda group: nn.Linear(16, 4))], {}, r"returns .*16.* add out_proj='linear'"),
        ([th.ModuleSpec("blocks[0:2]", narrow)], {}, "failed on the group's input"),
        ([th.ModuleSpec("blocks[0:2]", narrow, in_proj="linear")], {}, "add out_proj='linear'"),
        ([th.ModuleSpec("blocks[0:2]", lambda g: nn.ReLU(), in_proj="linear")], {}, "cannot infer the successor"),
        ([], {}, "non-empty"),
        ([th.ModuleSpec("blocks[0:2]", copy0)], {"compile": {"mode": "bogus"}}, "compile=.*Unrecognized mode=bogus"),
        ([th.ModuleSpec("blocks[0:2]", copy0)], {"compile": {"bogus": 1}}, "compile=.*unexpected keyword"),
        ([th.ModuleSpec("blocks[0:2]", copy0)], {"example_inputs": model.example_inputs()[0]}, "must be a tuple"),
        ([th.ModuleSpec("blocks[0:2]", copy0)], {"example_kwargs": [1]}, "example_kwargs must be a mapping"),
    ]


@pytest.mark.parametrize("index", range(22))
def test_invalid_specs_raise_before_any_mutation(index):
    model = ToyStack(num_blocks=4)
    specs, options, message = bad_specs(model)[index]
    options = {"example_inputs": model.example_inputs(), "registry": th.SuccessorRegistry(), **options}
    before = state(model)
    structure = repr(model)
    flags = [p.requires_grad for p in model.parameters()]
    with pytest.raises((ValueError, TypeError, LookupError, RuntimeError), match=message):
        th.replace_(model, specs, **options)
    assert repr(model) == structure
    assert_same_state(state(model), before)
    assert [p.requires_grad for p in model.parameters()] == flags


def test_a_module_instance_is_no_successor_factory():
    with pytest.raises(TypeError, match=r"got a module instance \(Linear\).*pass `th.copy_module\(0\)` or a function"):
        th.ModuleSpec("blocks[0:2]", nn.Linear(16, 16))
    with pytest.raises(TypeError, match=r"pass `th.copy_module\(0\)` or a function"):
        th.plan(ToyStack(), "blocks", num_groups=2, successor=ToyBlock(16))


def test_a_strided_successor_gets_no_projection_hint():
    model = ToyConvNet(channels=8)
    strided = lambda group: nn.Conv2d(8, 8, 3, stride=2, padding=1)  # noqa: E731
    with pytest.raises(ValueError, match=r"differ in dimension 2, 3 .* which no projection fixes") as raised:
        th.replace_(model, [th.ModuleSpec("blocks[0:2]", strided)], example_inputs=model.example_inputs())
    assert "out_proj" not in str(raised.value)
    with pytest.raises(ValueError, match=r"add out_proj='linear'"):  # a width, which a projection fixes
        th.replace_(
            model,
            [th.ModuleSpec("blocks[0:2]", lambda group: nn.Conv2d(8, 4, 1))],
            example_inputs=model.example_inputs(),
        )


def test_captured_group_inputs_are_copies():
    class Growing(nn.Module):  # like DenseNet's dense block: each layer gets the list of all earlier features
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Concat(4 * (i + 1)) for i in range(3)])

        def forward(self, x):
            features = [x]
            for layer in self.layers:
                features.append(layer(features))
            return torch.cat(features, 1)

    class Concat(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.linear = nn.Linear(width, 4)

        def forward(self, features):
            return self.linear(torch.cat(features, 1))

    model = Growing()
    assert_replacement_equivalence(model, [th.ModuleSpec("layers[1]", th.copy_module(0))], (torch.randn(2, 4),))


def test_plan_slices_a_root_sequential():
    mlp = nn.Sequential(*(nn.Linear(8, 8) for _ in range(4)))
    plan = th.plan(mlp, "", num_groups=2, successor=th.copy_module(0))
    assert [spec.path for spec in plan] == ["[0:2]", "[2:4]"]
    assert_replacement_equivalence(mlp, plan, (torch.randn(2, 8),))
    theseus = th.replace_(mlp, plan)
    assert len(theseus.finalize()) == 2
    with pytest.raises(ValueError, match=r"plan\(model, ''\) groups the model's own children.*not a ToyStack"):
        th.plan(ToyStack(), "", num_groups=2)


class Narrowing(nn.Module):
    """Takes what a block takes, returns a narrower tensor."""

    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, 2)

    def forward(self, x, *args, **kwargs):
        return self.linear(x)


@st.composite
def invalid_specs(draw):
    """A random valid case with one spec made invalid in a random way, and the message that must say so."""
    case = draw(replacement_cases())
    specs = list(case.specs)
    index = draw(st.integers(0, len(specs) - 1))
    start, stop = (int(bound) for bound in specs[index].path[len("blocks[") : -1].split(":"))
    size = len(case.model.blocks)
    width = case.model.blocks[0].width
    broken, message = draw(
        st.sampled_from(
            [
                (th.ModuleSpec(f"blocks[{start}:{size + 1}]", th.copy_module(0)), "out of range"),
                (th.ModuleSpec(f"blocks[{start}:{start}]", th.copy_module(0)), "out of range or empty"),
                (th.ModuleSpec(f"blocks[{start}]", th.copy_module(0)), "overlap"),  # overlaps its own group
                (th.ModuleSpec(f"blokcs[{start}:{stop}]", th.copy_module(0)), "no submodule 'blokcs'"),
                (th.ModuleSpec(f"blocks[{start}:{stop}]", lambda group: group[0]), "contains a module of the model"),
                (th.ModuleSpec(f"blocks[{start}:{stop}]", lambda group: nn.Linear(1, 1)), "failed on the group's"),
                (th.ModuleSpec(f"blocks[{start}:{stop}]", lambda group: Narrowing(width)), "add out_proj"),
                (th.ModuleSpec(f"blocks[{start}:{stop}]", lambda group: "block"), "not an nn.Module"),
            ]
        )
    )
    if broken.path == f"blocks[{start}]":
        return case, [*specs, broken], message
    return case, [*specs[:index], broken, *specs[index + 1 :]], message


@given(invalid_specs())
def test_random_invalid_specs_raise_before_any_mutation(broken):
    case, specs, message = broken
    before, structure = state(case.model), repr(case.model)
    flags = [p.requires_grad for p in case.model.parameters()]
    with pytest.raises((ValueError, TypeError, RuntimeError), match=message):
        th.replace_(case.model, specs, example_inputs=case.example_inputs)
    assert repr(case.model) == structure
    assert_same_state(state(case.model), before)
    assert [p.requires_grad for p in case.model.parameters()] == flags


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seed": 1.5}, "seed"),
        ({"eval_route": "teacher"}, "eval_route"),
        ({"compile": "yes"}, "compile"),
        ({"compile": {"backend": "nope"}}, "Invalid backend"),
    ],
)
def test_invalid_options_raise_before_any_mutation(kwargs, message):
    model = ToyStack()
    structure = repr(model)
    with pytest.raises((TypeError, ValueError), match=message):
        th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))], **kwargs)
    assert repr(model) == structure


def test_replacing_twice_raises():
    model = ToyStack()
    th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))])
    with pytest.raises(ValueError, match="already a Theseus site"):
        th.replace_(model, [th.ModuleSpec("blocks[2:4]", th.copy_module(0))])


# --------------------------------------------------------------- details


def test_uneven_groups_collapse_and_renumber_the_container():
    model = ToyStack(num_blocks=12, container="list")
    theseus = th.replace_(model, th.plan(model, "blocks", group_sizes=[3, 3, 2, 2, 1, 1], successor=th.copy_module(0)))
    assert [len(site.predecessor.layers) for site in model.blocks] == [3, 3, 2, 2, 1, 1]
    assert list(model.blocks._modules) == [str(i) for i in range(6)]
    theseus.finalize()
    fresh = ToyStack(num_blocks=6, container="list")
    fresh.load_state_dict(model.state_dict(), strict=True)


def test_single_module_groups_keep_their_attribute_name():
    model = ToyStack()
    theseus = th.replace_(model, [th.ModuleSpec("head", lambda group: nn.Linear(16, 3))])
    assert isinstance(model.head, th.ReplacementSite)
    theseus.finalize()
    assert isinstance(model.head, nn.Linear)


def test_conv_successors_get_one_by_one_conv_projections():
    model = ToyConvNet(channels=8)
    theseus = th.replace_(
        model,
        [th.ModuleSpec("blocks[0:3]", lambda group: ToyConvBlock(4), in_proj="linear", out_proj="linear")],
        example_inputs=model.example_inputs(),
    )
    projections = theseus.sites[0].successor
    assert isinstance(projections.in_proj, nn.Conv2d) and projections.in_proj.kernel_size == (1, 1)
    assert (projections.in_proj.in_channels, projections.out_proj.out_channels) == (8, 8)
    assert_replacement_equivalence(
        ToyConvNet(channels=8),
        [th.ModuleSpec("blocks[1:3]", lambda group: ToyConvBlock(4), in_proj="linear", out_proj="linear")],
        ToyConvNet().example_inputs(),
    )


def test_projections_take_the_widths_of_a_groups_outer_layers_past_activations_and_norms():
    """A plain ``nn.Sequential`` CNN: a group may begin or end with a layer that declares no width (an activation,
    a norm); the projections read the first and last layers that do."""
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 4),
    )
    narrow = lambda group: nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())  # noqa: E731
    theseus = th.replace_(
        model,
        [th.ModuleSpec("[1:5]", narrow, in_proj="linear", out_proj="linear")],
        example_inputs=(torch.randn(2, 3, 6, 6),),
    )
    successor = theseus.sites[0].successor
    assert (successor.in_proj.in_channels, successor.out_proj.out_channels) == (16, 32)
    theseus.restore()
    with pytest.raises(
        RuntimeError, match=r"its input width is 8, the group's 16: add in_proj='linear'"
    ):  # torch's, noted
        th.replace_(
            model, [th.ModuleSpec("[1:5]", narrow, out_proj="linear")], example_inputs=(torch.randn(2, 3, 6, 6),)
        )


def test_predecessor_eval_keeps_batch_norm_statistics_frozen():
    model = ToyConvNet()
    bn = model.blocks[0].bn
    stats = (bn.running_mean.clone(), bn.num_batches_tracked.clone())
    theseus = th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))], predecessor_eval=True)
    theseus.rate = 0.0
    model.train()
    assert not bn.training and model.blocks[0].successor.training
    model(*model.example_inputs())
    assert torch.equal(bn.running_mean, stats[0]) and torch.equal(bn.num_batches_tracked, stats[1])
    theseus.rate = 1.0
    model(*model.example_inputs())
    assert model.blocks[0].successor.inner.bn.num_batches_tracked.item() == 1


NARROW_SPEC = th.ModuleSpec("blocks[0:2]", lambda group: ToyBlock(4), in_proj="linear", out_proj="linear")


def test_successor_takes_the_predecessor_dtype():
    model = ToyStack().double()
    theseus = th.replace_(
        model, [th.ModuleSpec("blocks[0:2]", lambda g: ToyBlock(4), in_proj="linear", out_proj="linear")]
    )
    assert all(p.dtype == torch.float64 for p in theseus.successor_parameters())


def test_a_group_without_floating_point_tensors_takes_the_models_dtype():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Tanh(), nn.Linear(4, 2)).to(torch.bfloat16)
    x = torch.randn(3, 4, dtype=torch.bfloat16)
    theseus = th.replace_(model, [th.ModuleSpec("[1:3]", lambda group: nn.Linear(4, 4))], example_inputs=(x,))
    assert all(p.dtype == torch.bfloat16 for p in theseus.successor_parameters())
    theseus.rate = 1.0
    model.train()(x)


class KeywordOnlyBlock(ToyBlock):
    def forward(self, *, x, scale=None):
        return super().forward(x, scale)


class NamedOtherwise(nn.Module):
    """A successor whose forward names its input otherwise than the group's first module (``x``)."""

    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, hidden, scale=None):
        return (hidden + self.linear(hidden),)


class ByKeywordStack(ToyStack):
    """Passes every block its input by keyword, ``block(x=hidden)``."""

    def __init__(self, block=ToyBlock):
        super().__init__(container="list")
        self.blocks = nn.ModuleList(block(16, tuple_output=True) for _ in self.blocks)

    def forward(self, x):
        hidden = self.embed(x)
        for block in self.blocks:
            hidden = block(x=hidden, scale=self.scale)[0]
        return self.head(hidden)


@pytest.mark.parametrize(
    ("block", "successor"),
    [
        (KeywordOnlyBlock, th.copy_module(0)),  # forward(self, *, x): the input only by keyword
        (KeywordOnlyBlock, lambda group: NamedOtherwise(16)),
        (ToyBlock, lambda group: NamedOtherwise(16)),  # called block(x=...), the successor's input is `hidden`
    ],
    ids=["keyword-only", "keyword-only-to-another-name", "another-name"],
)
def test_a_group_given_its_input_by_keyword_is_replaced_and_finalized(block, successor):
    torch.manual_seed(0)
    model = ByKeywordStack(block)
    x = model.example_inputs()
    for size in (1, 2):
        assert_replacement_equivalence(model, [th.ModuleSpec(f"blocks[1:{1 + size}]", successor)], x)
    theseus = th.replace_(model, [th.ModuleSpec("blocks[0:2]", successor)], example_inputs=x)
    theseus.rate = 1.0
    expected = run(model, x, training=False)
    assert torch.equal(run(theseus.finalize(), x, training=False), expected)


def test_keyword_primary_input_is_passed_through():
    class KeywordStack(ToyStack):
        def forward(self, x):
            hidden = self.embed(x)
            for block in self.blocks:
                hidden = block(x=hidden, scale=self.scale)[0]
            return self.head(hidden)

    model = KeywordStack(container="list")
    assert_replacement_equivalence(
        model,
        [th.ModuleSpec("blocks[0:3]", lambda g: ToyBlock(4, tuple_output=True), in_proj="linear", out_proj="linear")],
        model.example_inputs(),
    )


def test_repr_lists_groups_successors_and_rate():
    model = ToyStack()
    theseus = th.replace_(
        model, [th.ModuleSpec("blocks[0:2]", lambda g: ToyBlock(4), in_proj="linear", out_proj="linear")]
    )
    theseus.rate = 0.3
    text = repr(theseus)
    assert "rate=0.3" in text and "'blocks[0:2]': 2 × ToyBlock" in text
    assert "in_proj Linear(16→4)" in text and "out_proj Linear(4→16)" in text


def test_hybrid_eval_draws_routes():
    model = ToyStack(num_blocks=2)
    theseus = th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))], eval_route="hybrid")
    theseus.rate = 0.5
    model.eval()
    seen = set()
    with torch.no_grad():
        for _ in range(30):
            model(*model.example_inputs())
            seen.add(theseus.last_routes["blocks[0:2]"])
    assert seen == {True, False}
    assert theseus.route_counts["blocks[0:2]"] == (0, 0)  # eval calls are not training draws


def test_a_hybrid_evaluation_between_training_steps_leaves_the_training_routes_as_they_were():
    def training_routes(evaluate_every: int | None) -> list[bool]:
        model = ToyStack(num_blocks=2)
        theseus = th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))], seed=5, eval_route="hybrid")
        theseus.rate, routes = 0.5, []
        with torch.no_grad():
            for step in range(12):
                model.train()(*model.example_inputs())
                routes.append(theseus.last_routes["blocks[0:2]"])
                if evaluate_every and step % evaluate_every == 0:
                    model.eval()(*model.example_inputs())
        return routes

    assert training_routes(None) == training_routes(1) == training_routes(3)


def test_a_stateless_module_shared_between_groups_is_not_an_overlap():
    shared_act = nn.ReLU()
    model = nn.Module()
    model.blocks = nn.Sequential(*(nn.Sequential(nn.Linear(4, 4), shared_act) for _ in range(4)))
    th.replace_(model, th.plan(model, "blocks", group_sizes=[2, 2], successor=th.copy_module(0)))
    shared_linear = nn.Linear(4, 4)
    model = nn.Module()
    model.blocks = nn.Sequential(*(nn.Sequential(shared_linear, nn.ReLU()) for _ in range(4)))
    with pytest.raises(ValueError, match="overlap"):
        th.replace_(model, th.plan(model, "blocks", group_sizes=[2, 2], successor=th.copy_module(0)))


def test_a_module_declaring_its_own_widths_is_trusted_over_its_insides():
    class Heads(nn.Module):  # like GAT with concat=False: inner width heads × out, declared out_channels
        def __init__(self, in_channels, out_channels, heads=3):
            super().__init__()
            self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
            self.lin = nn.Linear(in_channels, heads * out_channels)

        def forward(self, x):
            return self.lin(x).view(*x.shape[:-1], self.heads, -1).mean(-2)

    model = nn.Module()
    model.blocks = nn.Sequential(Heads(8, 8), Heads(8, 8))
    model.forward = lambda x: model.blocks(x)
    theseus = th.replace_(
        model,
        [th.ModuleSpec("blocks[0:2]", lambda group: Heads(8, 4), out_proj="linear")],
        example_inputs=(torch.randn(2, 8),),
    )
    assert theseus.sites[0].successor.out_proj.in_features == 4


def test_a_factory_with_a_second_parameter_gets_the_model_being_replaced():
    seen = []

    def from_last_block(group, model):
        seen.append(model)
        return copy.deepcopy(model.blocks[-1])

    original = ToyStack(num_blocks=4)
    spec = th.ModuleSpec("blocks[0:2]", from_last_block)
    duplicate = copy.deepcopy(original)
    theseus = th.replace_(duplicate, [spec])
    assert seen == [duplicate]  # the copy, not a model captured when the spec was made
    assert torch.equal(theseus.sites[0].successor.inner.fc1.weight, duplicate.blocks[-1].fc1.weight)


def test_a_channel_attention_conv_at_the_end_of_a_block_is_no_boundary():
    class EcaBlock(nn.Module):  # timm's ECA: a Conv1d(1, 1) over pooled channels, after the Conv2d
        def __init__(self, channels):
            super().__init__()
            self.conv = nn.Conv2d(channels, channels, 3, padding=1)
            self.attention = nn.Conv1d(1, 1, 3, padding=1, bias=False)

        def forward(self, x):
            y = self.conv(x)
            weights = self.attention(y.mean((2, 3)).unsqueeze(1)).sigmoid().squeeze(1)
            return x + y * weights[:, :, None, None]

    model = nn.Module()
    model.blocks = nn.Sequential(EcaBlock(8), EcaBlock(8))
    model.forward = lambda x: model.blocks(x)
    theseus = th.replace_(
        model,
        [th.ModuleSpec("blocks[0:2]", lambda group: EcaBlock(4), in_proj="linear", out_proj="linear")],
        example_inputs=(torch.randn(2, 8, 5, 5),),
    )
    successor = theseus.sites[0].successor
    assert (successor.in_proj.in_channels, successor.in_proj.out_channels) == (8, 4)
    assert (successor.out_proj.in_channels, successor.out_proj.out_channels) == (4, 8)


def test_a_copy_that_shares_the_handles_routes_draws_them_from_the_handle():
    """What FSDP2's sharded twin relies on (`theseus_zoo.training.sharding`): the rate set on the handle, the draws
    counted and saved by it, and nothing else shared."""

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(4)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:
                x = block(x)
            return x

    torch.manual_seed(0)
    model = Stack()
    specs = [th.ModuleSpec("blocks[0:2]", th.copy_module(0)), th.ModuleSpec("blocks[2:4]", th.copy_module(0))]
    theseus = th.replace_(model, specs)
    twin = copy.deepcopy(model)
    theseus.share_routes(twin)
    theseus.rate = 1.0
    before = theseus.state_dict()["generator_state"]
    twin.train()(torch.randn(2, 4))
    assert theseus.route_counts == {"blocks[0:2]": (1, 1), "blocks[2:4]": (1, 1)}
    assert not torch.equal(theseus.state_dict()["generator_state"], before)
    twin.blocks[0].successor.inner.weight.data.add_(1.0)  # the weights are the copy's own
    assert not torch.equal(twin.blocks[0].successor.inner.weight, model.blocks[0].successor.inner.weight)
    with pytest.raises(ValueError, match=r"give a copy\.deepcopy"):
        theseus.share_routes(nn.Sequential(nn.Linear(4, 4)))
