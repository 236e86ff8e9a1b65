/*
 * gemm_quant.cu - prefill matrix-matrix products Y = X W^T for IQ4_NL, Q6_K
 * and BF16 weights (x4_kern.h section 1).  A block owns 64 rows x 64 tokens;
 * each 32-wide slice of its weight rows is dequantized once into shared
 * memory and used by all 64 tokens, with fp32 FMAs (quant_dev.cuh).
 * Tensor cores are the next step; this is the correct baseline.
 */
#include "cuda_check.h"
#include "x4_kern.h"
#include "quant_dev.cuh"

using namespace x4d;

template <int TYPE>
__global__ void __launch_bounds__(GEMM_THREADS)
gemm_kernel(const uint8_t *__restrict__ w, int n, int k, int n_tok, const float *__restrict__ x,
	    float *__restrict__ y)
{
	__shared__ __align__(16) uint8_t smem[gemm_smem<1>::BYTES];
	const float **xrow = reinterpret_cast<const float **>(smem + gemm_smem<1>::BYTES - TT * 8);
	const int n0 = blockIdx.x * TN, t0 = blockIdx.y * TT;
	const int nt = n_tok - t0 < TT ? n_tok - t0 : TT;
	if (threadIdx.x < TT) /* read after gemm_block's first barrier */
		xrow[threadIdx.x] = x + (size_t)(t0 + min((int)threadIdx.x, nt - 1)) * k;
	const uint8_t *const wm[1] = { w };
	float acc[1][4][4];
	gemm_block<TYPE, 1>(smem, wm, n, k, n0, xrow, nt, acc);
	const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll
	for (int j = 0; j < 4; j++)
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int r = n0 + tx + 16 * i, t = ty + 16 * j;
			if (r < n && t < nt)
				y[(size_t)(t0 + t) * n + r] = acc[0][i][j];
		}
}

extern "C" int x4k_gemm(int type, const void *w, int n, int k, int n_tok, const float *x,
			float *y, cudaStream_t s, x4_err *e)
{
	int rc = check_matrix("x4k_gemm", type, w, n, k, e);
	if (rc)
		return rc;
	if (n_tok < 0 || (n_tok + TT - 1) / TT > 65535 || (n + TN - 1) / TN > 0x7fffffff)
		return x4_err_set(e, X4_EINVAL, "x4k_gemm: %d tokens is out of range", n_tok);
	if (!x || !y)
		return x4_err_set(e, X4_EINVAL, "x4k_gemm: NULL input or output");
	if (n == 0 || n_tok == 0)
		return 0;
	dim3 grid((unsigned)((n + TN - 1) / TN), (unsigned)((n_tok + TT - 1) / TT)), block(GEMM_THREADS);
	const uint8_t *wb = static_cast<const uint8_t *>(w);
	switch (type) {
	case X4_T_IQ4_NL:
		gemm_kernel<X4_T_IQ4_NL><<<grid, block, 0, s>>>(wb, n, k, n_tok, x, y);
		break;
	case X4_T_Q6_K:
		gemm_kernel<X4_T_Q6_K><<<grid, block, 0, s>>>(wb, n, k, n_tok, x, y);
		break;
	default:
		gemm_kernel<X4_T_BF16><<<grid, block, 0, s>>>(wb, n, k, n_tok, x, y);
		break;
	}
	return x4_cuda_launched("x4k_gemm: launch", e);
}
