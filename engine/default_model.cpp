#include "engine/default_model.h"

// INFLIGHT_DEFAULT_MODEL_PATH (absolute) and INFLIGHT_DEFAULT_MODEL_SHA256 come from engine/CMakeLists.txt.
// NOTE: the hash is part of the compile command so that a compiler cache, which sees only this source and
// not the file the assembler includes, recompiles when the model changes.
#ifndef INFLIGHT_DEFAULT_MODEL_PATH
#error "INFLIGHT_DEFAULT_MODEL_PATH must name the default model's GGUF file"
#endif

// .incbin copies the file's bytes into .rodata, 64-byte aligned like a mapped file would be (GGUF tensor data
// is aligned relative to the start of the image).
__asm__(".pushsection .rodata.inflight_default_model,\"a\",@progbits\n"
        ".balign 64\n"
        ".globl inflight_default_model_begin\n"
        ".hidden inflight_default_model_begin\n"
        "inflight_default_model_begin:\n"
        ".incbin \"" INFLIGHT_DEFAULT_MODEL_PATH "\"\n"
        ".globl inflight_default_model_end\n"
        ".hidden inflight_default_model_end\n"
        "inflight_default_model_end:\n"
        ".popsection\n");

extern "C" const uint8_t inflight_default_model_begin[];
extern "C" const uint8_t inflight_default_model_end[];

namespace inflight::engine {

static_assert(sizeof(INFLIGHT_DEFAULT_MODEL_SHA256) == 65, "the SHA-256 of the default model, in hex");

std::span<const uint8_t> default_model_gguf() {
  return {inflight_default_model_begin, size_t(inflight_default_model_end - inflight_default_model_begin)};
}

}  // namespace inflight::engine
