// Backend::buffer_from_host_ptr's default: a buffer over the caller's host memory (backend.h).
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "backend/backend.h"
#include "support/error.h"

namespace yirage::backend {
namespace {

class HostMemoryBuffer final : public Buffer {
 public:
  HostMemoryBuffer(void* data, size_t size, HostAccess access, std::string what)
      : data_(data), size_(size), access_(access), what_(std::move(what)) {}

  size_t size() const override { return size_; }
  void write(std::span<const std::byte> bytes) override {
    if (access_ == HostAccess::read_only)
      fail("{} is the caller's memory, which the backend may only read", what_);
    check_size(bytes.size());
    std::memcpy(data_, bytes.data(), bytes.size());
  }
  void read(std::span<std::byte> bytes) const override {
    check_size(bytes.size());
    std::memcpy(bytes.data(), data_, bytes.size());
  }
  void* host_address() override { return data_; }

 private:
  void check_size(size_t bytes) const {
    if (bytes != size_) fail("{}: {} bytes given for a buffer of {} bytes", what_, bytes, size_);
  }

  void* data_;
  size_t size_;
  HostAccess access_;
  std::string what_;
};

}  // namespace

std::unique_ptr<Buffer> Backend::buffer_from_host_ptr(void* data, size_t bytes, HostAccess access,
                                                      std::string what) {
  if (!buffer_type().host_visible) return nullptr;
  return std::make_unique<HostMemoryBuffer>(data, bytes, access, std::move(what));
}

}  // namespace yirage::backend
