// Chrome trace (Trace Event Format) of a simulated step: one process per recorded rank, one
// track per stream, every kernel of every fused task shown as its own slice, and the rank's
// memory as a counter track (where the run recorded it) with its peak as an instant event.
// Opens in Perfetto (ui.perfetto.dev) and chrome://tracing.
#ifndef PACELINE_SIM_REPORT_CHROME_TRACE_H_
#define PACELINE_SIM_REPORT_CHROME_TRACE_H_

#include <ostream>

#include "sim/engine/engine.h"
#include "sim/parallel/lowering.h"

namespace paceline {

void write_chrome_trace(const Lowering& lowering, const RunResult& run, std::ostream& out);

}  // namespace paceline

#endif  // PACELINE_SIM_REPORT_CHROME_TRACE_H_
