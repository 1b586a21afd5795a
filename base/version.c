// base/version.c — the version and build commit of bn_args_parse's --version and bonsai-bench's build line
// (base/args.h). Only this file includes the generated headers, so a new commit recompiles it alone.
#include "base/args.h"
#include "base/build_info.h"
#include "base/build_number.h"

const char *bn_version(void) { return BN_BUILD_VERSION; }
const char *bn_build_commit(void) { return BN_BUILD_COMMIT; }
int bn_build_number(void) { return BN_BUILD_NUMBER; }
