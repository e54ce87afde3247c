"""theseus_quant needs torch and theseus_core (shipped with it); it imports no model library."""

import subprocess
import sys
import textwrap

import pytest
import torch

BLOCKED = ("transformers", "timm", "torchvision", "torch_geometric")


def test_theseus_quant_imports_and_runs_without_model_libraries(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {BLOCKED!r}:
                    raise ImportError(f"blocked: {{name}}")

        sys.meta_path.insert(0, Block())
        import torch
        import theseus_quant as tq
        model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
        tq.quantize_(model, skip=["2"])
        tq.split_ternary_(model)
        tq.quantized_copy(2, 8)([torch.nn.Sequential(torch.nn.Linear(4, 4))])  # looks for known attention
        tq.save_packed(model, {str(tmp_path / "m.safetensors")!r})
        loaded = sorted(name for name in sys.modules if name.split(".")[0] in {BLOCKED!r})
        assert not loaded, loaded
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_quantize_split_and_export_on_cuda(tmp_path):
    from theseus_quant import load_packed, quantize_, save_packed, split_ternary_

    def build():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).cuda()
        quantize_(model, 2, 4, skip=[])
        return model

    model = build()
    x = torch.randn(5, 8, device="cuda")
    ternary = model(x)
    split_ternary_(model)
    torch.testing.assert_close(model(x), ternary, rtol=1e-5, atol=1e-5)
    save_packed(model, tmp_path / "m.safetensors")
    skeleton = build()
    split_ternary_(skeleton)
    assert torch.equal(load_packed(skeleton, tmp_path / "m.safetensors")(x), model(x))
