"""Compares YiRage's tokenizer with llama.cpp's on the SmolLM2 GGUF, live.

Needs llama-cpp-python, the model (scripts/fetch-model.sh) and the yirage_tokenize tool of the
build (YIRAGE_TOKENIZE_BIN, which ctest sets). Without them the tests skip, unless
YIRAGE_REQUIRE_LLAMACPP=1, which makes a missing piece a failure so that CI cannot pass vacuously.
"""

import json
import struct
import os
import pathlib
import random
import subprocess

import pytest

from llamacpp_support import llama_cpp_and_model, requirement_missing


CASES = [
    "",
    "Hello world",
    "Hello, world! How are you?",
    "The quick brown fox jumps over the lazy dog.",
    "12345",
    "3.14159 and 1,000,000 and -42",
    "don't won't I'm you're they've we'll he'd",
    "DON'T 'S 'T",
    "   leading spaces",
    "trailing spaces   ",
    "multiple   spaces\tand\ttabs",
    "line one\nline two\n\nline four\r\nwindows",
    "\n\n\n",
    " ",
    "  ",
    "é ü ñ ç à ö",
    "Café déjà vu naïve résumé",
    "中文 日本語 한국어",
    "Привет мир Ελληνικά",
    "emoji 😀🎉👍🏽 👨‍👩‍👧",
    "math ∑∫√∞ ≤≥≠",
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
    '{"key": [1, 2, 3], "nested": {"a": null}}',
    "<html><body class='x'>Hi</body></html>",
    "https://example.com/path?query=1&b=2#frag",
    "$100.00 €50 £20 ¥1000",
    "...!!!???---___***",
    "a\u00a0b\u2003c\u3000d",
    "Ⅻ ½ ² ٣ ४",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text after<|endoftext|>",
    "<|im_start|> spaced <|im_end|>",
    "<repo_name>yirage<file_sep>main.cpp",
    "not special: <|im_start", "<|im_end|><|im_end|>",
]

INVALID_UTF8 = [b"abc\xff\xfedef", b"\xe4\xb8 broken", b"\xc0\x80 overlong", b"\xed\xa0\x80 surrogate"]


@pytest.fixture(scope="module")
def setup():
    llama_cpp, model = llama_cpp_and_model()
    tool = os.environ.get("YIRAGE_TOKENIZE_BIN")
    if not tool or not os.access(tool, os.X_OK):
        requirement_missing("YIRAGE_TOKENIZE_BIN does not name the built yirage_tokenize tool")
    llama = llama_cpp.Llama(model_path=str(model), vocab_only=True, verbose=False)
    return llama, str(model), tool


def _ours(setup, texts, add_special, parse_special):
    _, model, tool = setup
    args = [tool, model, "--jsonl"]
    if not add_special:
        args.append("--no-add-special")
    if parse_special:
        args.append("--parse-special")
    lines = "".join(json.dumps(t) + "\n" for t in texts)
    out = subprocess.run(args, input=lines.encode(), capture_output=True, check=True).stdout
    return [json.loads(line) for line in out.decode().splitlines()]


def _ours_decoded(setup, sequences, render_special):
    _, model, tool = setup
    args = [tool, model, "--decode", "--jsonl"] + (["--render-special"] if render_special else [])
    lines = "".join(json.dumps(ids) + "\n" for ids in sequences)
    out = subprocess.run(args, input=lines.encode(), capture_output=True, check=True).stdout
    return [bytes.fromhex(line) for line in out.decode().splitlines()]


def _random_texts(count):
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        " \t\n\r  ",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
        "éüñçàöÅßøæœ",
        "中文字日本語",
        "😀🎉👍🏽🚀",
        "\u00a0\u2003\u3000\u200b\u0301",
        "ʼ’‘“”…–—",
    ]
    rng = random.Random(1234)
    texts = []
    for _ in range(count):
        length = rng.randint(1, 40)
        texts.append("".join(rng.choice(rng.choice(pools)) for _ in range(length)))
    return texts


@pytest.mark.parametrize("add_special", [True, False])
@pytest.mark.parametrize("parse_special", [False, True])
def test_encode_matches_llamacpp(setup, add_special, parse_special):
    llama = setup[0]
    texts = CASES + _random_texts(300)
    ours = _ours(setup, texts, add_special, parse_special)
    for text, got in zip(texts, ours):
        expected = llama.tokenize(text.encode(), add_bos=add_special, special=parse_special)
        assert got == expected, f"text {text!r}"


def test_invalid_utf8_matches_llamacpp(setup):
    llama, model, tool = setup
    for raw in INVALID_UTF8:
        out = subprocess.run([tool, model], input=raw, capture_output=True, check=True).stdout
        assert json.loads(out) == llama.tokenize(raw, add_bos=True, special=False), raw


def _llamacpp_piece(llama, token, render_special):
    # llama_token_to_piece itself: Llama.detokenize drops a leading space after BOS, a
    # llama-cpp-python convenience that is not part of llama.cpp's decoding.
    import ctypes

    import llama_cpp

    buffer = ctypes.create_string_buffer(1024)
    vocab = llama._model.vocab
    n = llama_cpp.llama_token_to_piece(vocab, token, buffer, len(buffer), 0, render_special)
    assert n >= 0, f"token {token}"
    return buffer.raw[:n]


@pytest.mark.parametrize("render_special", [False, True])
def test_every_token_piece_matches_llamacpp(setup, render_special):
    llama = setup[0]
    ids = list(range(llama.n_vocab()))
    ours = _ours_decoded(setup, [[i] for i in ids], render_special)
    for i, got in zip(ids, ours):
        assert got == _llamacpp_piece(llama, i, render_special), f"token {i}"


