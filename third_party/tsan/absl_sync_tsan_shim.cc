// ThreadSanitizer model of Debian's prebuilt Abseil synchronization primitives.
//
// Only linked in --config=tsan builds (see //third_party:absl and docs/SANITIZERS.md).
//
// Why: Debian's libabsl_synchronization.so is not compiled with -fsanitize=thread, so the atomics
// inside absl::Mutex, absl::CondVar, absl::Notification and absl::BlockingCounter are invisible to
// TSan. Every pair of critical sections on the same absl::Mutex then looks unordered, and TSan
// reports the data they protect as racing (a counter incremented under a Mutex by two threads is
// enough).
//
// How: this file defines the same (exported, out-of-line) member functions that the shared library
// defines. The dynamic linker binds every call, including calls from inside the library itself
// and from other uninstrumented libraries (gRPC), to the first definition in the global lookup
// scope, which is the one in this object: the test executable, or a shared object Bazel lists
// before the system libraries. Each definition tells TSan what the operation means, using the
// same annotations Abseil itself uses when it is built with TSan (absl/synchronization/mutex.cc),
// and forwards to the real implementation, found with dlsym(RTLD_NEXT, "<mangled name>"):
//
//   Mutex lock operations        __tsan_mutex_pre_lock ... real ... __tsan_mutex_post_lock
//   Mutex unlock operations      __tsan_mutex_pre_unlock ... real ... __tsan_mutex_post_unlock
//   Mutex::Await*, CondVar::Wait*  these release the mutex while they block and hold it again on
//                                return: modelled as unlock + lock around the real call
//   Mutex::~Mutex                __tsan_mutex_destroy (forget lock state; catch use/destroy races)
//   Notification                 Notify = release, successful waits = acquire (the library's fast
//                                path reads the flag without touching the mutex)
//   BlockingCounter              DecrementCount = release, Wait = acquire (non-final decrements
//                                are a bare atomic in the library)
//
// Between pre_* and post_* TSan ignores memory accesses, so Condition predicates that the library
// evaluates while it shuffles waiters (possibly on another thread) are not checked; the predicate
// call that Await makes first (below) is. Data races in code that uses these primitives are still
// reported: the shim only adds the happens-before edges the real primitives provide.
//
// Not interposed: CondVar::Signal/SignalAll (they carry no memory ordering of their own; waiters
// synchronize through the mutex, which is modelled), Barrier (built on Mutex calls that are
// interposed), the Mutex debug helpers and the library's private functions.
//
// The *WithTimeout variants are implemented here on top of the *WithDeadline ones (as the
// library does) instead of being forwarded: the library's *WithTimeout functions call its
// *WithDeadline ones through the PLT, i.e. back into this file, which would annotate twice.

#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/base/options.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

#ifndef __SANITIZE_THREAD__
#error "absl_sync_tsan_shim.cc is only meant for -fsanitize=thread builds (--config=tsan)"
#endif

// The mangled names below spell the inline namespace of Debian's Abseil build.
#define HOOKRELAY_STR2(x) #x
#define HOOKRELAY_STR(x) HOOKRELAY_STR2(x)
static_assert(__builtin_strcmp(HOOKRELAY_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME), "debian3") == 0,
              "Abseil's inline namespace changed: update the mangled names in this file "
              "(nm -D /usr/lib/x86_64-linux-gnu/libabsl_synchronization.so)");
#define ABSL_NS "_ZN4absl7debian3"
#define ABSL_NSK "_ZNK4absl7debian3"

