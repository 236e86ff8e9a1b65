/*
 * l2pf.cu - the kernel lab for an L2 prefetch of the chosen experts
 * (bench/RESULTS.md 34's next lever for the routed experts): does a
 * prefetch of the four chosen experts' gate, up and down rows into the L2,
 * issued as soon as the experts are known (in the step: by the router's
 * kernel, ~4 us before the experts' own copies start), shorten the
 * one-token MoE (x4k_moe_experts_sum, the library's two launches) that
 * follows?  One MoE layer of the full model in IQ4_NL (64 experts, 3584 x
 * 1024, top-4, with the shared expert's down), one token, L2 flushed before
 * every repetition (lab.h).
 *
 * Rows (op moe_l2pf, shape 1tok_top4_of_64; time = the whole sequence):
 *   cold      x4k_moe_experts_sum alone (today's step);
 *   pf1       a kernel of one block that reads the route table and issues
 *             the L2 prefetches (sm_90: one cp.async.bulk.prefetch.L2 of
 *             each expert's 2 MB matrix, 13 in all with the shared down;
 *             older: prefetch.global.L2 a 128-byte line), then the MoE;
 *   pf132     the same prefetches spread over 132 blocks, then the MoE;
 *   pf1_only  the one-block prefetch kernel alone (its issue time: the
 *             prefetches complete after it);
 *   warm      the MoE after a first MoE of the same routes (its bytes in
 *             the L2: what a prefetch that had finished would give).
 * The MoE's output is checked to be the same bits with and without a
 * prefetch ("# check" on stderr, exit 1 if not).  Run on the H200
 * (bench/RESULTS.md 35): cold 30.0 us, warm 25.2, pf1 43.9, pf132 34.7 —
 * the prefetch does not pay, and the MoE is not bound by its bytes.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/l2pf [new|all]
 */
#include "lab.h"
#include "x4_kern.h"

namespace {

/* The spans to prefetch: expert e's gate and up ([f][d]) and down
 * ([d][f]) rows, each contiguous, and the shared down. */
struct pf_args {
	const int32_t *sel; /* [k] the token's experts */
	int k;
	const uint8_t *gate, *up, *down, *sdown;
	size_t gu_bytes, dn_bytes; /* an expert's gate (= up) and down matrix */
};

__device__ __forceinline__ void prefetch_span(const uint8_t *p, size_t n, int part, int parts)
{
	const size_t per = (n / parts + 127) / 128 * 128, a = (size_t)part * per;
	if (a >= n)
		return;
	const size_t len = a + per < n ? per : n - a;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	for (size_t o = 0; o < len; o += (size_t)1 << 20) { /* bulk prefetches of at most 1 MiB */
		const unsigned m = (unsigned)(len - o < ((size_t)1 << 20) ? len - o : ((size_t)1 << 20));
		asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + a + o), "r"(m) : "memory");
	}
#else
	for (size_t o = threadIdx.x * (size_t)128; o < len; o += (size_t)blockDim.x * 128)
		asm volatile("prefetch.global.L2 [%0];" ::"l"(p + a + o));
#endif
}

/* Block b of the grid prefetches part b of every span: on sm_90 one
 * thread a span issues its bulk prefetches; older, every thread a line. */
