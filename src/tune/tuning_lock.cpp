#include "tune/tuning_lock.h"

#include <cerrno>

#include <fcntl.h>
#include <unistd.h>

namespace yirage::tune {

TuningLock::TuningLock(const std::filesystem::path& cache_path, const std::string& key_id,
                       const std::function<void()>& on_wait) {
#ifdef F_OFD_SETLKW
  std::filesystem::path lock_path = cache_path;
  lock_path += ".lock";
  fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return;
  struct flock range {};
  range.l_type = F_WRLCK;
  range.l_whence = SEEK_SET;
  range.l_start = off_t(std::hash<std::string>{}(key_id) % (off_t{1} << 30));
  range.l_len = 1;
  if (::fcntl(fd_, F_OFD_SETLK, &range) == 0) return;
  if (errno == EAGAIN || errno == EACCES) {
    waited_ = true;
    if (on_wait) on_wait();
    int status;
    while ((status = ::fcntl(fd_, F_OFD_SETLKW, &range)) != 0 && errno == EINTR) {
    }
    if (status == 0) return;
  }
  ::close(fd_);
  fd_ = -1;
#else
  (void)cache_path;
  (void)key_id;
  (void)on_wait;
#endif
}

TuningLock::~TuningLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the description releases its locks
}

}  // namespace yirage::tune
