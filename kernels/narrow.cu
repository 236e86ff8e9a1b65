/*
 * narrow.cu - round fp32 values in place to bf16 or fp16 precision
 * (docs/numerics.md 1.3: the normed sublayer input x-hat may be handed
 * narrow).  The values stay fp32 in memory; what changes is the precision
 * the sublayer sees, so the lever can be priced against the fp32 input
 * before any kernel reads a narrow type.  Round to nearest even in both
 * cases, as the CPU does.
 */
#include "core_dev.cuh"

#include <cuda_fp16.h>

namespace {

__device__ __forceinline__ float round_bf16(float v)
{
	unsigned u = __float_as_uint(v);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return __uint_as_float(u | 0x00400000u); /* NaN stays a quiet NaN */
	u += 0x7fffu + ((u >> 16) & 1u);
	return __uint_as_float(u & 0xffff0000u);
}

__global__ void narrow_kernel(int64_t n, float *x, int to_f16)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		x[i] = to_f16 ? __half2float(__float2half_rn(x[i])) : round_bf16(x[i]);
}

} /* namespace */

extern "C" int x4k_narrow(int64_t n, float *x, int dtype, cudaStream_t s, x4_err *e)
{
	if (n < 0 || (dtype != X4K_NARROW_BF16 && dtype != X4K_NARROW_F16))
		return x4_err_set(e, X4_EINVAL, "x4k_narrow: bad arguments (n %lld, dtype %d)",
				  (long long)n, dtype);
	if (n == 0)
		return 0;
	if (!x)
		return x4_err_set(e, X4_EINVAL, "x4k_narrow: NULL buffer");
	int64_t blocks = (n + 255) / 256;
	narrow_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, s>>>(
		n, x, dtype == X4K_NARROW_F16);
	return x4_cuda_launched("x4k_narrow: launch", e);
}
