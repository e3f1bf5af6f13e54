// attnserve_session_store_bench: what it costs to take a session out of memory and bring it
// back: snapshot (encode) and restore (decode) times, bytes per session, and the time of each
// session store (dir: on a folder of this disk, redis:// on a redis-server this bench starts on
// loopback), for a mamba-130m-shaped model and a GPT-2-small-shaped standard model (12 layers
// of width 768) after --tokens tokens (default 4096). Baselines in the same run: memcpy of the
// snapshot's bytes, and a plain write() + fsync() of them to a file in the same folder (what
// the disk itself does). Then the cost a checkpoint adds to an append: SessionPersistence::Save
// (encode and queue, on the scheduler's thread) against one decode step of the same model.
//
//   attnserve_session_store_bench [--tokens=4096] [--reps=5] [--dir=/var/tmp] [--threads=2]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/common/memory_reuse.h"
#include "server/model/model.h"
#include "server/model/model_repository.h"
#include "server/sessions/dir_session_store.h"
#include "server/sessions/redis_session_store.h"
#include "server/sessions/session_persistence.h"
#include "server/sessions/session_snapshot.h"
#include "server/sessions/session_table.h"
#include "tests/common/redis_server.h"

namespace {

using namespace attnserve;
using bench::MedianMs;

v1::ModelConfig Mamba130m() {
  v1::ModelConfig c;
  c.set_model_type("attnserve");
  c.set_vocab_size(50280);
  c.set_hidden_size(768);
  for (int i = 0; i < 24; ++i) c.add_layers("mamba");
  c.set_state_size(16);
  c.set_conv_kernel(4);
  c.set_expand(2);
  c.set_norm_epsilon(1e-5);
  c.set_tie_word_embeddings(true);
  c.set_max_sequence_length(1 << 20);
  return c;
}

v1::ModelConfig Gpt2SmallShapedStandard() {
  v1::ModelConfig c;
  c.set_model_type("attnserve");
  c.set_vocab_size(50257);
  c.set_hidden_size(768);
  for (int i = 0; i < 12; ++i) c.add_layers("standard");
  c.set_num_heads(12);
  c.set_intermediate_size(3072);
  c.set_norm_epsilon(1e-5);
  c.set_tie_word_embeddings(true);
  c.set_max_sequence_length(8192);
  return c;
}

void Row(const char* model, const char* what, double bytes, double ms) {
  std::printf("%-22s %-34s %10.1f %9.2f %9.2f\n", model, what, bytes / 1e6, ms,
              ms > 0 ? bytes / 1e6 / ms : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t tokens = 4096;
  int reps = 5, threads = 2;
  std::string dir = "/var/tmp";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--tokens=", 0) == 0) tokens = std::atoll(arg.c_str() + 9);
    if (arg.rfind("--reps=", 0) == 0) reps = std::max(1, std::atoi(arg.c_str() + 7));
    if (arg.rfind("--dir=", 0) == 0) dir = arg.substr(6);
    if (arg.rfind("--threads=", 0) == 0) threads = std::atoi(arg.c_str() + 10);
    if (arg == "--help") {
      std::printf(
          "attnserve_session_store_bench [--tokens=4096] [--reps=5] [--dir=/var/tmp] "
          "[--threads=2]\n");
      return 0;
    }
  }
  at::set_num_threads(threads);
  kernels::KeepFreedMemoryForReuse();  // as the server does
  char pattern[4096];
  std::snprintf(pattern, sizeof(pattern), "%s/attnserve_store_bench_XXXXXX", dir.c_str());
  if (::mkdtemp(pattern) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string folder = pattern;
  auto dir_store = server::DirSessionStore::Open(folder + "/store", int64_t{64} << 30);
  if (!dir_store.ok()) {
    std::cerr << dir_store.status() << std::endl;
    return 1;
  }
  std::unique_ptr<testing::RedisServer> redis;
  std::unique_ptr<server::RedisSessionStore> redis_store;
  if (testing::RedisServer::Installed()) {
    redis = std::make_unique<testing::RedisServer>();
    auto opened = server::RedisSessionStore::Open(redis->address(), absl::Seconds(30));
    if (opened.ok()) redis_store = *std::move(opened);
  }

  std::printf("session snapshots after %lld tokens; %d threads; median of %d; folder %s\n",
              static_cast<long long>(tokens), threads, reps, folder.c_str());
  std::printf("%-22s %-34s %10s %9s %9s\n", "model", "operation", "MB", "ms", "GB/s");
  const std::string id = "0123456789abcdef0123456789abcdef";
  std::vector<std::unique_ptr<model::Model>> built;
  for (const auto& [name, config] :
       {std::make_pair(std::string("mamba-130m"), Mamba130m()),
        std::make_pair(std::string("standard-12x768"), Gpt2SmallShapedStandard())}) {
    auto m = model::Model::Create(name, config, model::Model::RandomWeights(config, 7));
    if (!m.ok()) {
      std::cerr << m.status() << std::endl;
      return 1;
    }
    built.push_back(*std::move(m));
  }
  auto repository = model::ModelRepository::FromModels(std::move(built));
  struct CheckpointCost {
    std::string model;
    double save_ms, step_ms;
  };
  std::vector<CheckpointCost> checkpoint_costs;
  for (const model::Model* m : (*repository)->models()) {
    auto session = std::make_shared<server::Session>(id, m, absl::Minutes(10), *m->NewState());
    const at::Tensor prompt = at::randint(0, m->vocab_size(), {1, tokens}, at::kLong);
    for (int64_t done = 0; done < tokens; done += 512) {  // prefill in chunks, as the server
      const int64_t n = std::min<int64_t>(512, tokens - done);
      if (auto out = m->Forward(prompt.narrow(1, done, n), &session->state,
                                model::OutputKind::kLastLogits);
          !out.ok()) {
        std::cerr << out.status() << std::endl;
        return 1;
      }
    }
    const char* label = m->name().c_str();
    std::string snapshot;
    const double encode =
        MedianMs(reps, [&] { snapshot = server::EncodeSessionSnapshot(*session); });
    const double bytes = static_cast<double>(snapshot.size());
    std::string copy(snapshot.size(), '\0');
    Row(label, "baseline: memcpy", bytes,
        MedianMs(reps, [&] { std::memcpy(copy.data(), snapshot.data(), snapshot.size()); }));
    const std::string plain = folder + "/plain";
    Row(label, "baseline: write+fsync, same folder", bytes, MedianMs(reps, [&] {
          const int fd = ::open(plain.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
          for (size_t off = 0; off < snapshot.size();) {
            const ssize_t n = ::write(fd, snapshot.data() + off, snapshot.size() - off);
            if (n <= 0) break;
            off += static_cast<size_t>(n);
          }
          ::fsync(fd);
          ::close(fd);
        }));
    Row(label, "encode", bytes, encode);
    const double decode = MedianMs(reps, [&] {
      if (!server::DecodeSessionSnapshot(snapshot, **repository).ok()) std::abort();
    });
    Row(label, "decode", bytes, decode);
    std::vector<std::pair<std::string, server::SessionStore*>> stores = {
        {"dir:", dir_store->get()}};
    if (redis_store != nullptr) stores.push_back({"redis://", redis_store.get()});
    for (const auto& [store_name, store] : stores) {
      if (store_name == "redis://" && snapshot.size() >= (size_t{512} << 20)) {
        std::printf("%-22s %-34s (above Redis's 512 MB string limit)\n", label,
                    (store_name + " put").c_str());
        continue;
      }
      const double put = MedianMs(reps, [&] {
        if (absl::Status s = store->Put(id, snapshot, absl::Minutes(10)); !s.ok()) {
          std::cerr << s << std::endl;
          std::exit(1);
        }
      });
      std::string got;
      const double get = MedianMs(reps, [&] { got = *store->Get(id); });
      Row(label, (store_name + " put").c_str(), bytes, put);
      Row(label, (store_name + " get").c_str(), bytes, get);
      Row(label, (store_name + " save: encode + put").c_str(), bytes, encode + put);
      Row(label, (store_name + " restore: get + decode").c_str(), bytes, get + decode);
      (void)store->Delete(id);
    }
    // A checkpoint on the scheduler's thread: Save encodes and queues; the writer thread
    // writes meanwhile (flushed between repetitions, so each Save finds room).
    server::SessionPersistence persistence(
        *server::DirSessionStore::Open(folder + "/checkpoints", int64_t{64} << 30), **repository,
        {}, nullptr);
    std::vector<double> saves;
    for (int i = 0; i < reps; ++i) {
      persistence.Flush(absl::InfiniteFuture());
      saves.push_back(MedianMs(1, [&] { (void)persistence.Save(*session); }));
    }
    persistence.Flush(absl::InfiniteFuture());
    std::sort(saves.begin(), saves.end());
    const double save = saves[saves.size() / 2];
    model::ModelState step_state;
    step_state.position = session->state.position;
    for (const auto& layer : session->state.layers) step_state.layers.push_back(layer.Clone());
    std::vector<model::ModelState*> rows = {&step_state};
    const double step = MedianMs(reps, [&] { (void)m->StepBatch({1}, rows); });
    checkpoint_costs.push_back({m->name(), save, step});
  }
  std::printf("\ncheckpoint cost on the scheduler's thread (--checkpoint_every_appends=1)\n");
  std::printf("%-22s %14s %18s %10s\n", "model", "save ms", "decode step ms", "ratio");
  for (const CheckpointCost& c : checkpoint_costs) {
    std::printf("%-22s %14.2f %18.2f %10.2f\n", c.model.c_str(), c.save_ms, c.step_ms,
                c.save_ms / c.step_ms);
  }
  std::filesystem::remove_all(folder);
  return 0;
}
