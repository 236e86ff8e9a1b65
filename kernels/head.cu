/*
 * head.cu - docs/forward.md 8 up to the logits: the plain mean of the streams (there
 * is no learned head gate in Xing4), then the output RMSNorm, fp32, into the
 * vector the Q6_K logits product reads.  A block a token.
 */
#include "core_dev.cuh"
#include "pdl.cuh"

namespace {

constexpr int HEAD_THREADS = 256, HEAD_COLS = 16; /* a thread's columns a round of loads */
constexpr int HEAD_MAXC = 12288 / HEAD_THREADS;      /* a thread's columns at the largest D */

/* Thread t takes columns t, t + 256, ... in order, each the sum over the
 * streams in order, and keeps their means in registers; a round's loads
 * (HEAD_COLS columns of every stream) are all issued before its first sum,
 * so the decode step's one token costs one round trip rather than one a
 * column (3.7 us against 11.2 at D 3584 on the H200; launched with
 * programmatic dependent launch, so the head's product behind it streams
 * its weights meanwhile: the decode step 1.005x faster at 512 tokens of
 * context, bench/RESULTS.md 37). */
template <int NHC>
__global__ void __launch_bounds__(HEAD_THREADS)
head_kernel(int D, const float *__restrict__ H, const float *__restrict__ gain, float eps,
	    float *__restrict__ y)
{
	__shared__ float red[32];
	x4p::trigger();
	x4p::wait();
	const float *h = H + (size_t)blockIdx.x * NHC * D;
	const float inv_hc = 1.0f / (float)NHC;
	float mv[HEAD_MAXC];
	float ss = 0;
#pragma unroll
	for (int j0 = 0; j0 < HEAD_MAXC; j0 += HEAD_COLS) {
		if (j0 * HEAD_THREADS >= D) /* uniform */
			break;
		float hv[HEAD_COLS][NHC];
#pragma unroll
		for (int j = 0; j < HEAD_COLS; j++) {
			const int i = (j0 + j) * HEAD_THREADS + (int)threadIdx.x;
#pragma unroll
			for (int s = 0; s < NHC; s++)
				hv[j][s] = i < D ? h[(size_t)s * D + i] : 0.f;
		}
#pragma unroll
		for (int j = 0; j < HEAD_COLS; j++) {
			float v = 0;
#pragma unroll
			for (int s = 0; s < NHC; s++)
				v += hv[j][s];
			v *= inv_hc;
			mv[j0 + j] = v;
			if ((j0 + j) * HEAD_THREADS + (int)threadIdx.x < D)
				ss = fmaf(v, v, ss);
		}
	}
	ss = x4c::block_sum(ss, red);
	const float inv = 1.0f / sqrtf(ss / (float)D + eps);
	float *yr = y + (size_t)blockIdx.x * D;
#pragma unroll
	for (int j = 0; j < HEAD_MAXC; j++) {
		const int i = j * HEAD_THREADS + (int)threadIdx.x;
		if (i < D)
			yr[i] = gain ? (mv[j] * inv) * gain[i] : mv[j] * inv;
	}
}

} /* namespace */

extern "C" int x4k_head(int n_tok, int n_hc, int D, const float *H, const float *gain, float eps,
			float *y, cudaStream_t s, x4_err *e)
{
	if (n_tok < 0 || n_hc < 1 || n_hc > 4 || D < 1 || D > 12288 || n_tok > (1 << 30))
		return x4_err_set(e, X4_EINVAL, "x4k_head: bad shape (%d tokens, %d streams, D %d; "
				  "1 to 4 streams, D <= 12288)", n_tok, n_hc, D);
	if (n_tok == 0)
		return 0;
	if (!H || !y)
		return x4_err_set(e, X4_EINVAL, "x4k_head: NULL buffer");
	X4C_NHC_SWITCH(n_hc, NHC,
		x4p::launch(head_kernel<NHC>, dim3(n_tok), dim3(HEAD_THREADS), 0, s, D, H, gain, eps, y));
	return x4_cuda_launched("x4k_head: launch", e);
}
