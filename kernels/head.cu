/*
 * head.cu - docs/forward.md 8 up to the logits: the plain mean of the streams (there
 * is no learned head gate in Xing4), then the output RMSNorm, fp32, into the
 * vector the Q6_K logits product reads.  A block a token.
 */
#include "core_dev.cuh"

namespace {

__global__ void __launch_bounds__(256)
head_kernel(int n_hc, int D, const float *__restrict__ H, const float *__restrict__ gain,
	    float eps, float *__restrict__ y)
{
	extern __shared__ float hb[]; /* [D] the mean */
	__shared__ float red[32];
	const float *h = H + (size_t)blockIdx.x * n_hc * D;
	const float inv_hc = 1.0f / (float)n_hc;
	float ss = 0;
	for (int i = threadIdx.x; i < D; i += blockDim.x) {
		float v = 0;
		for (int s = 0; s < n_hc; s++)
			v += h[(size_t)s * D + i];
		v *= inv_hc;
		hb[i] = v;
		ss = fmaf(v, v, ss);
	}
	ss = x4c::block_sum(ss, red);
	const float inv = 1.0f / sqrtf(ss / (float)D + eps);
	float *yr = y + (size_t)blockIdx.x * D;
	for (int i = threadIdx.x; i < D; i += blockDim.x)
		yr[i] = gain ? (hb[i] * inv) * gain[i] : hb[i] * inv;
}

} /* namespace */

extern "C" int x4k_head(int n_tok, int n_hc, int D, const float *H, const float *gain, float eps,
			float *y, cudaStream_t s, x4_err *e)
{
	if (n_tok < 0 || n_hc < 1 || D < 1 || D > 12288 || n_tok > (1 << 30))
		return x4_err_set(e, X4_EINVAL, "x4k_head: bad shape (%d tokens, %d streams, D %d; "
				  "D <= 12288)", n_tok, n_hc, D);
	if (n_tok == 0)
		return 0;
	if (!H || !y)
		return x4_err_set(e, X4_EINVAL, "x4k_head: NULL buffer");
	head_kernel<<<n_tok, 256, (size_t)D * sizeof(float), s>>>(n_hc, D, H, gain, eps, y);
	return x4_cuda_launched("x4k_head: launch", e);
}
