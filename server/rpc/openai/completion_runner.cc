#include "server/rpc/openai/completion_runner.h"

#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"

namespace attnserve::server::openai {

uint64_t ChoiceSeed(uint64_t seed, int j) {
  if (j == 0) return seed;
  // splitmix64 of (seed, j): streams that share nothing.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(j);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

absl::StatusOr<std::unique_ptr<scheduler::Job>> CompletionRunner::ChoiceJob(
    const Caller& caller, const CompletionRequest& request, const PromptRun& run,
    std::vector<int64_t> tokens, std::optional<SessionUse> session, bool close_session, int index,
    uint64_t seed, const std::shared_ptr<ChoiceEvents>& events) {
  auto job = std::make_unique<scheduler::Job>();
  job->client = caller.client;
  job->cache_scope = options_.prefix_cache_global ? "" : caller.principal;
  job->model = run.model;
  job->tokens = IdsTensor(tokens);
  job->output = model::OutputKind::kLastLogits;
  job->max_new_tokens = request.max_tokens;
  job->sampling = request.sampling;
  job->sampling.seed = seed;
  ASSIGN_OR_RETURN(
      std::shared_ptr<text::GenerationText> generation,
      AttachGenerationText(
          *run.model, {request.stop, request.stop_token_ids, request.ignore_eos, run.text_prompt},
          options_.text_limits, job.get()));
  std::shared_ptr<Session> held = session.has_value() ? session->get() : nullptr;
  if (session.has_value()) job->session.emplace(std::move(*session));
  job->is_cancelled = [events] { return events->cancelled(); };
  job->on_token = [events, generation, index](const scheduler::SampledToken& sampled, int) {
    ChoiceEvent e;
    e.index = index;
    e.text = generation->Push(sampled.token).piece;
    e.tokens.push_back(sampled);
    events->Push(std::move(e));
  };
  job->on_done = [this, events, generation, index, held, close_session, caller](
                     const absl::Status& status, scheduler::JobResult) {
    ChoiceEvent e;
    e.index = index;
    e.finished = true;
    e.status = status;
    if (status.ok()) {
      const bool stopped = generation->stop_reason() != text::StopReason::kNone;
      if (!stopped) e.text = generation->Finish();
      e.finish_reason = stopped ? "stop" : "length";
    }
    if (held != nullptr) {
      if (close_session) {
        sessions_.Close(held->id(), caller).IgnoreError();
      } else {
        sessions_.Applied(*held);
      }
    }
    events->Push(std::move(e));
  };
  return job;
}

absl::Status CompletionRunner::Start(const Caller& caller, const CompletionRequest& request,
                                     PromptRun run, const std::shared_ptr<ChoiceEvents>& events) {
  const int n = request.n;
  if (n == 1 || run.ids.size() < 2) {
    if (run.session.has_value() && n > 1) {
      return FieldError("n", "must be 1 when continuing a session");
    }
    for (int j = 0; j < n; ++j) {
      std::optional<SessionUse> session;
      if (j == 0 && run.session.has_value()) session.emplace(std::move(*run.session));
      ASSIGN_OR_RETURN(std::unique_ptr<scheduler::Job> job,
                       ChoiceJob(caller, request, run, run.ids, std::move(session),
                                 /*close_session=*/false, run.first_index + j,
                                 ChoiceSeed(request.sampling.seed, j), events));
      if (absl::Status s = scheduler_.Submit(std::move(job)); !s.ok()) {
        if (j == 0) return s;
        for (int k = j; k < n; ++k) events->Push({run.first_index + k, "", {}, true, "", s});
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }
  if (run.session.has_value()) return FieldError("n", "must be 1 when continuing a session");
  // n > 1: the shared prefill on a temporary session, then n - 1 copies of its state.
  std::vector<SessionUse> temporary;
  std::vector<std::string> ids;  // the temporary sessions' (the uses move into the jobs)
  auto close_all = [&] {
    for (const std::string& id : ids) sessions_.Close(id, caller).IgnoreError();
  };
  for (int j = 0; j < n; ++j) {
    absl::StatusOr<SessionUse> s =
        sessions_.Create(run.model, absl::ZeroDuration(), caller.principal);
    if (!s.ok()) {
      close_all();
      return absl::Status(s.status().code(),
                          absl::StrCat("n = ", n, " needs ", n,
                                       " sessions for its choices: ", s.status().message()));
    }
    ids.push_back((*s)->id());
    temporary.push_back(*std::move(s));
  }
  std::vector<std::shared_ptr<Session>> shared;
  for (const SessionUse& s : temporary) shared.push_back(s.get());
  auto prefill = std::make_unique<scheduler::Job>();
  prefill->client = caller.client;
  prefill->cache_scope = options_.prefix_cache_global ? "" : caller.principal;
  prefill->model = run.model;
  prefill->tokens = IdsTensor(std::vector<int64_t>(run.ids.begin(), run.ids.end() - 1));
  prefill->output = model::OutputKind::kLastLogits;
  prefill->session.emplace(SessionUse(shared[0]));
  prefill->is_cancelled = [events] { return events->cancelled(); };
  auto copied = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> copied_future = copied->get_future();
  prefill->on_done = [this, shared, copied](const absl::Status& status, scheduler::JobResult) {
    absl::Status s = status;
    // At the head of the parent's queue (its job is ending): nothing computes on it now.
    for (size_t j = 1; j < shared.size() && s.ok(); ++j) {
      s = sessions_.CopyState(*shared[0], *shared[j]);
    }
    copied->set_value(s);
  };
  if (absl::Status s = scheduler_.Submit(std::move(prefill)); !s.ok()) {
    close_all();
    return s;
  }
  if (absl::Status s = copied_future.get(); !s.ok()) {
    close_all();
    return s;
  }
  const std::vector<int64_t> last = {run.ids.back()};
  for (int j = 0; j < n; ++j) {
    absl::StatusOr<std::unique_ptr<scheduler::Job>> job =
        ChoiceJob(caller, request, run, last, std::move(temporary[j]), /*close_session=*/true,
                  run.first_index + j, ChoiceSeed(request.sampling.seed, j), events);
    absl::Status s = job.ok() ? scheduler_.Submit(*std::move(job)) : job.status();
    if (!s.ok()) {
      if (j == 0) {
        close_all();
        return s;
      }
      for (int k = j; k < n; ++k) {
        sessions_.Close(ids[k], caller).IgnoreError();
        events->Push({run.first_index + k, "", {}, true, "", s});
      }
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

}  // namespace attnserve::server::openai