namespace {

// absl/synchronization/mutex.cc: the mutex word has this bit set while a writer holds it.
constexpr intptr_t kMuWriter = 0x0008;

// The TSan flags for an unlock/relock of a mutex the caller holds (exclusively or shared).
unsigned HeldFlags(intptr_t mutex_word) {
  return (mutex_word & kMuWriter) != 0 ? 0u : __tsan_mutex_read_lock;
}

[[noreturn]] void Die(const char* what, const char* name) {
  std::fprintf(stderr, "absl_sync_tsan_shim: %s: %s\n", what, name);
  std::abort();
}

// The library's definition of `name`: the next one after this object in lookup order.
template <typename Fn>
Fn Real(std::atomic<void*>& slot, const char* name) {
  void* fn = slot.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = dlsym(RTLD_NEXT, name);
    if (fn == nullptr) Die("no definition after the shim (is libabsl_synchronization linked?)", name);
    slot.store(fn, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(fn);
}

// REAL(type, "mangled")(args...) calls the library's implementation.
#define REAL(type, mangled)                              \
  ([]() {                                                \
    static std::atomic<void*> slot{nullptr};             \
    return Real<type>(slot, mangled);                    \
  }())

constexpr char kMutexLock[] = ABSL_NS "5Mutex4LockEv";

// Fails loudly if the shim is linked but not in front of the library: then the library's own
// definitions would win and every Abseil lock would silently be invisible again.
__attribute__((constructor)) void CheckInterposition() {
  void* bound = dlsym(RTLD_DEFAULT, kMutexLock);
  Dl_info bound_info{};
  Dl_info self_info{};
  if (bound == nullptr || dladdr(bound, &bound_info) == 0 ||
      dladdr(reinterpret_cast<void*>(&CheckInterposition), &self_info) == 0 ||
      bound_info.dli_fbase != self_info.dli_fbase) {
    Die("absl::Mutex::Lock does not bind to the shim; it binds to",
        bound_info.dli_fname != nullptr ? bound_info.dli_fname : "(nothing)");
  }
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

// ----------------------------------------------------------------------------------------------
// Mutex

Mutex::~Mutex() {
  // As in Abseil's own TSan build. The inline constructor announced the mutex with
  // __tsan_mutex_create(this, __tsan_mutex_not_static) when it ran in instrumented code (ours);
  // for those TSan forgets the lock state and checks that no other thread used the mutex without
  // synchronizing with this destruction. Mutexes constructed inside uninstrumented libraries
  // (gRPC) were never announced, and with this flag their destruction is a no-op: whatever
  // orders their last use before it (refcounts, shared_ptr) is invisible to TSan.
  __tsan_mutex_destroy(this, __tsan_mutex_not_static);
  REAL(void (*)(Mutex*), ABSL_NS "5MutexD2Ev")(this);
}

void Mutex::Lock() {
  __tsan_mutex_pre_lock(this, 0);
  REAL(void (*)(Mutex*), ABSL_NS "5Mutex4LockEv")(this);
  __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::ReaderLock() {
  __tsan_mutex_pre_lock(this, __tsan_mutex_read_lock);
  REAL(void (*)(Mutex*), ABSL_NS "5Mutex10ReaderLockEv")(this);
  __tsan_mutex_post_lock(this, __tsan_mutex_read_lock, 0);
}

bool Mutex::TryLock() {
  __tsan_mutex_pre_lock(this, __tsan_mutex_try_lock);
  const bool locked = REAL(bool (*)(Mutex*), ABSL_NS "5Mutex7TryLockEv")(this);
  __tsan_mutex_post_lock(
      this, __tsan_mutex_try_lock | (locked ? 0u : __tsan_mutex_try_lock_failed), 0);
  return locked;
}

bool Mutex::ReaderTryLock() {
  __tsan_mutex_pre_lock(this, __tsan_mutex_try_read_lock);
  const bool locked = REAL(bool (*)(Mutex*), ABSL_NS "5Mutex13ReaderTryLockEv")(this);
  __tsan_mutex_post_lock(
      this, __tsan_mutex_try_read_lock | (locked ? 0u : __tsan_mutex_try_lock_failed), 0);
  return locked;
}

void Mutex::Unlock() {
  __tsan_mutex_pre_unlock(this, 0);
  REAL(void (*)(Mutex*), ABSL_NS "5Mutex6UnlockEv")(this);
  __tsan_mutex_post_unlock(this, 0);
}

void Mutex::ReaderUnlock() {
  __tsan_mutex_pre_unlock(this, __tsan_mutex_read_lock);
  REAL(void (*)(Mutex*), ABSL_NS "5Mutex12ReaderUnlockEv")(this);
  __tsan_mutex_post_unlock(this, __tsan_mutex_read_lock);
}

void Mutex::LockWhen(const Condition& cond) {
  __tsan_mutex_pre_lock(this, 0);
  REAL(void (*)(Mutex*, const Condition&), ABSL_NS "5Mutex8LockWhenERKNS0_9ConditionE")(this, cond);
  __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  __tsan_mutex_pre_lock(this, __tsan_mutex_read_lock);
  REAL(void (*)(Mutex*, const Condition&), ABSL_NS "5Mutex14ReaderLockWhenERKNS0_9ConditionE")(
      this, cond);
  __tsan_mutex_post_lock(this, __tsan_mutex_read_lock, 0);
}

// The mutex is held on return whether or not the condition became true.
bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  __tsan_mutex_pre_lock(this, 0);
  const bool res = REAL(bool (*)(Mutex*, const Condition&, absl::Time),
                        ABSL_NS "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE")(
      this, cond, deadline);
  __tsan_mutex_post_lock(this, 0, 0);
  return res;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  __tsan_mutex_pre_lock(this, __tsan_mutex_read_lock);
  const bool res = REAL(bool (*)(Mutex*, const Condition&, absl::Time),
                        ABSL_NS "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE")(
      this, cond, deadline);
  __tsan_mutex_post_lock(this, __tsan_mutex_read_lock, 0);
  return res;
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  return LockWhenWithDeadline(cond, absl::Now() + timeout);
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  return ReaderLockWhenWithDeadline(cond, absl::Now() + timeout);
}

// Await* releases the mutex while the condition is false and holds it again (in the same mode)
// on return. As in Abseil's own annotated build, a condition that is already true returns at once
// without releasing; that first evaluation runs here, visible to TSan, under the held mutex.
void Mutex::Await(const Condition& cond) {
  if (cond.Eval()) return;
  const unsigned flags = HeldFlags(mu_.load(std::memory_order_relaxed));
  __tsan_mutex_pre_unlock(this, flags);
  __tsan_mutex_post_unlock(this, flags);
  __tsan_mutex_pre_lock(this, flags);
  REAL(void (*)(Mutex*, const Condition&), ABSL_NS "5Mutex5AwaitERKNS0_9ConditionE")(this, cond);
  __tsan_mutex_post_lock(this, flags, 0);
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  if (cond.Eval()) return true;
  const unsigned flags = HeldFlags(mu_.load(std::memory_order_relaxed));
  __tsan_mutex_pre_unlock(this, flags);
  __tsan_mutex_post_unlock(this, flags);
  __tsan_mutex_pre_lock(this, flags);
  const bool res = REAL(bool (*)(Mutex*, const Condition&, absl::Time),
                        ABSL_NS "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE")(
      this, cond, deadline);
  __tsan_mutex_post_lock(this, flags, 0);
  return res;
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  return AwaitWithDeadline(cond, absl::Now() + timeout);
}

// ----------------------------------------------------------------------------------------------
// CondVar: Wait* releases `mu` while blocked and re-acquires it (same mode) before returning.

void CondVar::Wait(Mutex* mu) {
  const unsigned flags = HeldFlags(mu->mu_.load(std::memory_order_relaxed));
  __tsan_mutex_pre_unlock(mu, flags);
  __tsan_mutex_post_unlock(mu, flags);
  __tsan_mutex_pre_lock(mu, flags);
  REAL(void (*)(CondVar*, Mutex*), ABSL_NS "7CondVar4WaitEPNS0_5MutexE")(this, mu);
  __tsan_mutex_post_lock(mu, flags, 0);
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  const unsigned flags = HeldFlags(mu->mu_.load(std::memory_order_relaxed));
  __tsan_mutex_pre_unlock(mu, flags);
  __tsan_mutex_post_unlock(mu, flags);
  __tsan_mutex_pre_lock(mu, flags);
  const bool timed_out = REAL(bool (*)(CondVar*, Mutex*, absl::Time),
                              ABSL_NS "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE")(
      this, mu, deadline);
  __tsan_mutex_post_lock(mu, flags, 0);
  return timed_out;
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  return WaitWithDeadline(mu, absl::Now() + timeout);
}

// ----------------------------------------------------------------------------------------------
// Notification. The sync address is the flag itself, so the inline HasBeenNotified() (an acquire
// load compiled into our instrumented code) also synchronizes with Notify().

void Notification::Notify() {
  __tsan_release(&notified_yet_);
  REAL(void (*)(Notification*), ABSL_NS "12Notification6NotifyEv")(this);
}

void Notification::WaitForNotification() const {
  REAL(void (*)(const Notification*), ABSL_NSK "12Notification19WaitForNotificationEv")(this);
  __tsan_acquire(const_cast<std::atomic<bool>*>(&notified_yet_));
}

bool Notification::WaitForNotificationWithDeadline(absl::Time deadline) const {
  const bool notified =
      REAL(bool (*)(const Notification*, absl::Time),
           ABSL_NSK "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE")(this, deadline);
  if (notified) __tsan_acquire(const_cast<std::atomic<bool>*>(&notified_yet_));
  return notified;
}

bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  const bool notified =
      REAL(bool (*)(const Notification*, absl::Duration),
           ABSL_NSK "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE")(this, timeout);
  if (notified) __tsan_acquire(const_cast<std::atomic<bool>*>(&notified_yet_));
  return notified;
}

// ----------------------------------------------------------------------------------------------
// BlockingCounter: everything a thread did before DecrementCount() is visible after Wait(), and
// to the thread whose DecrementCount() returns true.

bool BlockingCounter::DecrementCount() {
  __tsan_release(this);
  const bool last =
      REAL(bool (*)(BlockingCounter*), ABSL_NS "15BlockingCounter14DecrementCountEv")(this);
  if (last) __tsan_acquire(this);
  return last;
}

void BlockingCounter::Wait() {
  REAL(void (*)(BlockingCounter*), ABSL_NS "15BlockingCounter4WaitEv")(this);
  __tsan_acquire(this);
}

ABSL_NAMESPACE_END
}  // namespace absl
