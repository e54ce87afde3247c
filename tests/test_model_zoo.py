"""theseus_core on the world's models: tiny configs from transformers, torchvision, timm, torch-geometric and
plain PyTorch (no weights, no hub). Each model either works (rate 0 exact, eval equal to the finalized model,
the whole `assert_replacement_equivalence` contract) or is refused by `replace_` with a clear message and
left untouched. The architecture table of the docs (docs/architectures.md) lists the same cases."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from torch import nn

import theseus_core as th
from theseus_core.testing import assert_replacement_equivalence


@dataclass
class Case:
    model: nn.Module
    specs: list[th.ModuleSpec] | th.Plan
    inputs: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    refused: str | None = None  # the message replace_ must give, for models it must refuse
    batches: list[Any] | None = None  # several example batches (example_inputs as a list), for refusals


CASES: dict[str, Callable[[], Case]] = {}


def case(name: str):
    def register(build: Callable[[], Case]) -> Callable[[], Case]:
        CASES[name] = build
        return build

    return register


def tokens(length: int = 6) -> torch.Tensor:
    return torch.randint(0, 64, (2, length), generator=torch.Generator().manual_seed(0))


def images(size: int = 32, channels: int = 3) -> torch.Tensor:
    return torch.randn(2, channels, size, size, generator=torch.Generator().manual_seed(0))


def halves(model: nn.Module, container: str, copy_from: int = 0) -> th.Plan:
    return th.plan(model, container, num_groups=2, successor=th.copy_module(copy_from))


# ------------------------------------------------------------------ transformers

TEXT = dict(vocab_size=64, max_position_embeddings=32)
ENCODER = dict(TEXT, hidden_size=16, num_hidden_layers=4, num_attention_heads=2, intermediate_size=32)


def hf(config: str, model: str, **options: Any) -> nn.Module:
    import transformers

    torch.manual_seed(0)
    return getattr(transformers, model)(getattr(transformers, config)(**options))


def hf_text(config: str, model: str, container: str, **options: Any) -> Case:
    built = hf(config, model, **options)
    return Case(built, halves(built, container), (tokens(),))


case("transformers BERT")(lambda: hf_text("BertConfig", "BertModel", "encoder.layer", **ENCODER))
case("transformers RoBERTa")(
    lambda: hf_text("RobertaConfig", "RobertaModel", "encoder.layer", **ENCODER, pad_token_id=1)
)
case("transformers ELECTRA")(
    lambda: hf_text("ElectraConfig", "ElectraModel", "encoder.layer", **ENCODER, embedding_size=8)
)
case("transformers DistilBERT")(
    lambda: hf_text(
        "DistilBertConfig", "DistilBertModel", "transformer.layer", **TEXT, dim=16, n_layers=4, n_heads=2, hidden_dim=32
    )
)
case("transformers GPT-2")(
    lambda: hf_text("GPT2Config", "GPT2Model", "h", vocab_size=64, n_positions=32, n_embd=16, n_layer=4, n_head=2)
)
DECODER = dict(ENCODER, num_key_value_heads=1)
case("transformers Llama")(lambda: hf_text("LlamaConfig", "LlamaModel", "layers", **DECODER))
case("transformers Qwen2")(lambda: hf_text("Qwen2Config", "Qwen2Model", "layers", **DECODER))


@case("transformers ViT")
def hf_vit() -> Case:
    model = hf("ViTConfig", "ViTModel", **{**ENCODER, "image_size": 16, "patch_size": 4})
    return Case(model, halves(model, "layers"), (images(16),))


@case("transformers BART encoder")
def bart_encoder() -> Case:
    from transformers import BartConfig
    from transformers.models.bart.modeling_bart import BartEncoder

    torch.manual_seed(0)
    config = BartConfig(
        **TEXT, d_model=16, encoder_layers=4, decoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32
    )
    model = BartEncoder(config)
    return Case(model, halves(model, "layers"), (tokens(),))


@case("transformers Whisper encoder")
def whisper_encoder() -> Case:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(0)
    config = WhisperConfig(
        vocab_size=64,
        d_model=16,
        encoder_layers=4,
        decoder_layers=1,
        encoder_attention_heads=2,
        encoder_ffn_dim=32,
        num_mel_bins=8,
        max_source_positions=8,
    )
    model = WhisperEncoder(config)
    features = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(0))
    return Case(model, halves(model, "layers"), (features,))


@case("transformers T5 encoder")
def t5_encoder() -> Case:
    model = hf("T5Config", "T5EncoderModel", vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=4, num_heads=2)
    return Case(
        model, halves(model, "encoder.block"), (tokens(),), refused=r"layer 1 of the group with another 'position_bias'"
    )


@case("transformers T5 encoder, groups of 1")
def t5_encoder_single() -> Case:
    model = t5_encoder().model
    return Case(model, th.plan(model, "encoder.block", num_groups=4, successor=th.copy_module(0)), (tokens(),))


@case("transformers DeBERTa-v2 conv_kernel_size=3")
def deberta() -> Case:
    options = dict(ENCODER, conv_kernel_size=3, relative_attention=True, position_buckets=8, max_relative_positions=8)
    model = hf("DebertaV2Config", "DebertaV2Model", **options)
    return Case(model, halves(model, "encoder.layer"), (tokens(),), refused=r"group 'encoder.layer\[0:2\]'")


@case("transformers ALBERT, 2 hidden groups")
def albert() -> Case:
    model = hf("AlbertConfig", "AlbertModel", **ENCODER, embedding_size=8, num_hidden_groups=2)
    specs = [th.ModuleSpec("encoder.albert_layer_groups[0:2]", th.copy_module(0))]
    return Case(model, specs, (tokens(),), refused=r"raised IndexError outside the sites")


# ------------------------------------------------------------------- torchvision


@case("torchvision resnet18 (adapter)")
def torchvision_resnet() -> Case:
    import torchvision

    from theseus_adapters import resnet

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=4)
    return Case(model, resnet.plan(model, (1, 1, 1, 1)), (images(),))


@case("torchvision mobilenet_v2")
def mobilenet() -> Case:
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(num_classes=4, width_mult=0.25)
    return Case(model, [th.ModuleSpec("features[4:7]", th.copy_module(0))], (images(),))


@case("torchvision efficientnet")
def efficientnet() -> Case:
    from torchvision.models.efficientnet import EfficientNet, MBConvConfig

    torch.manual_seed(0)
    setting = [MBConvConfig(1, 3, 1, 8, 8, 1), MBConvConfig(6, 3, 2, 8, 16, 3)]
    model = EfficientNet(setting, dropout=0.2, stochastic_depth_prob=0.2, num_classes=4)
    return Case(model, [th.ModuleSpec("features.2[0:2]", th.copy_module(0))], (images(),))


@case("torchvision convnext")
def convnext() -> Case:
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    torch.manual_seed(0)
    model = ConvNeXt([CNBlockConfig(8, 16, 2), CNBlockConfig(16, None, 2)], stochastic_depth_prob=0.1, num_classes=4)
    return Case(model, [th.ModuleSpec("features.1[0:2]", th.copy_module(0))], (images(),))


@case("torchvision swin")
def torchvision_swin() -> Case:
    from torchvision.models.swin_transformer import SwinTransformer

    torch.manual_seed(0)
    model = SwinTransformer([4, 4], 8, [2, 2], [1, 2], [2, 2], num_classes=4)
    return Case(model, [th.ModuleSpec("features.1[0:2]", th.copy_module(0))], (images(16),))


@case("torchvision densenet")
def densenet() -> Case:
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.DenseNet(4, (2, 2), 8, bn_size=2, num_classes=4)
    return Case(model, [th.ModuleSpec("features.denseblock1.denselayer2", th.copy_module(0))], (images(),))


@case("torchvision ViT")
def torchvision_vit() -> Case:
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(16, 4, num_layers=4, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=4)
    return Case(model, halves(model, "encoder.layers"), (images(16),))


# -------------------------------------------------------------------------- timm


@case("timm resnet26d (adapter)")
def timm_resnet26d() -> Case:
    import timm

    from theseus_adapters import resnet

    torch.manual_seed(0)
    model = timm.create_model("resnet26d", num_classes=4)
    return Case(model, resnet.plan(model, (1, 1, 1, 1)), (images(),))


@case("timm mobilevit_xxs")
def timm_mobilevit() -> Case:
    import timm

    torch.manual_seed(0)
    model = timm.create_model("mobilevit_xxs", num_classes=4)
    return Case(model, [th.ModuleSpec("stages.1[1:3]", th.copy_module(0))], (images(64),))


@case("timm swin")
def timm_swin() -> Case:
    from timm.models.swin_transformer import SwinTransformer

    torch.manual_seed(0)
    model = SwinTransformer(
        img_size=16, patch_size=2, window_size=4, embed_dim=8, depths=(2, 2), num_heads=(1, 2), num_classes=4
    )
    return Case(model, [th.ModuleSpec("layers.0.blocks[0:2]", th.copy_module(0))], (images(16),))


@case("timm ViT")
def timm_vit() -> Case:
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(img_size=16, patch_size=4, embed_dim=16, depth=4, num_heads=2, num_classes=4)
    return Case(model, halves(model, "blocks"), (images(16),))


# --------------------------------------------------------------- torch-geometric


def graph(edge_dim: int | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(10, 8, generator=generator)
    edge_index = torch.randint(0, 10, (2, 30), generator=generator)
    kwargs = {} if edge_dim is None else {"edge_attr": torch.randn(30, edge_dim, generator=generator)}
    return (x, edge_index), kwargs


@case("torch-geometric GCN (adapter)")
def gcn() -> Case:
    from torch_geometric.nn.models import GCN

    from theseus_adapters import gnn

    torch.manual_seed(0)
    model = gnn.to_steps_(GCN(8, 16, num_layers=4, out_channels=4, dropout=0.1))
    return Case(model, gnn.plan(model, num_layers=2), *graph())


@case("torch-geometric GAT with edge_attr (adapter)")
def gat() -> Case:
    from torch_geometric.nn.models import GAT

    from theseus_adapters import gnn

    torch.manual_seed(0)
    model = gnn.to_steps_(GAT(8, 16, num_layers=4, out_channels=4, heads=2, edge_dim=3))
    return Case(model, gnn.plan(model, num_layers=2), *graph(edge_dim=3))


@case('torch-geometric GCN jk="cat", th.plan')
def gcn_jk() -> Case:
    from torch_geometric.nn.models import GCN

    torch.manual_seed(0)
    model = GCN(8, 16, num_layers=4, out_channels=4, jk="cat")
    return Case(model, halves(model, "convs"), *graph(), refused=r"outside the sites.*`convs` reads its modules")


# ------------------------------------------------------------------ plain PyTorch

LAYER = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.1, batch_first=True)


@case("torch nn.TransformerEncoder")
def transformer_encoder() -> Case:
    torch.manual_seed(0)
    model = nn.TransformerEncoder(nn.TransformerEncoderLayer(**LAYER), 4, enable_nested_tensor=False)
    return Case(model, halves(model, "layers"), (torch.randn(2, 5, 8),))


@case("torch nn.TransformerDecoder")
def transformer_decoder() -> Case:
    torch.manual_seed(0)
    model = nn.TransformerDecoder(nn.TransformerDecoderLayer(**LAYER), 4)
    return Case(model, halves(model, "layers"), (torch.randn(2, 3, 8), torch.randn(2, 5, 8)))


@case("torch nn.Transformer")
def transformer() -> Case:
    torch.manual_seed(0)
    model = nn.Transformer(**LAYER, num_encoder_layers=4, num_decoder_layers=4)
    specs = [*halves(model, "encoder.layers"), *halves(model, "decoder.layers", -1)]
    return Case(model, specs, (torch.randn(2, 5, 8), torch.randn(2, 3, 8)))


class LSTMStack(nn.Module):
    """LSTMs whose loop adds dropout and a residual between layers."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.LSTM(8, 8, batch_first=True) for _ in range(4)])
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + self.dropout(layer(x)[0])
        return x


