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


def _imports(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` -> the modules of ``package`` it imports, at module level or inside a function."""
    import ast
    from pathlib import Path

    root = Path(__file__).parents[1]
    modules = {}
    for path in (root / package).rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = here.split(".")[: len(here.split(".")) - node.level + 1] if node.level else []
                target = ".".join([*base, node.module] if node.module else base)
                found = [target, *(f"{target}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            else:
                continue
            edges[name] |= {module for module in found if module in modules and module != name}
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among ``edges``, as the modules on it, or ``None``."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for imported in sorted(edges[module]):
            if state.get(imported) == 1:
                return [*path[path.index(imported) :], imported]
            if imported not in state and (cycle := visit(imported)) is not None:
                return cycle
        state[module] = 2
        path.pop()
        return None

    for module in sorted(edges):
        if module not in state and (cycle := visit(module)) is not None:
            return cycle
    return None


def test_no_import_cycle_in_the_zoo_even_through_imports_inside_functions():
    assert _cycle(_imports("theseus_zoo")) is None, " -> ".join(_cycle(_imports("theseus_zoo")))
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}  # the check finds a cycle where there is one
    assert _cycle(planted) == ["a", "b", "c", "a"]
