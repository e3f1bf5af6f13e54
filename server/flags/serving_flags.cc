// The server's flags: serving
// The gRPC port, the metrics and health ports, reflection, this instance's identity and the drain.
// Declared for main.cc in server/flags/server_flags.h; `attnserve-server --help` lists
// them under this file's name.
#include "server/flags/server_flags.h"

ABSL_FLAG(std::string, host, "0.0.0.0", "Address the gRPC port listens on.");
ABSL_FLAG(int, port, 50051, "gRPC port (0: pick a free one and print it).");
ABSL_FLAG(std::string, metrics_host, "",
          "Address the metrics port listens on (empty: --host). The metrics endpoint is "
          "plaintext HTTP without authentication: keep it on the pod network or loopback.");
ABSL_FLAG(int, metrics_port, 9090,
          "Port of the Prometheus endpoint /metrics (0: pick a free one and print it; -1: off).");
ABSL_FLAG(int, health_port, -1,
          "A plaintext port serving only grpc.health.v1 (for probes that cannot speak TLS, such "
          "as Kubernetes' gRPC probes); -1: none (health is on the main port as well).");
ABSL_FLAG(std::string, health_host, "",
          "Address of --health_port (empty: --host; in Kubernetes, $(POD_IP)).");
ABSL_FLAG(bool, reflection, true,
          "Serve gRPC server reflection (unauthenticated: turn it off on an exposed port).");
ABSL_FLAG(std::string, instance_name, "",
          "This instance's name, returned with its sessions and named in NOT_FOUND for a session "
          "it does not hold (empty: the hostname, which is the pod name in Kubernetes).");
ABSL_FLAG(std::string, advertise_address, "",
          "host:port at which clients reach this instance, returned with its sessions so that "
          "clients send a session's later calls here (in Kubernetes: $(POD_IP):50051 from the "
          "downward API). Empty: unknown; clients use the address they connected to.");
ABSL_FLAG(int, drain_deadline_s, 10, "Seconds calls in flight get to finish on shutdown.");
