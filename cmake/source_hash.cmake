# Run at every build (the yirage_source_hash target): writes OUT, a header holding a hash of every
# file under SRC, and touches it only when the hash changed, so that an unchanged tree rebuilds
# nothing. The tuning cache keys its entries by this hash: a build whose code generators differ
# never reuses another build's winners, whether or not the tree is a git checkout.
file(GLOB_RECURSE files LIST_DIRECTORIES false "${SRC}/*")
list(SORT files)
set(listing "")
foreach(file ${files})
  file(SHA256 "${file}" hash)
  file(RELATIVE_PATH relative "${SRC}" "${file}")
  string(APPEND listing "${relative} ${hash}\n")
endforeach()
string(SHA256 total "${listing}")
string(SUBSTRING "${total}" 0 12 short)
set(content "// Generated at build time by cmake/source_hash.cmake.
#pragma once

namespace yirage {
// The first 12 hex digits of a hash of every file under src/.
inline constexpr const char* kSourceHash = \"${short}\";
}  // namespace yirage
")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUT}" "${content}")
endif()
