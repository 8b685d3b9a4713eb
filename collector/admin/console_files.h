// The web console's files (collector/admin/console/), compiled in by //collector:console_files_cc.
#ifndef HOOKRELAY_COLLECTOR_ADMIN_CONSOLE_FILES_H_
#define HOOKRELAY_COLLECTOR_ADMIN_CONSOLE_FILES_H_

#include <vector>

#include "common/embed/embedded_file.h"

namespace hookrelay {

const std::vector<EmbeddedFile>& ConsoleFiles();

}  // namespace hookrelay

#endif  // HOOKRELAY_COLLECTOR_ADMIN_CONSOLE_FILES_H_
