// Terminating signals: the trace is finished (every thread's complete events, then a footer
// naming the signal) before the signal takes the process, and the program sees the signal
// dispositions it would see without the profiler (signals.cpp).
#pragma once

namespace adprof::preload {

// Installs the profiler's handler for every signal whose default action ends the process and
// whose disposition is still the default. Called once recording has started.
void install_signal_handlers();

}  // namespace adprof::preload
