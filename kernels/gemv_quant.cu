/*
 * gemv_quant.cu - decode matrix-vector products y = W x for IQ4_NL, Q6_K and
 * BF16 weights (x4_kern.h section 1).  A warp per row, eight rows a block;
 * the row's bytes are staged through shared memory with 16-byte loads and
 * the x vector is held there in 1024-value chunks (quant_dev.cuh).
 */
#include "cuda_check.h"
#include "x4_kern.h"
#include "quant_dev.cuh"

using namespace x4d;

template <int TYPE>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
gemv_kernel(const uint8_t *__restrict__ w, int n, int k, const float *__restrict__ x,
	    float *__restrict__ y)
{
	__shared__ __align__(16) uint8_t smem[gemv_smem<TYPE, 1, 1>::BYTES];
	__shared__ const float *xsrc[1];
	const int row = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
	const bool ok = row < n;
	if (threadIdx.x == 0)
		xsrc[0] = x; /* read after gemv_block's first barrier */
	const uint8_t *const wr[1] = { w + (size_t)(ok ? row : 0) * row_bytes(TYPE, k) };
	float acc[1][1];
	gemv_block<TYPE, 1, 1>(smem, wr, ok ? row : -1, k, xsrc, acc);
	if (ok && (threadIdx.x & 31) == 0)
		y[row] = acc[0][0];
}

extern "C" int x4k_gemv(int type, const void *w, int n, int k, const float *x, float *y,
			cudaStream_t s, x4_err *e)
{
	int rc = check_matrix("x4k_gemv", type, w, n, k, e);
	if (rc)
		return rc;
	if (!x || !y)
		return x4_err_set(e, X4_EINVAL, "x4k_gemv: NULL input or output");
	if (n == 0)
		return 0;
	dim3 grid((unsigned)((n + GEMV_WARPS - 1) / GEMV_WARPS)), block(GEMV_WARPS * 32);
	const uint8_t *wb = static_cast<const uint8_t *>(w);
	switch (type) {
	case X4_T_IQ4_NL:
		gemv_kernel<X4_T_IQ4_NL><<<grid, block, 0, s>>>(wb, n, k, x, y);
		break;
	case X4_T_Q6_K:
		gemv_kernel<X4_T_Q6_K><<<grid, block, 0, s>>>(wb, n, k, x, y);
		break;
	default:
		gemv_kernel<X4_T_BF16><<<grid, block, 0, s>>>(wb, n, k, x, y);
		break;
	}
	return x4_cuda_launched("x4k_gemv: launch", e);
}
