"""Compares YiRage's LLM engine with llama.cpp on the SmolLM2 GGUF, live.

For 5 prompts, `yirage generate --save-json` and llama-cpp-python on the same file must agree:
the same prompt tokens, the same top-1 token after the prompt with logits close relative to the
logit scale, and identical 32-token greedy continuations. The same model requantized to Q4_0 by
llama.cpp's own quantizer checks the Q4_0 kernels against llama.cpp's: top-1 and logits.

Needs llama-cpp-python and the model (scripts/fetch-model.sh). Without them the tests skip, unless
YIRAGE_REQUIRE_LLAMACPP=1, which makes a missing piece a failure so that CI cannot pass vacuously.
"""

import ctypes
import json
import subprocess

import pytest

from llamacpp_support import llama_cpp_and_model

STEPS = 32

# Plain continuations and one chat-formatted prompt (control tokens parsed, as both engines do).
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n",
    "Once upon a time, in a small village by the sea,",
    "List three primary colors:",
    "<|im_start|>user\nWhat is 12 times 12?<|im_end|>\n<|im_start|>assistant\n",
]

# Both engines quantize activations to 8 bits, keep f16 keys and values, use ggml's exp, and sum
# in the orders llama.cpp takes for the instruction set it was built for (kernels_simd.inc: its
# tinyBLAS for prompts, ggml_vec_dot_f16 for single tokens; the RoPE's fused multiply-adds), so on
# an AVX-512 machine the logits are equal to the last bit and the continuations identical. The
# logit bound still leaves 4% of the scale, which is what separated the engines before the orders
# matched (SmolLM2's outlier activations amplify one flipped 8-bit activation into ~0.5), and what
# llama.cpp's own batched and token-by-token evaluations differ by (printed below); top-1 and the
# 32-token greedy continuations must be identical.
MAX_RELATIVE_LOGIT_DIFF = 0.04


@pytest.fixture(scope="module")
def llama():
    llama_cpp, model = llama_cpp_and_model()
    # logits_all keeps the prompt's logits in engine.scores (without it only sampling sees them).
    engine = llama_cpp.Llama(model_path=str(model), n_ctx=512, n_threads=2, n_threads_batch=2,
                             logits_all=True, verbose=False)
    return engine, str(model)


def _ours(yirage_bin, model, prompt, tmp_path, steps=STEPS):
    out = tmp_path / "result.json"
    subprocess.run([yirage_bin, "generate", "--model", model, "--prompt", prompt, "-n", str(steps),
                    "--temperature", "0", "--threads", "2", "--context", "512",
                    "--save-json", str(out)], check=True, capture_output=True)
    return json.loads(out.read_text())


def _theirs(engine, prompt_ids):
    import numpy as np

    engine.reset()
    engine.eval(prompt_ids)
    logits = np.array(engine.scores[engine.n_tokens - 1], dtype=np.float64)
    # Where llama.cpp's end-of-generation set (EOS, <|im_end|>, <|endoftext|>) stops, ours does.
    stops = {engine.token_eos()}
    for text in ("<|im_end|>", "<|endoftext|>"):
        stops.update(engine.tokenize(text.encode(), add_bos=False, special=True))
    ids = []
    for token in engine.generate(prompt_ids, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True):
        if token in stops:
            break
        ids.append(token)
        if len(ids) == STEPS:
            break
    return logits, ids


@pytest.mark.parametrize("index", range(len(PROMPTS)))
def test_generation_matches_llamacpp(llama, yirage_bin, tmp_path, index):
    import numpy as np

    engine, model = llama
    prompt = PROMPTS[index]
    ours = _ours(yirage_bin, model, prompt, tmp_path)
    expected_ids = engine.tokenize(prompt.encode(), add_bos=True, special=True)
    assert ours["prompt_ids"] == expected_ids

    logits, ids = _theirs(engine, expected_ids)
    engine.reset()
    for token in expected_ids:
        engine.eval([token])
    self_diff = float(np.max(np.abs(np.array(engine.scores[engine.n_tokens - 1]) - logits)))
    our_logits = np.array(ours["first_logits"], dtype=np.float64)
    assert our_logits.shape == logits.shape
    diff = float(np.max(np.abs(our_logits - logits)))
    scale = float(np.max(np.abs(logits)))
    print(f"prompt {index}: max |logit diff| {diff:.4f} on a logit scale of {scale:.2f} "
          f"({diff / scale:.2%}); llama.cpp batched vs token by token: {self_diff:.4f}; "
          f"top-1 {int(np.argmax(our_logits))} vs {int(np.argmax(logits))}")
    assert int(np.argmax(our_logits)) == int(np.argmax(logits))
    assert diff <= MAX_RELATIVE_LOGIT_DIFF * scale
    assert ours["ids"] == ids, (
        f"continuations differ: ours {ours['ids']} ({ours['text']!r}), llama.cpp {ids}")


@pytest.fixture(scope="module")
def llama_q4_0(tmp_path_factory):
    llama_cpp, model = llama_cpp_and_model()
    path = tmp_path_factory.mktemp("q4_0") / "smollm2-q4_0.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    params.allow_requantize = True  # the source is Q4_1
    # The embedding (also the LM head) stays Q8_0, as in the source file.
    params.token_embedding_type = params.output_tensor_type = llama_cpp.GGML_TYPE_Q8_0
    params.nthread = 2
    assert llama_cpp.llama_model_quantize(str(model).encode(), str(path).encode(),
                                          ctypes.byref(params)) == 0
    engine = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=2, n_threads_batch=2,
                             logits_all=True, verbose=False)
    return engine, str(path)


# Requantizing to 4 bits makes SmolLM2's outlier activations louder: on this file llama.cpp's own
# batched and token-by-token logits differ by up to 5% of the scale, so only the first step is
# compared, with that much room and some more. A wrong nibble order or scale gives differences
# of the order of the scale itself.
MAX_RELATIVE_LOGIT_DIFF_Q4_0 = 0.10


@pytest.mark.parametrize("index", range(len(PROMPTS)))
def test_q4_0_first_step_matches_llamacpp(llama_q4_0, yirage_bin, tmp_path, index):
    import numpy as np

    engine, model = llama_q4_0
    prompt = PROMPTS[index]
    ours = _ours(yirage_bin, model, prompt, tmp_path, steps=1)
    expected_ids = engine.tokenize(prompt.encode(), add_bos=True, special=True)
    assert ours["prompt_ids"] == expected_ids
    engine.reset()
    engine.eval(expected_ids)
    logits = np.array(engine.scores[engine.n_tokens - 1], dtype=np.float64)
    our_logits = np.array(ours["first_logits"], dtype=np.float64)
    diff = float(np.max(np.abs(our_logits - logits)))
    scale = float(np.max(np.abs(logits)))
    print(f"q4_0 prompt {index}: max |logit diff| {diff:.4f} on a logit scale of {scale:.2f} "
          f"({diff / scale:.2%})")
    assert int(np.argmax(our_logits)) == int(np.argmax(logits))
    assert diff <= MAX_RELATIVE_LOGIT_DIFF_Q4_0 * scale
