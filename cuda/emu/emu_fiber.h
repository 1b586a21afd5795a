// cuda/emu/emu_fiber.h — user-space context switch for the emulator's fibers: a hand-written x86-64
// switch (callee-saved registers + stack pointer, no syscall) with a ucontext fallback elsewhere.
#ifndef BONSAI_CUDA_EMU_FIBER_H
#define BONSAI_CUDA_EMU_FIBER_H
#include <stddef.h>
#if !defined(__x86_64__) || defined(BONSAI_EMU_UCONTEXT)
#include <ucontext.h>
#endif

namespace bn_emu {
// Ctx: a suspended execution context.
struct Ctx {
    void *sp; // saved stack pointer (x86-64)
#if !defined(__x86_64__) || defined(BONSAI_EMU_UCONTEXT)
    ucontext_t uc;
#endif
};
// ctx_init: prepares c to start entry() on the stack [lo, lo + size) at its first ctx_switch.
void ctx_init(Ctx *c, char *lo, size_t size, void (*entry)(void));
#if defined(__x86_64__) && !defined(BONSAI_EMU_UCONTEXT)
} // namespace bn_emu
extern "C" void bn_emu_ctx_switch(void **save_sp, void *to_sp);
namespace bn_emu {
// ctx_switch: saves the running context into from and resumes to; returns when from is resumed.
static inline void ctx_switch(Ctx *from, Ctx *to) { bn_emu_ctx_switch(&from->sp, to->sp); }
#else
// ctx_switch: saves the running context into from and resumes to; returns when from is resumed.
void ctx_switch(Ctx *from, Ctx *to);
#endif
} // namespace bn_emu
#endif
