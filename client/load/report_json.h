// The JSON report of attnserve-load (--json FILE). Its shape is documented in
// client/load/README.md and, as a JSON Schema, in client/load/report.schema.json; the two and
// this writer change together ("schema_version" below counts incompatible changes).
#ifndef ATTNSERVE_CLIENT_LOAD_REPORT_JSON_H_
#define ATTNSERVE_CLIENT_LOAD_REPORT_JSON_H_

#include <string>

#include "client/load/report.h"

namespace attnserve::load {

inline constexpr int kJsonSchemaVersion = 1;

std::string ReportToJson(const RunReport& report);

}  // namespace attnserve::load

#endif  // ATTNSERVE_CLIENT_LOAD_REPORT_JSON_H_
