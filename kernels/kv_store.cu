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

constexpr int KV_THREADS = 256;
constexpr int KV_RV = 8; /* a thread's values a round of loads: 2,048 a block */

/* A round of a thread's values of a[0..n): v[j] = a[c0 + j * KV_THREADS +
 * threadIdx.x], 0 past n; every load issued before any is used, so that a
 * round costs one memory round trip (a loop of one load an iteration cost
 * one a value: six for the model's 1,536 values of c_q, then six more for
 * the writes, all after the wait). */
__device__ __forceinline__ void kv_round(const float *a, int n, int c0, float (&v)[KV_RV])
{
#pragma unroll
	for (int j = 0; j < KV_RV; j++) {
		const int i = c0 + j * KV_THREADS + (int)threadIdx.x;
		v[j] = i < n ? a[i] : 0.f;
	}
}

/* The RMS norm of a[0..n) (times the gains g_all, if any) handed to
 * put(i, value) for each i: x4k_rmsnorm's arithmetic and order (thread t
 * sums i = t, t + 256, ... in turn); the first round of values and gains
 * comes in v and g (the gains loaded before the wait, the values after
 * it), later rounds are loaded as they are needed.  For n <= 2,048 it is
 * one round trip, the block's sum and the writes. */
template <class Put>
__device__ __forceinline__ void kv_norm(const float *a, const float *g_all, int n, float eps,
					float (&v)[KV_RV], float (&g)[KV_RV], float *red, Put put)
{
	float ss = 0.f;
	for (int c0 = 0; c0 < n; c0 += KV_THREADS * KV_RV) {
		float w[KV_RV];
		if (c0)
			kv_round(a, n, c0, w);
#pragma unroll
		for (int j = 0; j < KV_RV; j++) {
			const float x = c0 ? w[j] : v[j];
			if (c0 + j * KV_THREADS + (int)threadIdx.x < n)
				ss = fmaf(x, x, ss);
		}
	}
	ss = x4c::block_sum(ss, red); /* its barriers order every read before the writes */
	const float inv = 1.0f / sqrtf(ss / (float)n + eps);
	for (int c0 = 0; c0 < n; c0 += KV_THREADS * KV_RV) {
		if (c0) {
			kv_round(a, n, c0, v);
			if (g_all)
				kv_round(g_all, n, c0, g);
		}
#pragma unroll
		for (int j = 0; j < KV_RV; j++) {
			const int i = c0 + j * KV_THREADS + (int)threadIdx.x;
			if (i < n)
				put(i, g_all ? (v[j] * inv) * g[j] : v[j] * inv);
		}
	}
}

__global__ void __launch_bounds__(KV_THREADS)
kv_store_kernel(int kv_lora, int d_rope, const float *__restrict__ kva,
		const float *__restrict__ gain, float eps, const float *__restrict__ omega,
		const int *__restrict__ pos, __half *__restrict__ cache, int max_ctx, qnorm_job qj)
{
	__shared__ float red[32];
	const int tok = blockIdx.x, cw = kv_lora + d_rope, tid = threadIdx.x;
	const bool qjob = blockIdx.y == 1; /* uniform over the block */
	const int p0 = __ldcg(pos); /* before the wait: mla_pos_early (mla_attn.cuh) */
	/* the gains and the rope's frequency: weights, before the wait */
	float v[KV_RV], g[KV_RV];
	const float *g_all = qjob ? qj.gain : gain;
	if (g_all)
		kv_round(g_all, qjob ? qj.n_q : kv_lora, 0, g);
	const bool rope = !qjob && tid < d_rope / 2;
	const float om = rope ? omega[tid] : 0.f;
	x4p::trigger();
	x4p::wait();
	if (qjob) {
		float *q = qj.q + (size_t)tok * qj.n_q;
		kv_round(q, qj.n_q, 0, v);
		kv_norm(q, g_all, qj.n_q, eps, v, g, red, [&](int i, float x) { q[i] = x; });
		return;
	}
	const int p = p0 + tok;
	if (p < 0 || p >= max_ctx) /* uniform over the block */
		return;
	const float *a = kva + (size_t)tok * cw;
	__half *row = cache + (size_t)p * cw;
	/* the latent's first round and this thread's rope pair: one round trip */
	kv_round(a, kv_lora, 0, v);
	const float2 rp = rope ? make_float2(a[kv_lora + 2 * tid], a[kv_lora + 2 * tid + 1])
			       : make_float2(0.f, 0.f);
	kv_norm(a, g_all, kv_lora, eps, v, g, red, [&](int i, float x) { row[i] = __float2half_rn(x); });
	for (int i = tid; i < d_rope / 2; i += KV_THREADS) {
		const float2 r = i == tid ? x4c::rope_pair(rp.x, rp.y, p, om)
					  : x4c::rope_pair(a[kv_lora + 2 * i], a[kv_lora + 2 * i + 1], p, omega[i]);
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
	x4p::launch(kv_store_kernel, dim3(n_tok), dim3(KV_THREADS), 0, s, kv_lora, d_rope, kva, gain, eps, omega,
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
	x4p::launch(kv_store_kernel, dim3(n_tok, 2), dim3(KV_THREADS), 0, s, kv_lora, d_rope, kva, gain, eps,
		    omega, pos, reinterpret_cast<__half *>(cache), max_ctx, qnorm_job{ n_q, q, q_gain });
	return x4_cuda_launched("x4k_kv_store_norm: launch", e);
}
