#include "server/tensor_proto.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "tests/unit/test_util.h"

namespace attnserve::server {
namespace {

TEST(TensorProtoTest, FloatRoundTripIsExactElementByElement) {
  // A non-contiguous view: the proto is row-major whatever the layout.
  at::Tensor t = testing::RandomTensor({3, 5, 7}, 1).transpose(0, 2);
  v1::Tensor proto;
  ASSERT_TRUE(TensorToProto(t, &proto).ok());
  ASSERT_EQ(proto.dtype(), v1::DATA_TYPE_FLOAT32);
  ASSERT_EQ(proto.shape_size(), 3);
  EXPECT_EQ(proto.shape(0), 7);
  EXPECT_EQ(proto.float_data_size(), 105);
  // Survive the wire, too.
  v1::Tensor parsed;
  ASSERT_TRUE(parsed.ParseFromString(proto.SerializeAsString()));
  auto back = TensorFromProto(parsed, 1 << 20);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->sizes(), t.sizes());
  at::Tensor tc = t.contiguous();
  for (int64_t i = 0; i < t.numel(); ++i) {
    ASSERT_EQ(back->data_ptr<float>()[i], tc.data_ptr<float>()[i]) << "element " << i;
  }
}

TEST(TensorProtoTest, Int64RoundTrip) {
  at::Tensor t = at::arange(-5, 7, at::kLong).view({3, 4});
  v1::Tensor proto;
  ASSERT_TRUE(TensorToProto(t, &proto).ok());
  auto back = TensorFromProto(proto, 100);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(at::equal(*back, t));
}

TEST(TensorProtoTest, ScalarAndEmptyShapes) {
  for (at::Tensor t : {at::scalar_tensor(3.5f), at::empty({0, 4}, at::kFloat)}) {
    v1::Tensor proto;
    ASSERT_TRUE(TensorToProto(t, &proto).ok());
    auto back = TensorFromProto(proto, 100);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(at::equal(*back, t));
  }
}

TEST(TensorProtoTest, RejectsBadMessages) {
  v1::Tensor proto;
  proto.add_shape(2);
  proto.add_shape(3);
  proto.set_dtype(v1::DATA_TYPE_FLOAT32);
  proto.add_float_data(1.0f);
  auto short_data = TensorFromProto(proto, 100);
  EXPECT_EQ(short_data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_data.status().message().find("needs 6 elements in float_data, got 1"),
            std::string::npos)
      << short_data.status();

  EXPECT_EQ(TensorFromProto(proto, 5).status().code(), absl::StatusCode::kResourceExhausted);

  v1::Tensor negative;
  negative.add_shape(-1);
  negative.set_dtype(v1::DATA_TYPE_FLOAT32);
  EXPECT_EQ(TensorFromProto(negative, 100).status().code(), absl::StatusCode::kInvalidArgument);

  v1::Tensor untyped;
  untyped.add_shape(1);
  untyped.add_float_data(1.0f);
  auto no_dtype = TensorFromProto(untyped, 100);
  EXPECT_NE(no_dtype.status().message().find("DATA_TYPE_UNSPECIFIED"), std::string::npos)
      << no_dtype.status();

  // Overflowing shapes are caught before multiplying out.
  v1::Tensor huge;
  for (int i = 0; i < 4; ++i) huge.add_shape(int64_t{1} << 40);
  huge.set_dtype(v1::DATA_TYPE_FLOAT32);
  EXPECT_EQ(TensorFromProto(huge, 1 << 20).status().code(), absl::StatusCode::kResourceExhausted);

  v1::Tensor out;
  EXPECT_EQ(TensorToProto(at::zeros({2}, at::kDouble), &out).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnserve::server
