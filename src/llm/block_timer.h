// Each hot block's launches and the time they took (ModelOptions::time_blocks), for the fused
// blocks and the hand-written ones alike: where the blocks launch on a backend, it is waited for
// before and after a launch, so that the time is the block's alone. The server's metrics read
// the times from another thread than the one stepping the model, hence the lock.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "llm/model.h"

namespace yirage::llm {

class BlockTimer {
 public:
  // `backend`: the one the blocks launch on, waited for around each launch; null for blocks that
  // run on the host's threads and return when done.
  BlockTimer(backend::Backend* backend, bool on) : backend_(backend), on_(on) {}

  // Names what `block` (a module, or any key) runs, for the times of its launches.
  void name(const void* block, std::string what) {
    if (!on_) return;
    std::lock_guard lock(mutex_);
    key_names_[block] = std::move(what);
  }

  // Times run() as a launch of the block `block` was named for.
  template <typename F>
  void time(const void* block, F&& run) {
    if (!on_) return run();
    time_as(key_names_.at(block), std::forward<F>(run));
  }

  // Times run() as a launch of the block named `what`.
  template <typename F>
  void time_as(const std::string& what, F&& run) {
    if (!on_) return run();
    if (backend_) backend_->synchronize();
    const auto start = std::chrono::steady_clock::now();
    run();
    if (backend_) backend_->synchronize();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::lock_guard lock(mutex_);
    auto [at, added] = index_.try_emplace(what, times_.size());
    if (added) times_.push_back({what, 0, 0});
    BlockTime& t = times_[at->second];
    ++t.launches;
    t.seconds += seconds;
  }

  // The blocks launched so far, in the order of their first launch.
  std::vector<BlockTime> times() const {
    std::lock_guard lock(mutex_);
    return times_;
  }

 private:
  backend::Backend* const backend_;
  const bool on_;
  mutable std::mutex mutex_;
  std::map<const void*, std::string> key_names_;  // written at load, before any launch
  std::map<std::string, size_t> index_;           // a block's name -> its times_
  std::vector<BlockTime> times_;
};

// The hand-written blocks, each call timed under the block's name and its rows.
std::unique_ptr<HotBlocks> timed_blocks(std::unique_ptr<HotBlocks> blocks);

}  // namespace yirage::llm
