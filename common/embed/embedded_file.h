// A file compiled into a binary by common/embed/embed_files (see its header).
#ifndef HOOKRELAY_COMMON_EMBED_EMBEDDED_FILE_H_
#define HOOKRELAY_COMMON_EMBED_EMBEDDED_FILE_H_

#include <string>
#include <vector>

namespace hookrelay {

struct EmbeddedFile {
  std::string name;  // "/index.html"
  std::string bytes;
};

}  // namespace hookrelay

#endif  // HOOKRELAY_COMMON_EMBED_EMBEDDED_FILE_H_
