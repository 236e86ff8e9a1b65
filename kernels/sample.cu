/*
 * sample.cu - picking the next token on the device, so a decode step reads
 * back one id (or none: the id can feed x4k_embed directly).
 *
 * argmax: blocks keep the best (value, lowest id) of a stride, a second
 * launch picks among them.  Sampling (one block of 1024): z = logit / T;
 * weights exp(z - max) in 2^-40 fixed point, so every sum is an integer sum
 * and the same in any order (the draw is reproducible bit for bit); top-k
 * and top-p thresholds by radix select over an order-preserving key of z
 * (four 8-bit passes, counts for top-k, mass for top-p); the draw walks the
 * kept tokens in id order against u * kept mass, u from a counter-based hash
 * of (seed, *counter), and *counter is advanced on the device.
 */
#include "core_dev.cuh"

namespace {

constexpr int AM_THREADS = 256, AM_MAX_BLOCKS = 256;
constexpr int SP_THREADS = 1024;
#define SP_FIX 1099511627776.0f /* 2^40 */

__device__ __forceinline__ bool am_better(float v, int i, float bv, int bi)
{
	return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void am_warp(float &v, int &i)
{
	for (int o = 16; o; o >>= 1) {
		float ov = __shfl_xor_sync(X4C_FULL, v, o);
		int oi = __shfl_xor_sync(X4C_FULL, i, o);
		if (am_better(ov, oi, v, i)) {
			v = ov;
			i = oi;
		}
	}
}

/* Best of the block into (bv, bi) of thread 0. */
__device__ void am_block(float &v, int &i)
{
	__shared__ float sv[32];
	__shared__ int si[32];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	am_warp(v, i);
	if (lane == 0) {
		sv[warp] = v;
		si[warp] = i;
	}
	__syncthreads();
	if (warp == 0) {
		v = lane < nw ? sv[lane] : -INFINITY;
		i = lane < nw ? si[lane] : INT_MAX;
		am_warp(v, i);
	}
}

__global__ void __launch_bounds__(AM_THREADS)
argmax_part_kernel(int n, const float *__restrict__ l, float *pv, int *pi)
{
	float v = -INFINITY;
	int i = INT_MAX; /* nothing yet: loses to any number, -inf included */
	for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
		float x = l[j];
		if (!isnan(x) && am_better(x, j, v, i)) {
			v = x;
			i = j;
		}
	}
	am_block(v, i);
	if (threadIdx.x == 0) {
		pv[blockIdx.x] = v;
		pi[blockIdx.x] = i;
	}
}

__global__ void __launch_bounds__(AM_THREADS)
argmax_final_kernel(int nb, const float *__restrict__ pv, const int *__restrict__ pi, int32_t *out)
{
	float v = -INFINITY;
	int i = INT_MAX;
	for (int j = threadIdx.x; j < nb; j += blockDim.x)
		if (am_better(pv[j], pi[j], v, i)) {
			v = pv[j];
			i = pi[j];
		}
	am_block(v, i);
	if (threadIdx.x == 0)
		*out = i == INT_MAX ? 0 : i; /* every value NaN: 0, as the host sampler */
}

__device__ __forceinline__ uint32_t z_key(float z)
{
	uint32_t b = __float_as_uint(z);
	return b & 0x80000000u ? ~b : b | 0x80000000u;
}

__device__ __forceinline__ uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Inclusive prefix sum over the block of 64-bit values. */
__device__ uint64_t block_scan_u64(uint64_t v, uint64_t *sh)
{
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	for (int o = 1; o < 32; o <<= 1) {
		uint64_t t = __shfl_up_sync(X4C_FULL, v, o);
		if (lane >= o)
			v += t;
	}
	if (lane == 31)
		sh[warp] = v;
	__syncthreads();
	uint64_t before = 0;
	for (int w = 0; w < warp; w++)
		before += sh[w];
	__syncthreads();
	return v + before;
}

struct sp_args {
	int n;
	const float *l;
	float temp;
	int top_k;
	float top_p;
	uint64_t seed;
	uint64_t *counter;
	int32_t *out;
};

__global__ void __launch_bounds__(SP_THREADS) sample_kernel(sp_args a)
{
	__shared__ float red[32];
	__shared__ unsigned long long hist[256];
	__shared__ uint64_t sh[32];
	__shared__ uint32_t s_sel;
	__shared__ uint64_t s_need;
	const int tid = threadIdx.x, n = a.n;

	/* the largest z (NaN skipped) */
	float mx = -INFINITY;
	for (int j = tid; j < n; j += SP_THREADS) {
		float z = a.l[j] / a.temp;
		if (!isnan(z))
			mx = fmaxf(mx, z);
	}
	mx = x4c::block_max(mx, red);

	/* No softmax when the largest z is not finite (an infinite logit, every
	 * logit -inf, a temperature so small that logit / T overflows): the
	 * pick is certain, the argmax of the logits, as the reference rule. */
	if (!isfinite(mx)) {
		float v = -INFINITY;
		int i = INT_MAX;
		for (int j = tid; j < n; j += SP_THREADS) {
			float x = a.l[j];
			if (!isnan(x) && am_better(x, j, v, i)) {
				v = x;
				i = j;
			}
		}
		am_block(v, i);
		if (tid == 0) {
			*a.out = i == INT_MAX ? 0 : i;
			*a.counter += 1; /* a draw was asked for: the step advances */
		}
		return;
	}

	/* top-k: the k-th largest key by count (0: every valid token) */
	uint32_t kmin = 0;
	for (int pass = 0; pass < 4 && a.top_k > 0; pass++) {
		const int shift = 24 - 8 * pass;
		const uint32_t hmask = pass ? 0xffffffffu << (shift + 8) : 0;
		for (int d = tid; d < 256; d += SP_THREADS)
			hist[d] = 0;
		__syncthreads();
		for (int j = tid; j < n; j += SP_THREADS) {
			float z = a.l[j] / a.temp;
			if (isnan(z))
				continue;
			uint32_t k = z_key(z);
			if ((k & hmask) == (kmin & hmask))
				atomicAdd(&hist[(k >> shift) & 255], 1ull);
		}
		__syncthreads();
		if (tid == 0) {
			uint64_t need = pass ? s_need : (uint64_t)a.top_k, cum = 0;
			int d = 255;
			for (; d > 0; d--) {
				if (cum + hist[d] >= need)
					break;
				cum += hist[d];
			}
			/* fewer valid tokens than k: d reaches 0 and keeps them all */
			s_sel = (uint32_t)d;
			s_need = need > cum ? need - cum : 1;
		}
		__syncthreads();
		kmin |= s_sel << shift;
		__syncthreads();
	}

	/* the mass of the top-k set, and top-p's threshold inside it */
	uint64_t mine = 0;
	for (int j = tid; j < n; j += SP_THREADS) {
		float z = a.l[j] / a.temp;
		if (!isnan(z) && z_key(z) >= kmin)
			mine += (uint64_t)(expf(z - mx) * SP_FIX);
	}
	uint64_t total = block_scan_u64(mine, sh);
	if (tid == SP_THREADS - 1)
		sh[31] = total;
	__syncthreads();
	total = sh[31];
	__syncthreads();
	uint32_t pmin = kmin;
	if (a.top_p < 1.0f) {
		uint64_t target = (uint64_t)ceil((double)a.top_p * (double)total);
		if (target < 1)
			target = 1;
		pmin = 0;
		for (int pass = 0; pass < 4; pass++) {
			const int shift = 24 - 8 * pass;
			const uint32_t hmask = pass ? 0xffffffffu << (shift + 8) : 0;
			for (int d = tid; d < 256; d += SP_THREADS)
				hist[d] = 0;
			__syncthreads();
			for (int j = tid; j < n; j += SP_THREADS) {
				float z = a.l[j] / a.temp;
				if (isnan(z))
					continue;
				uint32_t k = z_key(z);
				if (k >= kmin && (k & hmask) == (pmin & hmask))
					atomicAdd(&hist[(k >> shift) & 255],
						  (unsigned long long)(expf(z - mx) * SP_FIX));
			}
			__syncthreads();
			if (tid == 0) {
				uint64_t need = pass ? s_need : target, cum = 0;
				int d = 255;
				for (; d > 0; d--) {
					if (cum + hist[d] >= need)
						break;
					cum += hist[d];
				}
				s_sel = (uint32_t)d;
				s_need = need > cum ? need - cum : 1;
			}
			__syncthreads();
			pmin |= s_sel << shift;
			__syncthreads();
		}
		if (pmin < kmin)
			pmin = kmin;
	}

	/* the draw, in id order: thread tid owns ids [tid*chunk, (tid+1)*chunk) */
	const int chunk = (n + SP_THREADS - 1) / SP_THREADS;
	const int j0 = tid * chunk, j1 = min(n, j0 + chunk);
	mine = 0;
	for (int j = j0; j < j1; j++) {
		float z = a.l[j] / a.temp;
		if (!isnan(z) && z_key(z) >= pmin)
			mine += (uint64_t)(expf(z - mx) * SP_FIX);
	}
	uint64_t incl = block_scan_u64(mine, sh);
	if (tid == SP_THREADS - 1)
		sh[31] = incl;
	/* Every thread reads the counter before the barrier that thread 0's
	 * increment below follows: read after it, a late warp could draw with
	 * the next step's u (two writers of *out, or none). */
	const uint64_t ctr = *a.counter;
	__syncthreads();
	const uint64_t kept = sh[31];
	uint64_t h = mix64(mix64(a.seed) + ctr * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull);
	double u = (double)(h >> 11) * 0x1.0p-53;
	uint64_t r = (uint64_t)(u * (double)kept);
	if (r >= kept)
		r = kept ? kept - 1 : 0;
	const uint64_t excl = incl - mine;
	if (mine && r >= excl && r < incl) {
		uint64_t acc = excl;
		for (int j = j0; j < j1; j++) {
			float z = a.l[j] / a.temp;
			if (isnan(z) || z_key(z) < pmin)
				continue;
			acc += (uint64_t)(expf(z - mx) * SP_FIX);
			if (r < acc) {
				*a.out = j;
				break;
			}
		}
	}
	if (tid == 0) {
		if (kept == 0)
			*a.out = 0; /* every logit NaN */
		*a.counter = ctr + 1;
	}
}

} /* namespace */

