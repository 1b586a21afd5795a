// cuda/mma.cuh — the int8 tensor-core instruction mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 (sm_80+) as
// one device function for both builds: inline PTX under nvcc, a warp-collective emulation in cuda/emu/emu.h
// (which includes this header for the fragment layout below).
//
// D (16×8 int32) = A (16×32 int8, row major) · B (32×8 int8, column major) + C (16×8 int32), exact (32-bit
// wrap-around, no saturation), one warp instruction; every lane passes 4 A registers, 2 B registers, 4 C
// registers and gets 4 D registers.
//
// Fragment layout — PTX ISA (8.x), section "Matrix Fragments for mma.m16n8k32" (the .s8/.u8 figures for A, B
// and the .s32 accumulators C/D). With groupID g = lane >> 2 and threadID_in_group t = lane % 4:
//   A, registers a0..a3, byte j (0..3) of register r = element a(4r + j):
//     row = g for a0 and a2, g + 8 for a1 and a3;  col (k) = 4t + j, plus 16 for a2 and a3
//   B, registers b0..b1, byte j of register r:  row (k) = 4t + j, plus 16 for b1;  col (n) = g
//   C and D, registers c0..c3:  row = g for c0, c1 and g + 8 for c2, c3;  col (n) = 2t + (r & 1)
// Cross-check: llama.cpp's ggml-cuda/mma.cuh runs this instruction on Turing as four m8n8k16 MMAs, pairing
// a0 and a1 (rows 0-7, rows 8-15) with b0 (k 0-15) and a2, a3 with b1: the same split of k and rows. The
// emulator computes D from these formulas, so tests/cuda/test_emu_runtime's MMA check on a GPU is what proves
// them (random 16×32 · 32×8 products from row-major memory against an integer loop).
//
// The fp16 instruction mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (bn_mma_f16_16x8x16: D 16×8 fp32 = A 16×16
// fp16 · B 16×8 fp16 + C) has the same C/D layout; its registers hold two halves each (element j = 0 in the low 16
// bits). PTX ISA section "Matrix Fragments for mma.m16n8k16 with floating point type":
//   A, registers a0..a3, half j of register r:  row = g for a0 and a2, g + 8 for a1 and a3;  col (k) = 2t + j,
//     plus 8 for a2 and a3
//   B, registers b0..b1, half j of register r:  row (k) = 2t + j, plus 8 for b1;  col (n) = g
// Cross-check: llama.cpp's ggml-cuda/mma.cuh tile<16, 8, half2> (get_i = (l % 2)·8 + lane / 4, get_j = (l / 2)·4 +
// lane % 4 half2 pairs) and tile<8, 8, half2> for B. Proved on a GPU by test_emu_runtime's fp16 MMA check.
#ifndef BONSAI_CUDA_MMA_CUH
#define BONSAI_CUDA_MMA_CUH

// bn_mma_a_row / bn_mma_a_k: the row and k of byte j of A register r (0..3) held by lane `lane`.
__host__ __device__ constexpr int bn_mma_a_row(int lane, int r) { return (lane >> 2) + 8 * (r & 1); }
__host__ __device__ constexpr int bn_mma_a_k(int lane, int r, int j) { return 4 * (lane & 3) + j + 16 * (r >> 1); }
// bn_mma_b_k / bn_mma_b_col: the k of byte j of B register r (0..1) and the column of lane `lane`.
__host__ __device__ constexpr int bn_mma_b_k(int lane, int r, int j) { return 4 * (lane & 3) + j + 16 * r; }
__host__ __device__ constexpr int bn_mma_b_col(int lane) { return lane >> 2; }
// bn_mma_c_row / bn_mma_c_col: the row and column of C/D register r (0..3) of lane `lane`.
__host__ __device__ constexpr int bn_mma_c_row(int lane, int r) { return (lane >> 2) + 8 * (r >> 1); }
__host__ __device__ constexpr int bn_mma_c_col(int lane, int r) { return 2 * (lane & 3) + (r & 1); }

// bn_mma16_a_k / bn_mma16_b_k: the k of half j of A register r (0..3) / B register r (0..1) of the fp16 MMA (the rows
// of A are bn_mma_a_row's, the column of B bn_mma_b_col's, C/D as above).
__host__ __device__ constexpr int bn_mma16_a_k(int lane, int r, int j) { return 2 * (lane & 3) + j + 8 * (r >> 1); }
__host__ __device__ constexpr int bn_mma16_b_k(int lane, int r, int j) { return 2 * (lane & 3) + j + 8 * r; }

#ifndef BONSAI_CUDA_EMU
// bn_mma_f16_16x8x16: d = A·B + c in fp32 for the warp's fp16 fragments (two halves per register, layout above);
// every lane of the warp calls it together. d may alias c. sm_80 or newer.
__device__ __forceinline__ void bn_mma_f16_16x8x16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                   const float (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}

// bn_mma_s8_16x8x32: d = A·B + c for the warp's fragments (layout above); every lane of the warp must call it
// together (mma.sync.aligned). d may alias c. sm_80 or newer (the build targets sm_90).
__device__ __forceinline__ void bn_mma_s8_16x8x32(int (&d)[4], const int (&a)[4], const int (&b)[2],
                                                  const int (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]), "r"(c[2]),
                   "r"(c[3]));
#elif defined(__CUDA_ARCH__)
    __trap(); // no int8 m16n8k32 before sm_80
#endif
}
#endif

#endif
