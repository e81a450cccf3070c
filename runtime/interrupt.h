#pragma once
// Ctrl-C (SIGINT), SIGTERM and SIGHUP (the terminal or ssh session closed) for the programs
// that write files: the signal only sets a flag; the long loops (quantizing modules,
// writing tensors, perplexity chunks) ask for it and throw Interrupted, so the writers'
// destructors remove their temporaries as on any other error. Killed by the default action
// instead, gemlite-quantize left a OUTPUT.tmp-XXXXXX directory (29 MB for a 25M-parameter
// model, gigabytes for a 7B one) and gemlite-perplexity a --kl-divergence-base temporary of
// 16 MB a chunk.
#include <string>

#include "runtime/error.h"

namespace gemlite {

// Thrown where a loop found the flag set; programs exit with `exit_code`, 128 + the signal
// (130 for SIGINT, as llama.cpp's do; 143 for SIGTERM; 129 for SIGHUP).
struct Interrupted : Error {
  Interrupted(const std::string& what, int exit_code) : Error(what), exit_code(exit_code) {}
  int exit_code;
};

// Installs the handlers (not over a signal the process was started ignoring): the first
// signal sets the flag, a second one exits at once (128 + it).
void install_interrupt_handlers();

// Throws Interrupted("interrupted while <doing>") once a signal came (never before the
// handlers are installed).
void throw_if_interrupted(const char* doing);

}  // namespace gemlite
