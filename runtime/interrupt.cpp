#include "runtime/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace gemlite {
namespace {

std::atomic<bool> g_signalled{false};

void on_signal(int) {
  if (g_signalled.exchange(true)) _exit(130);  // the second one: nothing is waited for
}

}  // namespace

void install_interrupt_handlers() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

void throw_if_interrupted(const char* doing) {
  if (g_signalled) throw Interrupted(std::string("interrupted while ") + doing);
}

}  // namespace gemlite
