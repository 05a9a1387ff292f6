// YiRage IR: the kernel graph and its values.
//
// A kernel graph is the program a user or a model hands to YiRage: a DAG of device-level tensor
// ops (matmul, elementwise, reductions, norms, softmax, shape ops, embedding, rope, and
// quant_matmul over weights in GGUF blocks) over tensors of up to four dims in f32, f16 or bf16
// (u8 for quantized weight blocks). Every node is checked and its result type inferred
// when it is added, so an invalid program is rejected at the op that breaks a rule. The module
// also serializes graphs to versioned JSON, hashes them structurally for the tuning cache, and
// renders them as DOT/SVG. Later stages (search, verify, backends) read graphs through this
// header only.
#pragma once

#include "ir/dtype.h"
#include "ir/host_tensor.h"
#include "ir/kernel_graph.h"
#include "ir/ops.h"
#include "ir/quant.h"
#include "ir/serialize.h"
#include "ir/shape.h"
