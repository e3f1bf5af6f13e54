// JSON as Python's json module writes it, read with protobuf's parser. transformers writes
// config.json with json.dumps, which emits the bare tokens NaN, Infinity and -Infinity for
// such floats (Mamba-2's "time_step_limit": [0.0, Infinity]); they are not JSON, and
// protobuf's parser (like any strict one) refuses them. Python, every Hugging Face tool and
// llama.cpp's converter read them, so attnserve does too.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace attnserve::model {

// `json` with each bare NaN, Infinity and -Infinity outside strings written as the JSON
// strings "NaN", "Infinity" and "-Infinity" (protobuf's JSON form of such a double: a double
// field of a message reads them as the numbers; a Struct holds them as those strings). Everything
// else is unchanged, byte for byte; a malformed text stays malformed for the parser to report.
std::string PythonJsonToJson(absl::string_view json);

}  // namespace attnserve::model