__global__ void pf_kernel(pf_args a)
{
	const int spans = 3 * a.k + (a.sdown ? 1 : 0);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	for (int s = threadIdx.x; s < spans; s += blockDim.x) {
#else
	for (int s = 0; s < spans; s++) {
#endif
		const uint8_t *p;
		size_t n;
		if (s == 3 * a.k) {
			p = a.sdown, n = a.dn_bytes;
		} else {
			const int e = a.sel[s / 3], m = s % 3;
			p = m == 0 ? a.gate + (size_t)e * a.gu_bytes : m == 1 ? a.up + (size_t)e * a.gu_bytes
									: a.down + (size_t)e * a.dn_bytes;
			n = m == 2 ? a.dn_bytes : a.gu_bytes;
		}
		prefetch_span(p, n, blockIdx.x, gridDim.x);
	}
}

} /* namespace */

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the one-token MoE after an L2 prefetch of its experts");
	const x4_config m = lab_model();
	const int d = m.n_embd, f = m.n_ff_exp, E = m.n_expert, k = m.n_expert_used;
	x4_err e = { 0 };
	const int type = X4_T_IQ4_NL;
	const size_t rbd = x4_type_bytes(type, (uint64_t)d), rbf = x4_type_bytes(type, (uint64_t)f);
	const size_t gu_bytes = (size_t)f * rbd, dn_bytes = (size_t)d * rbf;
	const uint8_t *gate = (const uint8_t *)lab_blocks(type, (size_t)E * f, d, 1);
	const uint8_t *up = (const uint8_t *)lab_blocks(type, (size_t)E * f, d, 2);
	const uint8_t *down = (const uint8_t *)lab_blocks(type, (size_t)E * d, f, 3);
	const uint8_t *sdown = (const uint8_t *)lab_blocks(type, (size_t)d, f, 4);
	float *x = lab_f32((size_t)d, 5), *sh = lab_f32((size_t)f, 6);
	std::vector<int32_t> sel(k);
	std::vector<float> wts(k, 1.0f / k);
	for (int i = 0; i < k; i++)
		sel[i] = (7 + 17 * i) % E; /* distinct experts, scattered over the tensor */
	lab_routes lr;
	lab_routes_make(&lr, 1, k, E, x4k_moe_tile(1, k), sel.data(), wts.data(), L.s);
	const size_t wsb = x4k_moe_experts_workspace_bytes(1, k, d, f);
	void *ws = lab_alloc(wsb);
	float *y = (float *)lab_alloc((size_t)d * 4), *y0 = (float *)lab_alloc((size_t)d * 4);
	pf_args pa = { lr.r.sel, k, gate, up, down, sdown, gu_bytes, dn_bytes };
	auto moe = [&](float *out) {
		LAB_X4(x4k_moe_experts_sum(&lr.r, nullptr, type, x, d, f, gate, up, down, type, nullptr, nullptr, sdown, sh, ws, wsb, out, L.s,
					   &e), e);
	};
	auto pf = [&](int blocks) {
		pf_kernel<<<blocks, 32, 0, L.s>>>(pa);
		LAB_CK(cudaGetLastError());
	};
	/* the same bits with and without a prefetch */
	moe(y0);
	pf(132);
	moe(y);
	LAB_CK(cudaStreamSynchronize(L.s));
	std::vector<float> a((size_t)d), b((size_t)d);
	LAB_CK(cudaMemcpy(a.data(), y0, (size_t)d * 4, cudaMemcpyDeviceToHost));
	LAB_CK(cudaMemcpy(b.data(), y, (size_t)d * 4, cudaMemcpyDeviceToHost));
	const bool same = !memcmp(a.data(), b.data(), (size_t)d * 4);
	fprintf(stderr, "# check: the MoE after a prefetch %s the MoE without\n", same ? "equals" : "DIFFERS from");
	if (!same)
		return 1;
	/* gate, up and down a route, and the shared down */
	const double bytes = (double)k * (2.0 * gu_bytes + dn_bytes) + (double)dn_bytes;
	const char *shape = "1tok_top4_of_64";
	lab_row(&L, "moe_l2pf", "cold", shape, bytes, lab_time_us(&L, [&] { moe(y); }));
	lab_row(&L, "moe_l2pf", "pf1", shape, bytes, lab_time_us(&L, [&] { pf(1); moe(y); }));
	lab_row(&L, "moe_l2pf", "pf132", shape, bytes, lab_time_us(&L, [&] { pf(132); moe(y); }));
	lab_row(&L, "moe_l2pf", "pf1_only", shape, bytes, lab_time_us(&L, [&] { pf(1); }));
	lab_row(&L, "moe_l2pf", "warm", shape, bytes, lab_time_us(&L, [&] { moe(y); moe(y); }) -
		lab_time_us(&L, [&] { moe(y); }));
	return 0;
}
