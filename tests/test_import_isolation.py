"""theseus_core imports no model library."""

import subprocess
import sys
import textwrap

BLOCKED = ("transformers", "timm", "torchvision", "torch_geometric")


def test_theseus_core_imports_and_runs_without_model_libraries():
    script = textwrap.dedent(
        f"""
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {BLOCKED!r}:
                    raise ImportError(f"blocked: {{name}}")

        sys.meta_path.insert(0, Block())
        import theseus_core as th
        import theseus_core.testing
        model = theseus_core.testing.ToyStack()
        th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))]).finalize()
        loaded = sorted(name for name in sys.modules if name.split(".")[0] in {BLOCKED!r})
        assert not loaded, loaded
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
