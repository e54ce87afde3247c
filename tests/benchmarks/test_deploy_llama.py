"""`benchmarks.deploy_llama`'s report (llama.cpp itself is opt-in: `make bench-deploy`), on a made-up result."""

from benchmarks import deploy_llama
from benchmarks.deploy import result_header


def model(prompt_speed, generation_speed, ratios, parted=None):
    greedy = [{"prompt": p, "equal": True, "first_difference": None, "text": ""} for p in deploy_llama.PROMPTS]
    if parted is not None:
        greedy[0] = {**greedy[0], "equal": False, "first_difference": 4, "fp32_logit_gap": parted}
    return {
        "gguf_bytes": 164_640_320,
        "greedy_equal": sum(g["equal"] for g in greedy),
        "greedy": greedy,
        "perplexity_llama_cpp": 20.2,
        "perplexity_transformers": 20.0,
        "prompt_tokens_per_s": prompt_speed,
        "generation_tokens_per_s": generation_speed,
        "prompt_speed_ratio": ratios[0],
        "generation_speed_ratio": ratios[1],
    }


def test_the_report_gives_ratios_agreement_and_how_close_each_parting_was():
    result = {
        **result_header("python -m benchmarks.deploy_llama --sdist s.tar.gz"),
        "llama_cpp_version": "0.3.36",
        "successor": "the export of runs/x",
        "sequences": 16,
        "rounds": 5,
        "models": {"predecessor": model(100.0, 30.0, (1, 1)), "successor": model(250.0, 45.0, (2.4, 1.6), 0.0123)},
    }
    text = deploy_llama.markdown(result)
    assert "| predecessor | 164.6 | 8 / 8 | 20.20 | 20.00 | 1.0100 | 100.0 | 30.0 |" in text
    assert "| successor | 164.6 | 7 / 8 |" in text
    assert "over 5 rounds in which the models took turns): prompt 2.40×, generation 1.60×" in text
    assert f'successor, "{deploy_llama.PROMPTS[0]}": from token 5' in text and "differ by 0.012" in text
