// attnserve-export-model: writes built-in default models to disk as model folders (the
// Mamba one in the Hugging Face layout), e.g. to start a repository of one's own.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/model/default_models.h"
#include "server/model/model_io.h"

ABSL_FLAG(std::string, models, "all",
          "Comma-separated default models to write (standard, linformer, linear, mamba, "
          "hybrid), or all.");
ABSL_FLAG(std::string, out, "", "Repository folder to write into: one subfolder per model.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "attnserve-export-model --models=mamba,hybrid --out=/path/to/repository");
  absl::ParseCommandLine(argc, argv);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::cerr << "attnserve-export-model: --out is required\n";
    return 2;
  }
  std::vector<std::string> names = attnserve::model::DefaultModelNames();
  if (absl::GetFlag(FLAGS_models) != "all") {
    names = absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipEmpty());
  }
  for (const std::string& name : names) {
    auto model = attnserve::model::BuildDefaultModel(name);
    if (!model.ok()) {
      std::cerr << "attnserve-export-model: " << model.status().message() << "\n";
      return 1;
    }
    const std::string dir = out + "/" + name;
    if (auto s = attnserve::model::WriteModelFolder(**model, dir); !s.ok()) {
      std::cerr << "attnserve-export-model: " << s.message() << "\n";
      return 1;
    }
    std::cout << "wrote " << dir << "\n";
  }
  return 0;
}
