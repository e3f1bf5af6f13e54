// config.json as transformers writes it (Python's json: bare NaN, Infinity, -Infinity), and the
// defaults a config's absent fields get (what ListModels shows).
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/wrappers.pb.h>
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "server/model/model_config.h"
#include "server/model/python_json.h"

namespace attnserve::model {
namespace {

TEST(PythonJsonTest, BareNonFiniteTokensBecomeProtobufsStringsAndNothingElseChanges) {
  EXPECT_EQ(PythonJsonToJson(R"({"time_step_limit": [0.0, Infinity], "x": -Infinity, "y":NaN})"),
            R"({"time_step_limit": [0.0, "Infinity"], "x": "-Infinity", "y":"NaN"})");
  // Inside strings, escaped quotes included, and as parts of names: unchanged.
  for (const char* same :
       {R"({"a": "Infinity NaN", "b": "say \"NaN\" Infinity"})",
        R"({"NaN": 1, "c": "\\", "d": [1e5, -2]})", R"({"e": NaNx})", R"({"f": xInfinity})"}) {
    EXPECT_EQ(PythonJsonToJson(same), same);
  }
  google::protobuf::Struct s;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  PythonJsonToJson("{\"l\": [0.0, Infinity],\n\"n\": NaN, \"m\": -Infinity}"), &s)
                  .ok());
  EXPECT_EQ(s.fields().at("l").list_value().values(0).number_value(), 0.0);
  EXPECT_EQ(s.fields().at("n").string_value(), "NaN");
  // A double field reads the strings as the numbers Python meant.
  for (auto [token, check] : std::vector<std::pair<const char*, bool (*)(double)>>{
           {"Infinity", [](double v) { return std::isinf(v) && v > 0; }},
           {"-Infinity", [](double v) { return std::isinf(v) && v < 0; }},
           {"NaN", [](double v) { return std::isnan(v); }}}) {
    google::protobuf::DoubleValue d;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(PythonJsonToJson(token), &d).ok())
        << token;
    EXPECT_TRUE(check(d.value())) << token;
  }
}

TEST(PythonJsonTest, AConfigWithInfinityParsesAsPythonReadsIt) {
  // Before: "config.json is not a JSON object". A model config with a non-finite value in a
  // field attnserve does not read loads.
  auto parsed = ParseModelConfigJson(
      R"({"vocab_size": 10, "hidden_size": 32, "layers": ["mamba"], "time_step_limit": [0.0, Infinity], "note": NaN})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->layers_size(), 1);
  auto mamba = ParseModelConfigJson(
      R"({"model_type": "mamba", "hidden_size": 32, "num_hidden_layers": 2, "vocab_size": 10, "time_step_max": Infinity})");
  ASSERT_TRUE(mamba.ok()) << mamba.status();
  EXPECT_EQ(mamba->layers_size(), 2);
}

TEST(ModelConfigJsonTest, ASparseConfigShowsTheStrideAndColumnsItComputesWith) {
  auto fixed = ParseModelConfigJson(
      R"({"vocab_size": 10, "hidden_size": 32, "layers": ["sparse"], "sparse_pattern": "fixed"})");
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->sparse_stride(), 128);
  EXPECT_EQ(fixed->sparse_c(), 8);
  auto strided =
      ParseModelConfigJson(R"({"vocab_size": 10, "hidden_size": 32, "layers": ["sparse"]})");
  ASSERT_TRUE(strided.ok()) << strided.status();
  EXPECT_EQ(strided->sparse_pattern(), "strided");
  EXPECT_EQ(strided->sparse_stride(), 128);
}

}  // namespace
}  // namespace attnserve::model
