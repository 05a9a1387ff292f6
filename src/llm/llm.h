// The llm stage: everything needed to run a Llama-family model on the CPU from a GGUF file.
//
// This header is the stage's public API. Today it covers the file-format and text layer:
// `GgufFile` maps and validates GGUF v2/v3 files (metadata and tensor directory); `quant.h`
// describes every ggml tensor type and dequantizes the ones the engine reads (F32, F16, BF16,
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q6_K); `Tokenizer` rebuilds the model's byte-level BPE or
// SentencePiece tokenizer from the metadata and matches llama.cpp token for token;
// `StreamingDecoder` turns generated ids into complete UTF-8; `ChatTemplate` renders
// conversations for ChatML models. The model graph, KV cache, sampler and generation loop build
// on these and will be declared here as they arrive.
#pragma once

#include "llm/chat.h"       // IWYU pragma: export
#include "llm/gguf.h"       // IWYU pragma: export
#include "llm/quant.h"      // IWYU pragma: export
#include "llm/tokenizer.h"  // IWYU pragma: export