@case("torch LSTM stack with a residual loop")
def lstm() -> Case:
    torch.manual_seed(0)
    model = LSTMStack()
    return Case(
        model, halves(model, "layers"), (torch.randn(2, 5, 8),), refused=r"changes the hidden states between layers 0"
    )


@case("torch MLP nn.Sequential (the root)")
def mlp() -> Case:
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Dropout(0.1)) for _ in range(4)))
    return Case(model, halves(model, ""), (torch.randn(2, 8),))


@case("torch CNN nn.Sequential with batch norm")
def cnn() -> Case:
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()) for _ in range(4)]
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8), nn.Sequential(*blocks))
    return Case(model, halves(model, "2"), (images(8),))


# -------------------------------------------------------- held-out architectures, each exact or refused for cause


def hf_plan_case(model: nn.Module, inputs: dict[str, Any], num_layers: int = 2, **options: Any) -> Case:
    from theseus_adapters import hf as adapter

    return Case(model, adapter.plan(model, num_layers, **options), (), inputs)


case("transformers Mistral, sliding window (hf.plan)")(
    lambda: hf_plan_case(
        hf("MistralConfig", "MistralModel", **DECODER, sliding_window=4), {"input_ids": tokens(), "use_cache": False}
    )
)
GEMMA2 = dict(DECODER, head_dim=8, sliding_window=4)


