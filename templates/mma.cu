// Warp-level tensor-core multiply-adds for generated Numba kernels: D = A * B + D, in place.
//
// Each thread of the warp passes its own fragments (PTX ISA, "Matrix Fragments for mma.m16n8k8"
// and "mma.m16n8k16"), as pointers to its local arrays; with link-time optimisation the calls are
// inlined and the arrays live in registers. tuner/mma.py declares these to Numba (C ABI) and
// emulates them on the simulator. They return 0: a value Numba's C ABI and the C agree on.
extern "C" __device__ int tuner_mma_tf32_m16n8k8(float *d, const float *a, const float *b)
{
    // a: 4 float32 of A (16x8), b: 2 of B (8x8), d: 4 of C/D (16x8); A and B rounded to TF32.
    unsigned ta[4], tb[2];
    for (int i = 0; i < 4; ++i) asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(ta[i]) : "f"(a[i]));
    for (int i = 0; i < 2; ++i) asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(tb[i]) : "f"(b[i]));
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(ta[0]), "r"(ta[1]), "r"(ta[2]), "r"(ta[3]), "r"(tb[0]), "r"(tb[1]));
    return 0;
}

extern "C" __device__ int tuner_mma_f16_m16n8k16(float *d, const unsigned short *a, const unsigned short *b)
{
    // a: 8 float16 of A (16x16), b: 4 of B (16x8), d: 4 float32 of C/D (16x8); pairs packed low first.
    unsigned pa[4], pb[2];
    for (int i = 0; i < 4; ++i) pa[i] = (unsigned)a[2 * i] | ((unsigned)a[2 * i + 1] << 16);
    for (int i = 0; i < 2; ++i) pb[i] = (unsigned)b[2 * i] | ((unsigned)b[2 * i + 1] << 16);
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(pa[0]), "r"(pa[1]), "r"(pa[2]), "r"(pa[3]), "r"(pb[0]), "r"(pb[1]));
    return 0;
}
