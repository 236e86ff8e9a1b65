/*
 * kv_store.cu - one layer's cache rows (docs/forward.md 6.3): the latent c_kv =
 * RMS_gain(a[0:kv_lora]) (the norm covers the latent only) and the rope key
 * k_r = RoPE(a[kv_lora:]), stored as fp16 at row *pos + t.  A block a token.
 */
#include "core_dev.cuh"
#include "pdl.cuh"

namespace {

/* A second job in the same launch (x4k_kv_store_norm): blocks with
 * blockIdx.y 1 take q[t] = q_gain * q[t] / rms(q[t]) in place, n_q values
 * at stride n_q, as x4k_rmsnorm's 256-thread loop. */
struct qnorm_job {
	int n_q;
	float *q;
	const float *gain;
};

__global__ void __launch_bounds__(256)
kv_store_kernel(int kv_lora, int d_rope, const float *__restrict__ kva,
		const float *__restrict__ gain, float eps, const float *__restrict__ omega,
		const int *__restrict__ pos, __half *__restrict__ cache, int max_ctx, qnorm_job qj)
{
	__shared__ float red[32];
	const int tok = blockIdx.x, cw = kv_lora + d_rope;
	const int p0 = __ldcg(pos); /* before the wait: mla_pos_early (mla_attn.cuh) */
	x4p::trigger();
	x4p::wait();
	if (blockIdx.y == 1) { /* uniform over the block */
		float *q = qj.q + (size_t)tok * qj.n_q;
		float ss = 0;
		for (int i = threadIdx.x; i < qj.n_q; i += blockDim.x)
			ss = fmaf(q[i], q[i], ss);
		ss = x4c::block_sum(ss, red); /* its barriers order every read before the writes */
		const float inv = 1.0f / sqrtf(ss / (float)qj.n_q + eps);
		for (int i = threadIdx.x; i < qj.n_q; i += blockDim.x)
			q[i] = qj.gain ? (q[i] * inv) * qj.gain[i] : q[i] * inv;
		return;
	}
	const int p = p0 + tok;
	if (p < 0 || p >= max_ctx) /* uniform over the block */
		return;
	const float *a = kva + (size_t)tok * cw;
	__half *row = cache + (size_t)p * cw;
	float ss = 0;
	for (int i = threadIdx.x; i < kv_lora; i += blockDim.x)
		ss = fmaf(a[i], a[i], ss);
	ss = x4c::block_sum(ss, red);
	const float inv = 1.0f / sqrtf(ss / (float)kv_lora + eps);
	for (int i = threadIdx.x; i < kv_lora; i += blockDim.x)
		row[i] = __float2half_rn(gain ? (a[i] * inv) * gain[i] : a[i] * inv);
	for (int i = threadIdx.x; i < d_rope / 2; i += blockDim.x) {
		float2 r = x4c::rope_pair(a[kv_lora + 2 * i], a[kv_lora + 2 * i + 1], p, omega[i]);
		row[kv_lora + 2 * i] = __float2half_rn(r.x);
		row[kv_lora + 2 * i + 1] = __float2half_rn(r.y);
	}
}

} /* namespace */

extern "C" int x4k_kv_store(int n_tok, int kv_lora, int d_rope, const float *kva,
			    const float *gain, float eps, const float *omega, const int *pos,
			    uint16_t *cache, int max_ctx, cudaStream_t s, x4_err *e)
{
	if (n_tok < 0 || kv_lora < 1 || d_rope < 0 || d_rope % 2 || max_ctx < 1 ||
	    n_tok > (1 << 30))
		return x4_err_set(e, X4_EINVAL, "x4k_kv_store: bad shape (%d tokens, kv_lora %d, "
				  "rope %d, max_ctx %d)", n_tok, kv_lora, d_rope, max_ctx);
	if (n_tok == 0)
		return 0;
	if (!kva || !omega || !pos || !cache)
		return x4_err_set(e, X4_EINVAL, "x4k_kv_store: NULL buffer");
	x4p::launch(kv_store_kernel, dim3(n_tok), dim3(256), 0, s, kv_lora, d_rope, kva, gain, eps, omega,
		    pos, reinterpret_cast<__half *>(cache), max_ctx, qnorm_job{ 0, nullptr, nullptr });
	return x4_cuda_launched("x4k_kv_store: launch", e);
}

extern "C" int x4k_kv_store_norm(int n_tok, int kv_lora, int d_rope, const float *kva,
				 const float *gain, float eps, const float *omega, const int *pos,
				 uint16_t *cache, int max_ctx, int n_q, float *q, const float *q_gain,
				 cudaStream_t s, x4_err *e)
{
	if (n_tok < 0 || kv_lora < 1 || d_rope < 0 || d_rope % 2 || max_ctx < 1 || n_q < 1 ||
	    n_tok > 65535)
		return x4_err_set(e, X4_EINVAL, "x4k_kv_store_norm: bad shape (%d tokens, kv_lora %d, "
				  "rope %d, max_ctx %d, q %d)", n_tok, kv_lora, d_rope, max_ctx, n_q);
	if (n_tok == 0)
		return 0;
	if (!kva || !omega || !pos || !cache || !q)
		return x4_err_set(e, X4_EINVAL, "x4k_kv_store_norm: NULL buffer");
	x4p::launch(kv_store_kernel, dim3(n_tok, 2), dim3(256), 0, s, kv_lora, d_rope, kva, gain, eps,
		    omega, pos, reinterpret_cast<__half *>(cache), max_ctx, qnorm_job{ n_q, q, q_gain });
	return x4_cuda_launched("x4k_kv_store_norm: launch", e);
}
