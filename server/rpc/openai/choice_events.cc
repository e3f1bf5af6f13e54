#include "server/rpc/openai/choice_events.h"

#include <utility>

namespace attnserve::server::openai {

void ChoiceEvents::Push(ChoiceEvent event) {
  absl::MutexLock lock(&mu_);
  if (event.finished) --unfinished_;
  queue_.push_back(std::move(event));
}

std::vector<ChoiceEvent> ChoiceEvents::Take(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(this, &ChoiceEvents::Ready), timeout);
  std::vector<ChoiceEvent> out(std::make_move_iterator(queue_.begin()),
                               std::make_move_iterator(queue_.end()));
  queue_.clear();
  return out;
}

bool ChoiceEvents::Done() {
  absl::MutexLock lock(&mu_);
  return unfinished_ <= 0 && queue_.empty();
}

}  // namespace attnserve::server::openai