@case("transformers Gemma2, th.plan, a batch longer than the window")
def gemma2() -> Case:
    model = hf("Gemma2Config", "Gemma2Model", **GEMMA2)
    batches = [{"input_ids": tokens(4)}, {"input_ids": tokens(16)}]
    message = r"calls layer 1 of the group with another 'attention_mask'"
    return Case(model, halves(model, "layers"), (), {"use_cache": False}, refused=message, batches=batches)


MOE = dict(moe_intermediate_size=8, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, n_group=1)
MOE |= dict(topk_group=1, first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=8, qk_rope_head_dim=4)
case("transformers DeepSeek-V3, dense then MoE (hf.plan)")(
    lambda: hf_plan_case(
        hf("DeepseekV3Config", "DeepseekV3Model", **DECODER | {"num_key_value_heads": 2}, **MOE, qk_nope_head_dim=4),
        {"input_ids": tokens(), "use_cache": False},
    )
)
case("transformers OPT")(
    lambda: hf_text(
        "OPTConfig", "OPTModel", "decoder.layers", **ENCODER, ffn_dim=32, word_embed_proj_dim=16, layerdrop=0.0
    )
)
case("transformers Falcon")(lambda: hf_text("FalconConfig", "FalconModel", "h", **ENCODER, use_cache=False))
MAMBA = dict(vocab_size=64, hidden_size=16, state_size=4, num_hidden_layers=4, expand=2, conv_kernel=2)
case("transformers Mamba (state space)")(
    lambda: hf_plan_case(hf("MambaConfig", "MambaModel", **MAMBA, use_mambapy=False), {"input_ids": tokens()})
)
RWKV = dict(vocab_size=64, hidden_size=16, num_hidden_layers=4, attention_hidden_size=16, intermediate_size=32)
case("transformers RWKV, rescale_every=0 (hf.plan)")(
    lambda: hf_plan_case(
        hf("RwkvConfig", "RwkvModel", **RWKV, rescale_every=0, context_length=32),
        {"input_ids": tokens(), "use_cache": False},
    )
)