def test_decode_round_trips(setup):
    llama = setup[0]
    texts = CASES + _random_texts(100)
    sequences = [llama.tokenize(t.encode(), add_bos=False, special=True) for t in texts]
    for text, got in zip(texts, _ours_decoded(setup, sequences, render_special=True)):
        assert got == text.encode(), f"text {text!r}"


# ------------------------------------------------------------------------------------------------
# SentencePiece: no small SPM model is at hand, so the test builds one. Its pieces are SmolLM2's
# alphabetic tokens with "Ġ" turned into "▁", scored by merge rank, plus the 256 byte tokens, and
# a llama header so that llama.cpp loads the vocabulary; both tokenizers then read the same file.


def _read_gguf_strings(path, key):
    """The string array `key` of a GGUF file (enough of a reader for this test)."""
    data = pathlib.Path(path).read_bytes()
    pos = 24
    kv_count = struct.unpack_from("<Q", data, 16)[0]
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def string():
        nonlocal pos
        n = struct.unpack_from("<Q", data, pos)[0]
        pos += 8 + n
        return data[pos - n : pos]

    def skip(kind):
        nonlocal pos
        if kind == 8:
            string()
        elif kind == 9:
            element, count = struct.unpack_from("<IQ", data, pos)
            pos += 12
            return [string() if element == 8 else skip(element) for _ in range(count)]
        else:
            pos += sizes[kind]

    for _ in range(kv_count):
        name = string().decode()
        kind = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        value = skip(kind)
        if name == key:
            return [s.decode("utf-8", "replace") for s in value]
    raise KeyError(key)


def _write_gguf(path, kvs):
    """Writes a tensorless GGUF v3 file from (key, kind, value) triples."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)))

    def string(s):
        b = s.encode()
        out.extend(struct.pack("<Q", len(b)) + b)

    for key, kind, value in kvs:
        string(key)
        if kind == "str":
            out.extend(struct.pack("<I", 8))
            string(value)
        elif kind == "u32":
            out.extend(struct.pack("<II", 4, value))
        elif kind == "f32":
            out.extend(struct.pack("<If", 6, value))
        elif kind == "bool":
            out.extend(struct.pack("<IB", 7, value))
        elif kind == "strs":
            out.extend(struct.pack("<IIQ", 9, 8, len(value)))
            for s in value:
                string(s)
        elif kind == "f32s":
            out.extend(struct.pack("<IIQ", 9, 6, len(value)) + struct.pack(f"<{len(value)}f", *value))
        elif kind == "i32s":
            out.extend(struct.pack("<IIQ", 9, 5, len(value)) + struct.pack(f"<{len(value)}i", *value))
    pathlib.Path(path).write_bytes(bytes(out))


@pytest.fixture(scope="module")
def spm_setup(setup, tmp_path_factory):
    import llama_cpp

    smol_tokens = _read_gguf_strings(setup[1], "tokenizer.ggml.tokens")
    tokens, types, scores = ["<unk>", "<s>", "</s>"], [2, 3, 3], [0.0, 0.0, 0.0]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(6)
        scores.append(0.0)
    seen = set(tokens)
    for rank, token in enumerate(smol_tokens):
        piece = token.replace("Ġ", "▁")
        if piece.lstrip("▁").isalpha() and piece not in seen:
            seen.add(piece)
            tokens.append(piece)
            types.append(1)
            scores.append(-float(rank))
    path = tmp_path_factory.mktemp("spm") / "spm.gguf"
    _write_gguf(path, [
        ("general.architecture", "str", "llama"),
        ("llama.context_length", "u32", 128),
        ("llama.embedding_length", "u32", 64),
        ("llama.feed_forward_length", "u32", 128),
        ("llama.block_count", "u32", 1),
        ("llama.attention.head_count", "u32", 2),
        ("llama.attention.layer_norm_rms_epsilon", "f32", 1e-5),
        ("tokenizer.ggml.model", "str", "llama"),
        ("tokenizer.ggml.tokens", "strs", tokens),
        ("tokenizer.ggml.scores", "f32s", scores),
        ("tokenizer.ggml.token_type", "i32s", types),
        ("tokenizer.ggml.bos_token_id", "u32", 1),
        ("tokenizer.ggml.eos_token_id", "u32", 2),
        ("tokenizer.ggml.unknown_token_id", "u32", 0),
    ])
    llama = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    return llama, str(path), setup[2]


@pytest.mark.parametrize("add_special", [True, False])
@pytest.mark.parametrize("parse_special", [False, True])
def test_sentencepiece_encode_matches_llamacpp(spm_setup, add_special, parse_special):
    llama = spm_setup[0]
    texts = CASES + ["<s>hello</s> <unk>", "▁already▁escaped"] + _random_texts(300)
    ours = _ours(spm_setup, texts, add_special, parse_special)
    for text, got in zip(texts, ours):
        expected = llama.tokenize(text.encode(), add_bos=add_special, special=parse_special)
        assert got == expected, f"text {text!r}"


@pytest.mark.parametrize("render_special", [False, True])
def test_sentencepiece_pieces_match_llamacpp(spm_setup, render_special):
    llama = spm_setup[0]
    ids = list(range(llama.n_vocab()))
    ours = _ours_decoded(spm_setup, [[i] for i in ids], render_special)
    for i, got in zip(ids, ours):
        assert got == _llamacpp_piece(llama, i, render_special), f"token {i}"
