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


def test_theseus_core_checks_import_without_torch_and_every_public_name_resolves():
    """``theseus_core`` imports lazily (PEP 562): the zoo's torch-free layers import ``theseus_core.checks``, and
    every name in ``__all__`` still resolves on first use."""
    script = textwrap.dedent(
        """
        import sys

        import theseus_core
        from theseus_core.checks import is_finite_number, is_int

        assert is_int(3) and not is_int(True) and is_finite_number(0.5) and not is_finite_number(10**400)
        assert "torch" not in sys.modules, "theseus_core.checks imported torch"
        missing = [name for name in theseus_core.__all__ if getattr(theseus_core, name, None) is None]
        assert not missing, missing
        assert sorted(theseus_core.__all__) == sorted(theseus_core._HOMES)
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
