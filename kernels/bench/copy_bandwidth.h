#pragma once
// Device-to-device copy bandwidth of the current device (bytes read + written per second,
// GB/s): the ceiling every "% of copy" in gemlite refers to (docs/PERF.md). Logs one line:
//   copy: 2950.0 GB/s (1024 MiB device-to-device, bytes read + written; ...)
#include <cstdio>

namespace gemlite {

double device_copy_bandwidth_gbs(FILE* log);

}  // namespace gemlite
