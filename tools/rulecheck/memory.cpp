// rulecheck's global operator new: memory is mapped in bulk, not page by page.
//
// Why: rulecheck is a short-lived process, and on the virtual machines it is
// measured on (Firecracker guests) the first write to a fresh page costs a
// fault of ~9-15 µs, while Linux's MADV_POPULATE_WRITE maps pages for ~1 µs
// each and the first write to a populated page then costs ~5 µs
// (docs/performance.md, "Page faults"; BM_FreshPages). A 100k-step replay
// with one 10,000-sample window takes 300-460 more faults than a threshold
// rule's (its history growing by doubling, the order statistics' heaps):
// several ms of a ~30 ms process. So every allocation through operator new
// is followed by one madvise that maps its whole pages at once when it is
// large (glibc serves those with their own mapping), and otherwise the pages
// the heap's top grew by (small blocks come from there; glibc grows it by at
// least 128 KiB).
//
// Allocation itself stays glibc's, and operator delete the default (free).
// A block's capacity that is never written costs its pages' mapping (~1 µs
// each) and memory until freed: rulecheck's large blocks are vectors and
// buffers that mostly fill. Kernels without MADV_POPULATE_WRITE (before
// 5.14) answer EINVAL and everything behaves as before. Not compiled under
// sanitizers, which replace operator new themselves. Only rulecheck links
// this file: the library never changes how its host allocates.

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define VIGIL_SANITIZED 1
#endif
#endif
#if !defined(VIGIL_SANITIZED) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && \
    defined(__linux__)

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

namespace {

constexpr std::uintptr_t page = 4096;
/// Blocks at least this large are populated on their own; glibc maps
/// blocks from 128 KiB (its default mmap threshold) separately.
constexpr std::size_t large = 64 * 1024;

std::atomic<std::uintptr_t> heap_top{0};  // the heap's top as last populated

void populate(std::uintptr_t from, std::uintptr_t to) {
  from = (from + page - 1) & ~(page - 1);
  to &= ~(page - 1);
  if (to > from) ::madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE);
}

void* populated(void* p, std::size_t n) {
  if (p == nullptr) return p;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  if (n >= large) {
    populate(at, at + n);
    return p;
  }
  // sbrk(0) reads glibc's cached break: no system call. The first time,
  // the heap above this block (what glibc's first growth left) is populated.
  const auto top = reinterpret_cast<std::uintptr_t>(::sbrk(0));
  std::uintptr_t seen = heap_top.load(std::memory_order_relaxed);
  if (top > seen && heap_top.compare_exchange_strong(seen, top, std::memory_order_relaxed))
    populate(seen != 0 ? seen : at, top);
  return p;
}

/// operator new's loop around `get` (malloc or aligned_alloc of n bytes):
/// the new-handler until it gives memory, bad_alloc without one.
template <class Get>
void* allocate(std::size_t n, Get get) {
  for (;;) {
    if (void* p = get()) return populated(p, n);
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

void* allocate(std::size_t n) {
  return allocate(n, [n] { return std::malloc(n == 0 ? 1 : n); });
}

void* allocate(std::size_t n, std::align_val_t al) {
  const auto a = static_cast<std::size_t>(al);
  // aligned_alloc wants a size that is a multiple of the alignment.
  const std::size_t size = ((n == 0 ? 1 : n) + a - 1) / a * a;
  return allocate(n, [a, size] { return std::aligned_alloc(a, size); });
}

}  // namespace

void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate(n, a); }

#endif
