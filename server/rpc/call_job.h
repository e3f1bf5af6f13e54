// A scheduler job for a call, as every protocol door starts one: who asks (for the queue
// shares and the prefix cache's scope), the call's deadline and its cancellation. The door
// adds the model, session, tokens, outputs and hooks.
#pragma once

#include <grpcpp/server_context.h>

#include <functional>
#include <memory>

#include "server/grpc_status.h"
#include "server/scheduler/job.h"
#include "server/security/authenticator.h"

namespace attnserve::server {

// `context` must outlive the job (a call's context does: the job finishes the call).
// `also_cancelled` (may be empty) is asked besides the context's IsCancelled.
inline std::unique_ptr<scheduler::Job> NewCallJob(grpc::CallbackServerContext* context,
                                                  const Caller& caller, bool prefix_cache_global,
                                                  std::function<bool()> also_cancelled = {}) {
  auto job = std::make_unique<scheduler::Job>();
  job->client = caller.client;
  job->cache_scope = prefix_cache_global ? "" : caller.principal;
  job->deadline = CallDeadline(*context);
  if (also_cancelled) {
    job->is_cancelled = [context, also = std::move(also_cancelled)] {
      return also() || context->IsCancelled();
    };
  } else {
    job->is_cancelled = [context] { return context->IsCancelled(); };
  }
  return job;
}

}  // namespace attnserve::server
