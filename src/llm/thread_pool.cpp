#include "llm/thread_pool.h"

#include <utility>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "support/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace yirage::llm {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// About 100 µs of spinning before a worker sleeps: longer than the gap between two matmuls of a
// decode step, shorter than anything a user would notice on an idle machine.
constexpr int kSpinIterations = 4000;

}  // namespace

bool ThreadPool::openmp_available() {
#if defined(_OPENMP)
  return true;
#else
  return false;
#endif
}

ThreadPool::ThreadPool(int threads, Workers workers) : threads_(threads) {
  if (threads < 1 || threads > 1024) fail("thread pool: {} threads (want 1 to 1024)", threads);
  if (workers == Workers::openmp) {
    openmp_ = true;
    if (!openmp_available()) threads_ = 1;
    return;
  }
  workers_.reserve(static_cast<size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::call(int index, int count) {
  try {
    trampoline_(ctx_, index, count);
  } catch (...) {
    std::lock_guard lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::run_openmp() {
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads_)
  call(omp_get_thread_num(), omp_get_num_threads());
#else
  call(0, 1);
#endif
}

void ThreadPool::dispatch(Trampoline trampoline, void* ctx) {
  trampoline_ = trampoline;
  ctx_ = ctx;
  if (openmp_) {
    run_openmp();
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return;
  }
  pending_.store(threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  call(0, threads_);
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinIterations)
      cpu_relax();
    else
      std::this_thread::yield();
  }
  if (error_) {
    std::exception_ptr e = std::exchange(error_, nullptr);
    std::rethrow_exception(e);
  }
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t now = generation_.load(std::memory_order_acquire);
    for (int spins = 0; now == seen && spins < kSpinIterations; ++spins) {
      cpu_relax();
      now = generation_.load(std::memory_order_acquire);
    }
    while (now == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stop_.load(std::memory_order_acquire)) return;
    call(index, threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace yirage::llm
