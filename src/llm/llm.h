// The llm stage: everything needed to run a Llama-family model from a GGUF file or a Hugging Face
// directory of safetensors weights, on the backend the caller gives (the hot blocks as kernel
// graphs through tune::optimize; nothing here names a backend) or on the host's hand-written
// kernels.
//
// This header is the stage's public API. Today it covers the file-format and text layer:
// `GgufFile` maps and validates GGUF v2/v3 files (metadata and tensor directory);
// `SafetensorsFile` does the same for safetensors files, and hf_model.h reads a Hugging Face
// LlamaForCausalLM directory (config.json, safetensors shards); `quant.h` describes every ggml
// tensor type and dequantizes the ones the engine reads (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q6_K); `Tokenizer` rebuilds the model's byte-level BPE or SentencePiece tokenizer from the
// metadata (or tokenizer.json) and matches llama.cpp token for token; `StreamingDecoder` turns
// generated ids into complete UTF-8; `ChatTemplate` renders conversations for ChatML models. On
// top of them: `LlamaModel` (model.h) holds the config, the quantized weights borrowed from the
// mapping, the KV cache and the forward pass as hot blocks; kernels.h has the quantized matmul
// kernels; `Sampler` picks tokens; and `Llm` (engine.h) is the generation API the CLI and the
// Python package use. For serving many requests at once, `PagedKvCache` (paged_kv.h) keeps many
// sequences' keys and values in blocks from one pool, `LlamaModel::forward_batch` runs them in one
// step, and `Scheduler` (scheduler.h) batches requests continuously over them.
#pragma once

#include "llm/chat.h"         // IWYU pragma: export
#include "llm/engine.h"       // IWYU pragma: export
#include "llm/gguf.h"         // IWYU pragma: export
#include "llm/hf_model.h"     // IWYU pragma: export
#include "llm/kernels.h"      // IWYU pragma: export
#include "llm/model.h"        // IWYU pragma: export
#include "llm/paged_kv.h"     // IWYU pragma: export
#include "llm/quant.h"        // IWYU pragma: export
#include "llm/safetensors.h"  // IWYU pragma: export
#include "llm/sampler.h"      // IWYU pragma: export
#include "llm/scheduler.h"    // IWYU pragma: export
#include "llm/tokenizer.h"    // IWYU pragma: export
