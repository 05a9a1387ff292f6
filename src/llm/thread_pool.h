// A persistent pool of worker threads for the forward pass. A decode step runs a few hundred short
// parallel regions (one per matmul), so waking threads through the kernel each time would cost
// more than the work: workers spin briefly on a generation counter and only then sleep on it.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace yirage::llm {

class ThreadPool {
 public:
  // Whose threads run the regions: the pool's own, or OpenMP's. The fused hot blocks run on the
  // cpu backend's OpenMP threads, and two sets of spinning workers on the same cores would take
  // turns at each region's barrier, so a model using them runs its own regions on OpenMP too.
  // Without OpenMP in this build, `openmp` runs every region on the calling thread alone.
  enum class Workers { own, openmp };
  static bool openmp_available();

  // `threads` counts the calling thread, which takes part in every region as thread 0.
  explicit ThreadPool(int threads, Workers workers = Workers::own);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  int size() const { return threads_; }

  // Calls fn(thread, n) once on each of n threads (n = size(), or fewer where OpenMP gives fewer)
  // and returns when all calls have finished. An exception thrown by any call is rethrown here.
  template <typename F>
  void run(F&& fn) {
    if (threads_ == 1 && !openmp_) {
      fn(0, 1);
      return;
    }
    using Fn = std::remove_reference_t<F>;
    dispatch([](void* ctx, int thread, int n) { (*static_cast<Fn*>(ctx))(thread, n); },
             static_cast<void*>(&fn));
  }

 private:
  using Trampoline = void (*)(void*, int, int);
  void dispatch(Trampoline trampoline, void* ctx);
  void worker(int index);
  void call(int index, int count);
  void run_openmp();

  int threads_;
  bool openmp_ = false;
  std::vector<std::thread> workers_;
  Trampoline trampoline_ = nullptr;
  void* ctx_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace yirage::llm