extern "C" size_t x4k_sample_workspace_bytes(int n_vocab)
{
	(void)n_vocab;
	return (size_t)AM_MAX_BLOCKS * (sizeof(float) + sizeof(int));
}

static int argmax_launch(int n, const float *l, int32_t *out, void *ws, cudaStream_t s, x4_err *e)
{
	int nb = (n + 4 * AM_THREADS - 1) / (4 * AM_THREADS);
	nb = nb < 1 ? 1 : nb > AM_MAX_BLOCKS ? AM_MAX_BLOCKS : nb;
	float *pv = (float *)ws;
	int *pi = (int *)(pv + AM_MAX_BLOCKS);
	argmax_part_kernel<<<nb, AM_THREADS, 0, s>>>(n, l, pv, pi);
	int rc = x4_cuda_launched("x4k_argmax: partial", e);
	if (rc)
		return rc;
	argmax_final_kernel<<<1, AM_THREADS, 0, s>>>(nb, pv, pi, out);
	return x4_cuda_launched("x4k_argmax: final", e);
}

extern "C" int x4k_argmax(int n_vocab, const float *logits, int32_t *out, void *ws,
			  size_t ws_bytes, cudaStream_t s, x4_err *e)
{
	if (n_vocab < 1)
		return x4_err_set(e, X4_EINVAL, "x4k_argmax: n_vocab %d", n_vocab);
	if (!logits || !out || !ws || ws_bytes < x4k_sample_workspace_bytes(n_vocab))
		return x4_err_set(e, X4_EINVAL, "x4k_argmax: NULL buffer or short workspace");
	return argmax_launch(n_vocab, logits, out, ws, s, e);
}

