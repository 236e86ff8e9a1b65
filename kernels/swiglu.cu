/*
 * swiglu.cu - h = silu(g) * u, fp32 (docs/numerics.md 1.4), for the dense FFN and the
 * shared expert, whose gate and up come from separate products.
 */
#include "cuda_check.h"
#include "x4_kern.h"
#include "quant_dev.cuh"
#include "pdl.cuh"

__global__ void swiglu_kernel(int64_t n, const float *__restrict__ g, const float *__restrict__ u,
			      float *__restrict__ h)
{
	x4p::trigger();
	x4p::wait();
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		h[i] = x4d::silu(g[i]) * u[i];
}

extern "C" int x4k_swiglu(int64_t n, const float *g, const float *u, float *h, cudaStream_t s,
			  x4_err *e)
{
	if (n < 0 || (n && (!g || !u || !h)))
		return x4_err_set(e, X4_EINVAL, "x4k_swiglu: bad length %lld or NULL buffer", (long long)n);
	if (n == 0)
		return 0;
	int64_t blocks = (n + 255) / 256;
	x4p::launch(swiglu_kernel, dim3((unsigned)(blocks < 65536 ? blocks : 65536)), dim3(256), 0, s, n,
		    g, u, h);
	return x4_cuda_launched("x4k_swiglu: launch", e);
}
