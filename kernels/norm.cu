/*
 * norm.cu - RMSNorm with gain (docs/forward.md 3.1), fp32: a block a row, the sum of
 * squares reduced in a fixed order so a row gives the same bits every run.
 */
#include "core_dev.cuh"

namespace {

__global__ void __launch_bounds__(256)
rmsnorm_kernel(int n, const float *x, int ld_x, const float *__restrict__ gain, float eps,
	       float *y, int ld_y)
{
	__shared__ float red[32];
	const float *xr = x + (size_t)blockIdx.x * ld_x;
	float *yr = y + (size_t)blockIdx.x * ld_y;
	float ss = 0;
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		ss = fmaf(xr[i], xr[i], ss);
	ss = x4c::block_sum(ss, red); /* its barriers also order the reads before y = x writes */
	const float inv = 1.0f / sqrtf(ss / (float)n + eps);
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		yr[i] = gain ? (xr[i] * inv) * gain[i] : xr[i] * inv;
}

} /* namespace */

extern "C" int x4k_rmsnorm(int n_tok, int n, const float *x, int ld_x, const float *gain,
			   float eps, float *y, int ld_y, cudaStream_t s, x4_err *e)
{
	if (n_tok < 0 || n < 1 || ld_x < n || ld_y < n || n_tok > (1 << 30))
		return x4_err_set(e, X4_EINVAL, "x4k_rmsnorm: bad shape (%d rows of %d, ld %d/%d)",
				  n_tok, n, ld_x, ld_y);
	if (n_tok == 0)
		return 0;
	if (!x || !y)
		return x4_err_set(e, X4_EINVAL, "x4k_rmsnorm: NULL buffer");
	rmsnorm_kernel<<<n_tok, 256, 0, s>>>(n, x, ld_x, gain, eps, y, ld_y);
	return x4_cuda_launched("x4k_rmsnorm: launch", e);
}
