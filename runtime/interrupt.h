#pragma once
// Ctrl-C (SIGINT) and SIGTERM for the programs that write files: the signal only sets a
// flag; the long loops (quantizing modules, writing tensors, perplexity chunks) ask for it
// and throw Interrupted, so the writers' destructors remove their temporaries as on any
// other error. Killed by the default action instead, gemlite-quantize left a
// OUTPUT.tmp-XXXXXX directory (29 MB for a 25M-parameter model, gigabytes for a 7B one)
// and gemlite-perplexity a --kl-divergence-base temporary of 16 MB a chunk.
#include <string>

#include "runtime/error.h"

namespace gemlite {

// Thrown where a loop found the flag set; programs exit with 130 (128 + SIGINT), as llama.cpp's do.
struct Interrupted : Error {
  using Error::Error;
};

// Installs the handlers: the first signal sets the flag, a second one exits at once (130).
void install_interrupt_handlers();

// Throws Interrupted("interrupted while <doing>") once a signal came (never before the
// handlers are installed).
void throw_if_interrupted(const char* doing);

}  // namespace gemlite
