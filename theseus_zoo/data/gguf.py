"""A GGUF checkpoint turned, once, into a plain transformers folder (safetensors, config and tokenizer).

``AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)`` reads a GGUF file when the PyPI package
``gguf`` is installed (the ``llm`` extra) and dequantizes it to float32, which takes about 50 s for
SmolLM2-135M on two cores. The model it gives refuses ``save_pretrained`` ("quantized with gguf and is not
serializable"), so `convert_gguf_folder` builds the same architecture from the config without the
``quantization_config``, loads the dequantized weights into it (``strict=True``: every tensor accounted for) and
saves that once; later loads take well under a second.
"""

from __future__ import annotations

from pathlib import Path


def convert_gguf_folder(folder: str | Path) -> None:
    """Replaces the one ``.gguf`` file in ``folder`` by a float32 safetensors model and its tokenizer.

    Raises:
        ValueError: ``folder`` holds no ``.gguf`` file or several.
        ImportError: the ``gguf`` package is missing (the message names the extra that installs it).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(folder)
    files = sorted(folder.glob("*.gguf"))
    if len(files) != 1:
        raise ValueError(f"{folder} must hold exactly one .gguf file, found {[path.name for path in files]}")
    try:
        import gguf  # noqa: F401  transformers reads GGUF files through it
    except ImportError:
        raise ImportError(
            "reading a GGUF checkpoint needs the gguf package: pip install -e '.[llm]' in the theseus clone"
        ) from None
    name = files[0].name
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict(), strict=True)
    model.generation_config = quantized.generation_config
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    files[0].unlink()
    for path in folder.iterdir():
        path.chmod(0o644)  # safetensors writes its file private; the cache is an ordinary folder
