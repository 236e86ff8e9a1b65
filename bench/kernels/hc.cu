/*
 * hc.cu - the kernel lab for the hyper-connection (docs/forward.md 5.1,
 * 5.2): 4 streams of 3584, 24 coefficient rows, L2 flushed between
 * repetitions.
 *   - the gate (x4k_hc_pre) at the decode step's shape, one token, with
 *     the previous sublayer's update fused in front (as the step runs it)
 *     and without: the 7-block split of 317feb9 (old/hc_317.cuh, its
 *     coefficients on one thread) against the library's 112-block split
 *     (new, the coefficients on one warp), the split with the sublayer's
 *     RMSNorm fused (new+norm, the step's call), the same with no Sinkhorn
 *     iterations (iters0: what the 40 normalisations cost), and the eager
 *     path (eager: the same arithmetic in five launches);
 *   - the gate for 64 tokens with the update (a block a token), old and new;
 *   - the stream update alone (x4k_hc_post), one token.
 * Bytes: the BF16 weights, H read, x written, and y read and H_out written
 * with the update (hc_post: coef, y and H read, H_out written).
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/hc [old|new|all]
 */
#include "lab.h"
#include "x4_kern.h"
#include "old/hc_317.cuh"

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the hyper-connection gate and update, 1 and 64 tokens");
	const x4_config m = lab_model();
	const int n_hc = m.n_hc, D = m.n_embd, NC = X4K_HC_NCOEF(n_hc), TMAX = 64;
	const size_t K = (size_t)n_hc * D;
	x4k_hc_cfg c = { n_hc, D, m.sinkhorn_iters, m.rms_eps, m.hc_eps, m.clamp_min, m.clamp_max };
	uint16_t *fn = lab_half((size_t)NC * K, 11, false);
	float *base = lab_f32(NC, 12), *H = lab_f32(TMAX * K, 13), *y = lab_f32((size_t)TMAX * D, 14);
	float *scale = lab_f32(3, 15), *cp = lab_f32((size_t)TMAX * NC, 16);
	float *Ho = (float *)lab_alloc(TMAX * K * 4), *x = (float *)lab_alloc((size_t)TMAX * D * 4);
	float *cf = (float *)lab_alloc((size_t)TMAX * NC * 4);
	size_t wsb = (size_t)1 << 20; /* more than any path needs for 64 tokens */
	size_t need = x4k_hc_workspace_bytes(&c, TMAX);
	if (need > wsb) {
		fprintf(stderr, "hc: workspace of %zu bytes needed\n", need);
		return 1;
	}
	/* one a path: the fused path's split counters are left zeroed by every
	 * call, but a path is not promised to leave another's intact */
	void *ws_old = lab_alloc(wsb), *ws_new = lab_alloc(wsb), *ws_eager = lab_alloc(wsb);
	LAB_CK(cudaMemset(ws_old, 0, wsb));
	LAB_CK(cudaMemset(ws_new, 0, wsb));
	LAB_CK(cudaMemset(ws_eager, 0, wsb));
	x4_err e = { 0 };
	float *gain = lab_f32(D, 17), *xh = (float *)lab_alloc(D * 4);
	LAB_CK(cudaDeviceSynchronize());
	if (L.run_new) /* the gate with the sublayer's RMSNorm fused (the step's call) */
		lab_row(&L, "hc_gate", "new+norm", "1tok_4x3584_update", (double)NC * K * 2 + 3 * K * 4 +
			4.0 * D * 4, lab_time_us(&L, [&] {
				LAB_X4(x4k_hc_pre_norm(&c, 1, H, fn, base, scale, y, cp, Ho, x, cf, gain,
						       m.rms_eps, xh, false, ws_new, wsb, nullptr, L.s, &e), e);
			}));
	if (L.run_new) { /* the same call without the Sinkhorn: what its 40 steps cost */
		x4k_hc_cfg c0 = c;
		c0.iters = 0;
		lab_row(&L, "hc_gate", "iters0", "1tok_4x3584_update", (double)NC * K * 2 + 3 * K * 4 +
			4.0 * D * 4, lab_time_us(&L, [&] {
				LAB_X4(x4k_hc_pre_norm(&c0, 1, H, fn, base, scale, y, cp, Ho, x, cf, gain,
						       m.rms_eps, xh, false, ws_new, wsb, nullptr, L.s, &e), e);
			}));
	}
	const struct {
		int n_tok;
		bool upd;
		const char *name;
	} shapes[] = { { 1, true, "1tok_4x3584_update" }, { 1, false, "1tok_4x3584" },
		       { TMAX, true, "64tok_4x3584_update" } };
	for (const auto &sh : shapes) {
		const int n = sh.n_tok;
		const float *yp = sh.upd ? y : nullptr, *cpp = sh.upd ? cp : nullptr;
		double bytes = (double)NC * K * 2 + n * (K * 4 + D * 4 + (sh.upd ? D * 4 + K * 4 : 0));
		if (L.run_old)
			lab_row(&L, "hc_gate", "old", sh.name, bytes, lab_time_us(&L, [&] {
					hc_317::hc_pre(&c, n, H, fn, base, scale, yp, cpp, Ho, x, cf, ws_old, L.s);
				}));
		if (L.run_new)
			lab_row(&L, "hc_gate", "new", sh.name, bytes, lab_time_us(&L, [&] {
					LAB_X4(x4k_hc_pre(&c, n, H, fn, base, scale, yp, cpp, Ho, x, cf, false,
							  ws_new, wsb, L.s, &e), e);
				}));
		if (L.run_new && n == 1 && sh.upd)
			lab_row(&L, "hc_gate", "eager", sh.name, bytes, lab_time_us(&L, [&] {
					LAB_X4(x4k_hc_pre(&c, n, H, fn, base, scale, yp, cpp, Ho, x, cf, true,
							  ws_eager, wsb, L.s, &e), e);
				}));
	}
	if (L.run_new)
		lab_row(&L, "hc_post", "new", "1tok_4x3584", (double)NC * 4 + D * 4 + 2.0 * K * 4,
			lab_time_us(&L, [&] { LAB_X4(x4k_hc_post(&c, 1, cp, y, H, Ho, L.s, &e), e); }));
	return 0;
}
