// --config=tsan only (//third_party/tsan:protobuf_abi, docs/SANITIZERS.md).
//
// Protobuf's map_field.h gives MapFieldBase two extra members (seq1_, seq2_) when it sees
// __SANITIZE_THREAD__. Debian's libprotobuf is built without TSan, so code compiled with
// -fsanitize=thread would disagree with the library about the layout of every map field
// (google.protobuf.Struct included) and corrupt memory. This header sits in front of
// /usr/include and includes the real one with __SANITIZE_THREAD__ hidden, so both sides agree on
// the library's layout. Nothing else in the header depends on the macro.
#ifndef HOOKRELAY_THIRD_PARTY_TSAN_PROTOBUF_ABI_MAP_FIELD_H_
#define HOOKRELAY_THIRD_PARTY_TSAN_PROTOBUF_ABI_MAP_FIELD_H_

// Settle libstdc++'s and Abseil's own TSan switches (_GLIBCXX_TSAN, ABSL_HAVE_THREAD_SANITIZER)
// first, in case map_field.h is what includes them first.
#include <cstddef>

#include "absl/base/config.h"

#pragma push_macro("__SANITIZE_THREAD__")
#undef __SANITIZE_THREAD__
#include_next <google/protobuf/map_field.h>
#pragma pop_macro("__SANITIZE_THREAD__")

#endif  // HOOKRELAY_THIRD_PARTY_TSAN_PROTOBUF_ABI_MAP_FIELD_H_
