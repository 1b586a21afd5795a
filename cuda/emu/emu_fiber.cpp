// cuda/emu/emu_fiber.cpp — the emulator's context switch (see emu_fiber.h). x86-64 SysV: push the six
// callee-saved registers, swap stack pointers, pop, ret. A new context's stack holds a frame whose
// return address is bn_emu_ctx_start, which calls the entry function (r13) on a 16-aligned stack.
#include "cuda/emu/emu_fiber.h"
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__) && !defined(BONSAI_EMU_UCONTEXT)
extern "C" void bn_emu_ctx_start(void);
asm(".text\n"
    ".globl bn_emu_ctx_switch\n"
    ".type bn_emu_ctx_switch,@function\n"
    "bn_emu_ctx_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size bn_emu_ctx_switch, .-bn_emu_ctx_switch\n"
    ".globl bn_emu_ctx_start\n"
    ".type bn_emu_ctx_start,@function\n"
    "bn_emu_ctx_start:\n"
    "    andq $-16, %rsp\n"
    "    callq *%r13\n"
    "    ud2\n"
    ".size bn_emu_ctx_start, .-bn_emu_ctx_start\n");

namespace bn_emu {
void ctx_init(Ctx *c, char *lo, size_t size, void (*entry)(void)) {
    uintptr_t top = ((uintptr_t)(lo + size)) & ~(uintptr_t)15;
    void **sp = (void **)(top - 64);
    sp[0] = nullptr;         // r15
    sp[1] = nullptr;         // r14
    sp[2] = (void *)entry;   // r13: called by bn_emu_ctx_start
    sp[3] = nullptr;         // r12
    sp[4] = nullptr;         // rbx
    sp[5] = nullptr;         // rbp (ends backtraces)
    sp[6] = (void *)bn_emu_ctx_start;
    sp[7] = nullptr;
    c->sp = sp;
}
} // namespace bn_emu
#else
namespace bn_emu {
void ctx_init(Ctx *c, char *lo, size_t size, void (*entry)(void)) {
    if (getcontext(&c->uc) != 0) abort();
    c->uc.uc_stack.ss_sp = lo;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, entry, 0);
}
void ctx_switch(Ctx *from, Ctx *to) {
    if (swapcontext(&from->uc, &to->uc) != 0) abort();
}
} // namespace bn_emu
#endif
