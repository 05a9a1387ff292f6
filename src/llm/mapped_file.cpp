#include "llm/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "support/error.h"

namespace yirage::llm {
namespace {

// Closes the descriptor on every path out of open(); the mapping outlives it.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

MappedFile MappedFile::open(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", path);
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0) return {};  // mmap rejects a zero length
  void* address = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (address == MAP_FAILED) fail("{}: cannot mmap: {}", path, std::strerror(errno));
  return {static_cast<const std::byte*>(address), size};
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : address_(std::exchange(other.address_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    address_ = std::exchange(other.address_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  unmap();
}

void MappedFile::unmap() {
  if (address_ != nullptr) munmap(const_cast<std::byte*>(address_), size_);
  address_ = nullptr;
  size_ = 0;
}

}  // namespace yirage::llm
