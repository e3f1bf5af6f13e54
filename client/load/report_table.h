// The plain-text table attnserve-load prints on stdout: one row per phase, times in
// milliseconds, columns aligned.
#ifndef ATTNSERVE_CLIENT_LOAD_REPORT_TABLE_H_
#define ATTNSERVE_CLIENT_LOAD_REPORT_TABLE_H_

#include <string>

#include "client/load/report.h"

namespace attnserve::load {

std::string ReportToTable(const RunReport& report);

}  // namespace attnserve::load

#endif  // ATTNSERVE_CLIENT_LOAD_REPORT_TABLE_H_
