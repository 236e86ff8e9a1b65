/* The decode attention's combine of commit fd09ed0 (kernels/mla_attn.cuh
 * as it was: the accumulators loaded after the two reductions, eight at a
 * time), kept for bench/kernels/mla_decode.cu's combine rows; renamed into
 * comb_fd0, with a plain launcher.  Not built into the library. */
#ifndef X4_MLA_COMB_FD0_CUH
#define X4_MLA_COMB_FD0_CUH

#include "mla_attn.cuh"

namespace comb_fd0 {

using namespace x4c;

static __global__ void __launch_bounds__(MLA_COMB_COLS)
combine_kernel(mla_params a, int nsplit)
{
	__shared__ float sw[MLA_MAX_SPLIT];
	__shared__ float red[32];
	const int h = blockIdx.x, tok = blockIdx.z, tid = threadIdx.x;
	const int c = blockIdx.y * MLA_COMB_COLS + tid;
	x4p::trigger();
	x4p::wait();
	int span, nsp;
	mla_span(mla_len(a, tok), nsplit, &span, &nsp);
	float *o = a.ob + ((size_t)tok * a.n_head + h) * a.kv_lora;
	if (nsp == 0) { /* nothing to attend: a defined zero (uniform branch) */
		if (c < a.kv_lora)
			o[c] = 0.f;
		return;
	}
	const size_t base = (size_t)tok * nsplit * a.n_head + h;
	float m = tid < nsp ? a.pm[base + (size_t)tid * a.n_head] : -INFINITY;
	const float M = block_max(m, red);
	float w = tid < nsp ? expf(m - M) : 0.f;
	float lw = tid < nsp ? a.pl[base + (size_t)tid * a.n_head] * w : 0.f;
	const float L = block_sum(lw, red);
	if (tid < MLA_MAX_SPLIT)
		sw[tid] = w;
	__syncthreads();
	if (c >= a.kv_lora)
		return;
	const float inv = 1.0f / L;
	const float *p = a.pacc + base * a.kv_lora + c;
	const size_t stride = (size_t)a.n_head * a.kv_lora;
	float t = 0;
	for (int i0 = 0; i0 < nsp; i0 += 8) {
		float pv[8];
#pragma unroll
		for (int j = 0; j < 8; j++)
			pv[j] = i0 + j < nsp ? __ldg(p + (size_t)(i0 + j) * stride) : 0.f;
#pragma unroll
		for (int j = 0; j < 8; j++)
			if (i0 + j < nsp)
				t = fmaf(pv[j], sw[i0 + j], t);
	}
	o[c] = t * inv;
}

inline void combine(const mla_params &a, int nsplit, cudaStream_t s)
{
	dim3 cgrid(a.n_head, (a.kv_lora + MLA_COMB_COLS - 1) / MLA_COMB_COLS, 1);
	combine_kernel<<<cgrid, MLA_COMB_COLS, 0, s>>>(a, nsplit);
}

} /* namespace comb_fd0 */

#endif