@case("transformers RWKV, rescale_every=2")
def rwkv_rescaling() -> Case:
    model = hf("RwkvConfig", "RwkvModel", **RWKV, rescale_every=2, context_length=32)
    return Case(model, halves(model, "blocks"), (), {"input_ids": tokens(), "use_cache": False}, refused="own weights")


case("transformers T5 encoder (hf.plan)")(
    lambda: hf_plan_case(
        hf("T5Config", "T5EncoderModel", vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=4, num_heads=2),
        {"input_ids": tokens()},
    )
)
SEQ2SEQ = dict(vocab_size=64, d_model=16, encoder_layers=4, decoder_layers=4, encoder_attention_heads=2)
SEQ2SEQ |= dict(decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32)


def both_stacks(config: str, model_class: str, **options: Any) -> Case:
    model = hf(config, model_class, **SEQ2SEQ, **options)
    specs = [*halves(model, "encoder.layers"), *halves(model, "decoder.layers", -1)]
    return Case(model, specs, (), {"input_ids": tokens(), "decoder_input_ids": tokens(4)})


case("transformers BART, both stacks")(lambda: both_stacks("BartConfig", "BartModel"))
case("transformers M2M100, both stacks, no layerdrop")(
    lambda: both_stacks("M2M100Config", "M2M100Model", encoder_layerdrop=0.0, decoder_layerdrop=0.0)
)


