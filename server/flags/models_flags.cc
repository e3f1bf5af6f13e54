// The server's flags: models
// What is served and where: the models, the sequence-length policy, the device, the weights'
// precision. Declared for main.cc in server/flags/server_flags.h; `attnserve-server --help` lists
// them under this file's name.
#include "server/flags/server_flags.h"
#include "server/policy.h"

ABSL_FLAG(std::string, model_repository, "",
          "Folder of model folders (config.json + model.safetensors each). Empty: the built-in "
          "default models standard, linformer, linear, mamba, hybrid, sliding_window, performer, "
          "rwkv and sparse.");
ABSL_FLAG(std::string, policy, attnserve::server::Policy::kDefaultSpec,
          "Sequence-length policy for model \"auto\": comma-separated rules "
          "variant[:max_tokens] checked in order (max_tokens inclusive, none: no bound) and "
          "variant:unbounded for streams that declare no expected length, or @file.json with "
          "{\"rules\": [{\"variant\": ..., \"max_tokens\": ...}, {\"variant\": ..., "
          "\"unbounded\": true}]}.");
ABSL_FLAG(std::string, device, "auto",
          "Where the models run: cpu, cuda, cuda:N, or auto (the first GPU when this build has "
          "CUDA kernels, a CUDA LibTorch and a visible device, else cpu; the log says which and "
          "why).");
ABSL_FLAG(std::string, weight_precision, "fp32",
          "fp32, or bf16: round every weight to bfloat16 at load and let decode steps read "
          "bfloat16 copies of the weight matrices (half the bytes per token; outputs differ from "
          "fp32 by the rounding of the weights), or int8 (CPU only): weight matrices quantized "
          "to int8 with a scale per block of 32 (llama.cpp's Q8_0 granularity) and decode steps "
          "multiplying them by int8-quantized activations (AVX512-VNNI where the CPU has it).");
ABSL_FLAG(std::string, activation_precision, "fp32",
          "fp32, or bf16 (with --weight_precision=bf16, CPU only): decode steps also round "
          "their activations to bfloat16 and multiply bfloat16 by bfloat16 (AVX512_BF16's "
          "vdpbf16ps where the CPU has it, else the same arithmetic in portable code), as "
          "llama.cpp's BF16 models do: fewer instructions per weight, outputs a little further "
          "from fp32's.");
ABSL_FLAG(std::string, kv_cache_precision, "fp32",
          "fp32, or bf16 (CPU only): standard attention layers keep their KV caches in "
          "bfloat16, keys and values rounded as they are written (half a session's cache bytes "
          "and half of what a decode step's attention reads; outputs differ from fp32's by that "
          "rounding). Sessions and snapshots of one setting do not load into the other.");
