// runtime/interrupt.h: a signal sets the flag that throw_if_interrupted turns into
// Interrupted with the exit code 128 + signal; a signal the process was started ignoring
// stays ignored. Each case in a child process (the flag, once set, stays set).
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>

#include "runtime/interrupt.h"

namespace gemlite {
namespace {

// Exits with the Interrupted's exit code, or 0 when nothing was thrown.
[[noreturn]] void exit_with_what_throw_if_interrupted_does() {
  try {
    throw_if_interrupted("testing");
  } catch (const Interrupted& e) {
    std::exit(std::string(e.what()) == "interrupted while testing" ? e.exit_code : 1);
  }
  std::exit(0);
}

TEST(Interrupt, NothingBeforeASignal) {
  EXPECT_EXIT(
      {
        install_interrupt_handlers();
        exit_with_what_throw_if_interrupted_does();
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(Interrupt, SigintSigtermAndSighupGiveTheirExitCodes) {
  EXPECT_EXIT(
      {
        install_interrupt_handlers();
        std::raise(SIGINT);
        exit_with_what_throw_if_interrupted_does();
      },
      ::testing::ExitedWithCode(130), "");
  EXPECT_EXIT(
      {
        install_interrupt_handlers();
        std::raise(SIGTERM);
        exit_with_what_throw_if_interrupted_does();
      },
      ::testing::ExitedWithCode(143), "");
  EXPECT_EXIT(  // the terminal closed under a long gemlite-quantize: its temporary goes too
      {
        install_interrupt_handlers();
        std::raise(SIGHUP);
        exit_with_what_throw_if_interrupted_does();
      },
      ::testing::ExitedWithCode(129), "");
}

// `gemlite-quantize ... &` from a script starts with SIGINT ignored: a Ctrl-C in the
// terminal is not for it.
TEST(Interrupt, AnIgnoredSignalStaysIgnored) {
  EXPECT_EXIT(
      {
        std::signal(SIGINT, SIG_IGN);
        install_interrupt_handlers();
        std::raise(SIGINT);
        exit_with_what_throw_if_interrupted_does();
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace gemlite