@case("transformers M2M100, encoder_layerdrop=0.3")
def m2m100_layerdrop() -> Case:
    built = both_stacks("M2M100Config", "M2M100Model", encoder_layerdrop=0.3, decoder_layerdrop=0.0)
    built.refused = "LayerDrop"
    return built


@case("transformers BigBird, a sequence too short for its blocks")
def bigbird() -> Case:
    model = hf("BigBirdConfig", "BigBirdModel", **ENCODER, block_size=2, num_random_blocks=1)
    return Case(model, halves(model, "encoder.layer"), (tokens(8),), refused="rebuilds itself for this input")


@case("transformers Wav2Vec2, SpecAugment")
def wav2vec2() -> Case:
    options = dict(vocab_size=16, hidden_size=16, num_hidden_layers=4, num_attention_heads=2, intermediate_size=32)
    options |= dict(conv_dim=(8, 8), conv_stride=(4, 4), conv_kernel=(8, 4), num_conv_pos_embeddings=4)
    options |= dict(num_conv_pos_embedding_groups=2, layerdrop=0.0, mask_time_prob=0.5, mask_time_length=2)
    model = hf("Wav2Vec2Config", "Wav2Vec2Model", **options)
    audio = torch.randn(2, 400, generator=torch.Generator().manual_seed(0))
    return Case(model, halves(model, "encoder.layers"), (audio,), refused="outside torch's RNG")


case("transformers DINOv2 backbone (hf.plan)")(
    lambda: hf_plan_case(
        hf("Dinov2Config", "Dinov2Model", **ENCODER, image_size=16, patch_size=4), {"pixel_values": images(16)}
    )
)
SEGFORMER = dict(num_encoder_blocks=2, depths=[2, 2], sr_ratios=[2, 1], hidden_sizes=[8, 16], patch_sizes=[7, 3])
SEGFORMER |= dict(strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2])
case("transformers Segformer, one stage (hf.plan)")(
    lambda: hf_plan_case(
        hf("SegformerConfig", "SegformerModel", **SEGFORMER), {"pixel_values": images()}, 1, stack="stages.0.blocks"
    )
)


@case("transformers Swin, one stage")
def hf_swin() -> Case:
    options = dict(image_size=16, patch_size=2, embed_dim=8, depths=[2, 2], num_heads=[1, 2], window_size=2)
    model = hf("SwinConfig", "SwinModel", **options)
    return Case(model, [th.ModuleSpec("encoder.layers.0.blocks[0:2]", th.copy_module(0))], (images(16),))


@case("timm ConvNormAct stack, narrower with out_proj='linear'")
def conv_norm_act() -> Case:
    from timm.layers import ConvNormAct

    torch.manual_seed(0)
    model = nn.Sequential(*(ConvNormAct(8, 8, 3) for _ in range(4)))
    spec = th.ModuleSpec("[0:2]", lambda group: ConvNormAct(8, 4, 3), out_proj="linear")
    return Case(model, [spec], (images(8, channels=8),))


@case("timm ConvNeXt")
def timm_convnext() -> Case:
    from timm.models.convnext import ConvNeXt

    torch.manual_seed(0)
    model = ConvNeXt(depths=(1, 1, 2, 1), dims=(8, 8, 8, 8), num_classes=4, drop_path_rate=0.1)
    return Case(model, [th.ModuleSpec("stages.2.blocks[0:2]", th.copy_module(0))], (images(),))


@case("timm MLP-Mixer")
def timm_mixer() -> Case:
    from timm.models.mlp_mixer import MlpMixer

    torch.manual_seed(0)
    model = MlpMixer(num_classes=4, img_size=16, patch_size=4, num_blocks=4, embed_dim=16, drop_rate=0.1)
    return Case(model, halves(model, "blocks"), (images(16),))


@case("torchvision shufflenet_v2")
def shufflenet() -> Case:
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.shufflenet_v2_x0_5(num_classes=4)
    return Case(model, [th.ModuleSpec("stage3[1:4]", th.copy_module(0))], (images(),))


