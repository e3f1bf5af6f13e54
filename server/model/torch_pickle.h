// Checkpoints saved by torch.save (pytorch_model.bin: a zip archive holding a pickled dict of
// name -> tensor, the format of mamba_ssm's state-spaces/mamba-* and mamba2-* folders), read
// with LibTorch's own unpickler (torch::jit::pickle_load), so that no pickle parsing is written
// here. The tensors are re-laid as an in-memory safetensors file, so that the loader checks
// and converts them as it does every other checkpoint (float32, float16 and bfloat16 kept;
// float64 narrowed to float32; any other element type refused by name).
//
// Memory: the whole file is read, and the tensors are copied once more into the safetensors
// bytes (about twice the checkpoint at the peak of a load). A pickle can run code in Python;
// LibTorch's unpickler is C++ and runs none: it rebuilds the fixed set of globals torch.save
// writes (tensors, storages, containers) and fails on anything else.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/model/safetensors.h"

namespace attnserve::model {

// The tensors of the torch.save file at `path`: InvalidArgument naming the path when it is not
// a zip archive torch.save wrote, holds no dict of string -> tensor, or a tensor of another
// element type.
absl::StatusOr<std::unique_ptr<SafetensorsFile>> OpenTorchPickle(const std::string& path);

}  // namespace attnserve::model
