// attnserve-server: serves gRPC health checking and reflection on --port until SIGTERM or
// SIGINT, then drains. The inference API joins it with the server issue.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/cuda_device.h"

ABSL_FLAG(std::string, host, "0.0.0.0", "Address to listen on.");
ABSL_FLAG(int, port, 50051, "gRPC port.");
ABSL_FLAG(int, drain_deadline_s, 10, "Seconds in-flight calls get to finish on shutdown.");

namespace {
std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }
}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("attnserve-server --port=50051");
  absl::ParseCommandLine(argc, argv);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address =
      absl::StrCat(absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port));
  int bound_port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &bound_port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    std::cerr << "attnserve-server: cannot listen on " << address << "\n";
    return 1;
  }
  std::cout << "attnserve-server listening on " << absl::GetFlag(FLAGS_host) << ":" << bound_port
            << " (" << attnserve::kernels::DescribeCudaDevices() << ")" << std::endl;

  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));

  std::cout << "attnserve-server: draining" << std::endl;
  server->GetHealthCheckService()->SetServingStatus(false);
  server->Shutdown(std::chrono::system_clock::now() +
                   std::chrono::seconds(absl::GetFlag(FLAGS_drain_deadline_s)));
  std::cout << "attnserve-server: stopped" << std::endl;
  return 0;
}