@case("torchvision squeezenet")
def squeezenet() -> Case:
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.squeezenet1_1(num_classes=4)
    return Case(model, [th.ModuleSpec("features[3:5]", th.copy_module(0))], (images(),))


class MaskedStack(nn.Module):
    """Layers alternate a local and a global mask, chosen by the loop (Gemma2, ModernBERT)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.TransformerEncoderLayer(**LAYER) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        local = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(2) | torch.ones_like(
            torch.eye(x.shape[1], dtype=torch.bool)
        ).tril(-2)
        for index, layer in enumerate(self.layers):
            x = layer(x, src_mask=local if index % 2 == 0 else None)
        return x


@case("torch loop with per-layer masks")
def masked_stack() -> Case:
    torch.manual_seed(0)
    model = MaskedStack()
    return Case(model, halves(model, "layers"), (torch.randn(2, 6, 8),), refused="another 'src_mask' than layer 0")


class LayerDropStack(nn.Module):
    """Skips each layer with probability 0.2 in training (LayerDrop, Fan et al. 2019)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1)) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            if not self.training or torch.rand(()) >= 0.2:
                x = layer(x)
        return x


@case("torch loop with LayerDrop")
def layerdrop_stack() -> Case:
    torch.manual_seed(0)
    model = LayerDropStack()
    return Case(model, halves(model, "layers"), (torch.randn(2, 8),), refused="LayerDrop")


class GRUStack(nn.Module):
    """Each GRU starts from the final state of the one below (a hidden state the loop hands on)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.GRU(8, 8, batch_first=True) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        state = None
        for layer in self.layers:
            x, state = layer(x, state)
        return x


@case("torch GRU stack handing on its state")
def gru_stack() -> Case:
    torch.manual_seed(0)
    model = GRUStack()
    return Case(model, halves(model, "layers"), (torch.randn(2, 5, 8),), refused="another 'hx' than layer 0")


case("transformers GPT-NeoX")(lambda: hf_text("GPTNeoXConfig", "GPTNeoXModel", "layers", **ENCODER, use_cache=False))
case("transformers BEiT backbone (hf.plan)")(
    lambda: hf_plan_case(
        hf("BeitConfig", "BeitModel", **ENCODER, image_size=16, patch_size=4, use_relative_position_bias=True),
        {"pixel_values": images(16)},
    )
)
case("transformers Marian, both stacks")(lambda: both_stacks("MarianConfig", "MarianModel", pad_token_id=0))


@case("torchvision mnasnet")
def mnasnet() -> Case:
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.mnasnet0_5(num_classes=4)
    return Case(model, [th.ModuleSpec("layers.9[1:3]", th.copy_module(0))], (images(),))


class DepthScaled(nn.Module):
    """Scales each layer's update by 1 / (index + 1) in the loop (depth-scaled residuals)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index, layer in enumerate(self.layers):
            x = x + layer(x) / (index + 1)
        return x


@case("torch loop with depth-scaled residuals")
def depth_scaled() -> Case:
    torch.manual_seed(0)
    model = DepthScaled()
    return Case(
        model, halves(model, "layers"), (torch.randn(2, 8),), refused="changes the hidden states between layers 0"
    )


def snapshot(model: nn.Module) -> tuple:
    return (
        repr(model),
        [(name, tensor.clone()) for name, tensor in model.state_dict().items()],
        [p.requires_grad for p in model.parameters()],
        [m.training for m in model.modules()],
    )


@pytest.mark.parametrize("name", list(CASES))
def test_the_model_works_or_is_refused_clearly(name):
    built = CASES[name]()
    if built.refused is None:
        assert_replacement_equivalence(built.model, built.specs, built.inputs, built.kwargs)
        return
    before = snapshot(built.model)
    with pytest.raises(th.VerificationError, match=built.refused) as raised:
        examples = built.batches if built.batches is not None else built.inputs
        th.replace_(built.model, built.specs, example_inputs=examples, example_kwargs=built.kwargs)
    assert "The model is unchanged" in str(raised.value)
    after = snapshot(built.model)
    assert after[0] == before[0] and after[2:] == before[2:]
    assert [name for name, _ in after[1]] == [name for name, _ in before[1]]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(after[1], before[1], strict=True))


def test_the_zoo_is_large():
    assert len(CASES) >= 64