extern "C" int x4k_sample(int n_vocab, const float *logits, float temperature, int top_k,
			  float top_p, uint64_t seed, uint64_t *counter, int32_t *out, void *ws,
			  size_t ws_bytes, cudaStream_t s, x4_err *e)
{
	if (n_vocab < 1 || !(temperature >= 0) || !isfinite(temperature) || top_k < 0 ||
	    !(top_p > 0 && top_p <= 1))
		return x4_err_set(e, X4_EINVAL, "x4k_sample: n_vocab %d, temperature %g, top-k %d, "
				  "top-p %g: need n_vocab >= 1, temperature >= 0, top-k >= 0, "
				  "top-p in (0, 1]", n_vocab, temperature, top_k, top_p);
	if (!logits || !out || !counter || !ws || ws_bytes < x4k_sample_workspace_bytes(n_vocab))
		return x4_err_set(e, X4_EINVAL, "x4k_sample: NULL buffer or short workspace");
	if (temperature == 0 || top_k == 1)
		return argmax_launch(n_vocab, logits, out, ws, s, e);
	sp_args a = { n_vocab, logits, temperature, top_k, top_p, seed, counter, out };
	sample_kernel<<<1, SP_THREADS, 0, s>>>(a);
	return x4_cuda_launched("x4k_sample: launch", e);
}
