#include "tune/tuning_lock.h"

#include <cerrno>
#include <chrono>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

namespace yirage::tune {

TuningLock::TuningLock(const std::filesystem::path& cache_path, const std::string& key_id,
                       const std::function<void()>& on_wait,
                       const std::function<bool()>& should_stop) {
#ifdef F_OFD_SETLK
  std::filesystem::path lock_path = cache_path;
  lock_path += ".lock";
  fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return;
  struct flock range {};
  range.l_type = F_WRLCK;
  range.l_whence = SEEK_SET;
  range.l_start = off_t(std::hash<std::string>{}(key_id) % (off_t{1} << 30));
  range.l_len = 1;
  // Polled rather than blocking in F_OFD_SETLKW, which no flag of the caller's can interrupt;
  // 20 ms is nothing against the tuning waited for.
  while (::fcntl(fd_, F_OFD_SETLK, &range) != 0) {
    if ((errno != EAGAIN && errno != EACCES) || (should_stop && should_stop())) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
    if (!waited_ && on_wait) on_wait();
    waited_ = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
#else
  (void)cache_path;
  (void)key_id;
  (void)on_wait;
  (void)should_stop;
#endif
}

TuningLock::~TuningLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the description releases its locks
}

}  // namespace yirage::tune
