/*
 * mma_dev.cuh - the tensor-core and asynchronous-copy instructions of sm_80
 * and later, as the prefill's tensor-core gemm core (gemm_mma.cuh) issues
 * them, and the tensor-core attention (mla_mma_dev.cuh) and the lab's
 * batch-1 products (bench/kernels/tcv.cuh) with them: cp.async into shared
 * memory, ldmatrix, mma.sync m16n8k16 on BF16 and fp16 operands with fp32
 * accumulators and on u8 and s8 operands with s32 ones, and the packed BF16
 * fma, compiled for sm_80 and later only
 * (a kernel that calls them keeps its body under the same guard and its
 * launcher checks the device on the host); and the fp16 hi/lo split of an
 * fp32 value under a power-of-two scale, for any architecture and the host.
 *
 * Fragment layouts of mma.m16n8k16 (PTX ISA), lane l, g = l >> 2, c = l & 3,
 * the lower k index of a pair in a register's low half:
 *   A 16x16 (row-major):  reg r holds A[g + 8*(r&1)][2c + 8*(r>>1) + {0,1}]
 *   B 16x8 ("col"):       reg r holds B[2c + 8r + {0,1}][g]
 *   C 16x8 fp32:          reg r holds C[g + 8*(r>>1)][2c + (r&1)]
 */
#ifndef X4_MMA_DEV_CUH
#define X4_MMA_DEV_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

namespace x4m {

/* Host: tensor cores allowed (x4k_gemm_mma_get) and the current device
 * sm_80 or later; looked up once a device (gemm_quant.cu).  The prefill's
 * gemm core and the decode's matrix-vector products (gemv_tc.cuh) ask it. */
bool enabled();

/* 2^k for k in [-126, 127], exactly */
__device__ __forceinline__ float pow2f(int k) { return __int_as_float((127 + k) << 23); }

/* The exponent k of a vector's scale 2^k (a head's query, a slice of x):
 * max|v| * 2^k in [2^14, 2^15), so that its fp16 split (split_h) stays in
 * fp16's range with ~22 bits. */
__host__ __device__ __forceinline__ int q_scale_exp(float m)
{
	int e;
	frexpf(m, &e); /* m = f * 2^e, f in [0.5, 1); 0 gives e = 0 */
	e = e < -100 ? -100 : e > 100 ? 100 : e;
	return 15 - e;
}

/* two fp16 (x in the low half: the lower column) */
__host__ __device__ __forceinline__ uint32_t pack_h2(__half x, __half y)
{
	return (uint32_t)__half_as_ushort(x) | (uint32_t)__half_as_ushort(y) << 16;
}

/* v = hi + lo + O(2^-22 v): hi = fp16(v), lo = fp16(v - hi) (v - hi exact in fp32) */
__host__ __device__ __forceinline__ void split_h(float v, __half &hi, __half &lo)
{
	hi = __float2half_rn(v);
	lo = __float2half_rn(v - __half2float(hi));
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes from global src to shared dst (both 16-byte aligned), of which
 * the first src_bytes (0..16) are read and the rest are zeros. */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
		     : "memory");
}

/* 4 bytes from global src to shared dst (both 4-byte aligned), through L1. */
__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/* Wait until at most N of this thread's committed groups are pending. */
template <int N>
__device__ __forceinline__ void cp_async_wait()
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Four 8x8 matrices of 16-bit values (lanes 8i..8i+7 give the 16-byte row
 * addresses of matrix i): register i gets matrix i's [l >> 2][2(l & 3) + {0,1}]. */
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr)
		     : "memory");
}

/* ldsm_x4 with each 8x8 matrix transposed. */
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr)
		     : "memory");
}

/* d += A . B, f16 in, f32 accumulate */
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
	    "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* d += A . B: BF16 in, fp32 accumulate. */
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
	    "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* d = A . B + c, u8 A and s8 B, s32 accumulate (m16n8k16; the Q6_K head's
 * codes against x's 8-bit limbs): a0 holds A[g][4c .. 4c + 3], a1
 * A[g + 8][4c ..], a byte each, the lowest first; b holds B[4c .. 4c +
 * 3][g]; c and d as C of the fp32 form. */
__device__ __forceinline__ void mma16816_u8s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b, const int (&c)[4])
{
	asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
	    "{%7, %8, %9, %10};\n"
	    : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
	    : "r"(a0), "r"(a1), "r"(b), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
}

/* a * b + c on two packed BF16, rounded to nearest. */
__device__ __forceinline__ uint32_t fma_bf16x2(uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t d;
	asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
}
#endif

} /* namespace x4m */

#endif
