/*
 * mma_dev.cuh - the tensor-core helpers the fp32-accurate MMA kernels share
 * (the decode attention of mla_mma.cuh; the kernel lab's matrix-vector
 * products, bench/kernels/tcv.cuh): the power-of-two scale and the fp16
 * split that carry an fp32 operand to about 22 bits through fp16 MMAs
 * (docs/numerics.md 1.7), cp.async staging, ldmatrix and mma.sync
 * m16n8k16.  The split and the scale's exponent are host code too, so a
 * program can check its fragments on the CPU; the rest is sm_80 and later.
 */
#ifndef X4_MMA_DEV_CUH
#define X4_MMA_DEV_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

namespace x4m {

/* 2^k for k in [-126, 127], exactly */
__device__ __forceinline__ float pow2f(int k) { return __int_as_float((127 + k) << 23); }

/* The exponent k of a vector's scale 2^k (a head's query, a slice of x):
 * max|v| * 2^k in [2^14, 2^15). */
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

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
		     : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait()
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr)
		     : "memory");
}

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
#endif

} /* namespace x4m */

#endif
