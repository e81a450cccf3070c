#include "runtime/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace gemlite {
namespace {

std::atomic<int> g_signal{0};  // the first signal that came, 0 before

void on_signal(int signal) {
  int none = 0;
  if (!g_signal.compare_exchange_strong(none, signal)) _exit(128 + signal);  // the second one: nothing is waited for
}

void install(int signal) {
  struct sigaction old {};
  sigaction(signal, nullptr, &old);
  // A process started with the signal ignored (`cmd &` from a script) keeps ignoring it.
  if (old.sa_handler == SIG_IGN) return;
  struct sigaction handler {};
  handler.sa_handler = on_signal;
  sigemptyset(&handler.sa_mask);
  sigaction(signal, &handler, nullptr);
}

}  // namespace

void install_interrupt_handlers() {
  install(SIGINT);
  install(SIGTERM);
  install(SIGHUP);
}

void throw_if_interrupted(const char* doing) {
  if (const int signal = g_signal.load())
    throw Interrupted(std::string("interrupted while ") + doing, 128 + signal);
}

}  // namespace gemlite
