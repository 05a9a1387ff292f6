// One graph tuned once at a time per cache file. Internal to src/tune.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace yirage::tune {

// Held while tune::optimize tunes one cache key, so that processes and threads sharing a cache
// file tune a graph once: the second waits, then finds the first one's entry (two `yirage serve`
// replicas starting on one model, or tests sharing a cache, each tuned every block before; and
// two tunings at once also disturb each other's profiles). It is an open-file-description lock
// (Linux's F_OFD_SETLK) on one byte of "<cache>.lock", the byte chosen by the key: such locks
// bind the file description rather than the process, so threads exclude each other too, and the
// kernel releases them when a process dies mid-tuning. Two keys that share a byte only wait for
// each other. Where the lock file cannot be opened or OFD locks do not exist, tuning goes on
// unlocked: the lock saves work, the cache's correctness does not rest on it.
class TuningLock {
 public:
  // Waits until the key's byte is free; `on_wait` is called once, before waiting, if another
  // holder was found. The wait polls, so that `should_stop` (Ctrl-C in Python, say) can end it:
  // the lock is then not held.
  TuningLock(const std::filesystem::path& cache_path, const std::string& key_id,
             const std::function<void()>& on_wait = {},
             const std::function<bool()>& should_stop = {});
  ~TuningLock();
  TuningLock(const TuningLock&) = delete;
  TuningLock& operator=(const TuningLock&) = delete;

  // Whether another holder had the key when this one asked: its entry may be stored now.
  bool waited() const { return waited_; }
  // Whether the lock is held (false where tuning goes on unlocked).
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  bool waited_ = false;
};

}  // namespace yirage::tune
