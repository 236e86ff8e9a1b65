/*
 * moe.cu - the kernel lab for the routed experts (x4k_moe_experts: gate
 * and up with the SwiGLU product, then down, 3584 x 1024, top-4 of 64),
 * L2 flushed between repetitions:
 *   - the batch-1 decode step, one token's 4 routes on 4 distinct experts,
 *     IQ4_NL: the staged gemv tiles of 317feb9 (old, old/quant_dev_317.cuh)
 *     and the chunked gemv tiles of d99d56c (chunk, old/moe_chunk.cuh)
 *     against the library's (new: tiles of one route on the row-staged
 *     core); Q8_0: chunk against new;
 *   - prefill chunks of 512 and 4096 tokens, 2048 and 16384 routes spread
 *     evenly over the 64 experts, IQ4_NL: the library's tile of 64 routes
 *     (x4k_moe_tile's choice) on its two gemm cores (x4k_gemm_mma_set), the
 *     FMA core (old) and the tensor-core core (new, kernels/gemm_mma.cuh,
 *     sm_80 and later), after a check that their route outputs agree
 *     within 1e-4 of their largest (normwise; "# check" lines, exit 1 if
 *     not); at 512 also the decode tile of 4 (tile4).
 * Before the timings, a self-check: the one-token outputs (h and the route
 * outputs) of new and chunk must be the same bits, in both formats (a
 * "# bitwise: equal" line on stderr; "# bitwise: DIFFER" and exit 1 if
 * not).  The weights are random bytes with every block's fp16 scale made
 * finite (2^-5..2^-2), so that the outputs compared are finite numbers.
 * Bytes: the experts' weights the routes touch (3 matrices of 2 MB an
 * expert in IQ4_NL, 3.9 in Q8_0), x [n_tok][3584] read and the
 * [n_tok*4][3584] route outputs written (h, the workspace between the two
 * launches, not counted); tflops for the chunk: 6 f d a route.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/moe [old|new|all]
 */
#include <cmath>

#include "lab.h"
#include "x4_kern.h"
#include "old/moe_chunk.cuh" /* before quant_dev_317.cuh: its T_EXP and SMALL_NV are macros */
#include "old/quant_dev_317.cuh"

/* chunk against new on one token: h and the route outputs, bit for bit */
static bool same_bits(const lab *L, int type, const x4k_moe_routes *r, const float *x, int d, int f,
		      const void *gate, const void *up, const void *down, void *ws, size_t wsb,
		      int *nonfinite)
{
	const size_t nh = (size_t)r->k * f, no = (size_t)r->k * d;
	float *hc = (float *)lab_alloc(nh * 4), *oc = (float *)lab_alloc(no * 4);
	const float *on;
	x4_err e = { 0 };
	if (type == X4_T_Q8_0)
		moe_chunk::experts<X4_T_Q8_0>(r, x, d, f, gate, up, down, hc, oc, L->s);
	else
		moe_chunk::experts<X4_T_IQ4_NL>(r, x, d, f, gate, up, down, hc, oc, L->s);
	LAB_CK(cudaGetLastError());
	LAB_X4(x4k_moe_experts(r, type, x, d, f, gate, up, down, ws, wsb, &on, L->s, &e), e);
	LAB_CK(cudaStreamSynchronize(L->s));
	std::vector<float> a(nh + no), b(nh + no);
	LAB_CK(cudaMemcpy(a.data(), hc, nh * 4, cudaMemcpyDeviceToHost));
	LAB_CK(cudaMemcpy(a.data() + nh, oc, no * 4, cudaMemcpyDeviceToHost));
	LAB_CK(cudaMemcpy(b.data(), ws, nh * 4, cudaMemcpyDeviceToHost)); /* h leads the workspace */
	LAB_CK(cudaMemcpy(b.data() + nh, on, no * 4, cudaMemcpyDeviceToHost));
	LAB_CK(cudaFree(hc));
	LAB_CK(cudaFree(oc));
	*nonfinite = 0;
	for (float v : a)
		*nonfinite += !std::isfinite(v);
	return !memcmp(a.data(), b.data(), a.size() * 4);
}

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the routed experts, top-4 of 64: one token and 512");
	const x4_config c = lab_model();
	const int d = c.n_embd, f = c.n_ff_exp, E = c.n_expert, k = c.n_expert_used;
	const int T = 4096; /* the largest chunk: x and the workspace serve every case */
	const int types[2] = { X4_T_IQ4_NL, X4_T_Q8_0 };
	void *gate[2], *up[2], *down[2];
	for (int i = 0; i < 2; i++) {
		gate[i] = lab_blocks(types[i], (size_t)E * f, d, 31 + 3 * i);
		up[i] = lab_blocks(types[i], (size_t)E * f, d, 32 + 3 * i);
		down[i] = lab_blocks(types[i], (size_t)E * d, f, 33 + 3 * i);
	}
	float *x = lab_f32((size_t)T * d, 34);
	size_t wsb = x4k_moe_experts_workspace_bytes(T, k, d, f); /* serves one token too */
	void *ws = lab_alloc(wsb);
	x4_err e = { 0 };

	{ /* one token */
		int32_t sel[4] = { 5, 17, 40, 63 };
		float wts[4] = { 0.4f, 0.3f, 0.2f, 0.1f };
		lab_routes m;
		lab_routes_make(&m, 1, k, E, x4k_moe_tile(1, k), sel, wts, L.s);
		float *h = (float *)ws;
		float *o = (float *)((char *)ws + (((size_t)k * f * 4 + 255) & ~(size_t)255));
		bool same = true;
		for (int i = 0; i < 2; i++) {
			int bad;
			const bool eq = same_bits(&L, types[i], &m.r, x, d, f, gate[i], up[i], down[i], ws,
						  wsb, &bad);
			fprintf(stderr, "# %s one token: new and chunk %s, %d of %d outputs not finite\n",
				x4_type_name(types[i]), eq ? "the same bits" : "differ", bad, k * (f + d));
			same = same && eq;
		}
		fprintf(stderr, "# bitwise: %s\n", same ? "equal" : "DIFFER");
		if (!same)
			return 1;
		for (int i = 0; i < 2; i++) {
			const int type = types[i];
			double bytes = 3.0 * k * x4_type_bytes(type, (uint64_t)f * d) + 4.0 * d + 4.0 * k * d;
			char nm[64];
			snprintf(nm, sizeof nm, "1tok_top4_3584x1024%s", type == X4_T_Q8_0 ? "_q8" : "");
			if (L.run_old && type == X4_T_IQ4_NL)
				lab_row(&L, "moe_experts", "old", nm, bytes, lab_time_us(&L, [&] {
						x4d_317::moe_experts(&m.r, x, d, f, gate[i], up[i], down[i], h, o,
								     L.s);
					}));
			if (L.run_old)
				lab_row(&L, "moe_experts", "chunk", nm, bytes, lab_time_us(&L, [&] {
						if (type == X4_T_Q8_0)
							moe_chunk::experts<X4_T_Q8_0>(&m.r, x, d, f, gate[i], up[i],
										      down[i], h, o, L.s);
						else
							moe_chunk::experts<X4_T_IQ4_NL>(&m.r, x, d, f, gate[i], up[i],
											down[i], h, o, L.s);
					}));
			if (L.run_new)
				lab_row(&L, "moe_experts", "new", nm, bytes, lab_time_us(&L, [&] {
						LAB_X4(x4k_moe_experts(&m.r, type, x, d, f, gate[i], up[i], down[i],
								       ws, wsb, NULL, L.s, &e), e);
					}));
		}
		LAB_CK(cudaFree(m.rws));
	}

	/* chunks of 512 and 4096 tokens: token t on experts b, b+16, b+32, b+48
	 * (b a hash of t), T*4/64 routes an expert on average, every expert
	 * used; tiles of 64 routes on the FMA core (old) and on the tensor
	 * cores (new), after a check of the two on the same data (the route
	 * outputs within 1e-4 of their max, normwise), and at 512 the decode
	 * tile of 4 (tile4) */
	bool ok = true;
	for (const int T : { 512, 4096 }) {
		std::vector<int32_t> sel((size_t)T * k);
		std::vector<float> wts((size_t)T * k, 1.0f / k);
		for (int t = 0; t < T; t++) {
			int b = (int)(((uint32_t)t * 2654435761u >> 16) % (uint32_t)E);
			for (int j = 0; j < k; j++)
				sel[(size_t)t * k + j] = (b + j * (E / k)) % E;
		}
		double eb = 3.0 * x4_type_bytes(X4_T_IQ4_NL, (uint64_t)f * d); /* one expert */
		double bytes = E * eb + 4.0 * T * d + 4.0 * T * k * d, flops = 6.0 * T * k * f * d;
		char nm[64];
		snprintf(nm, sizeof nm, "%dtok_top4_3584x1024", T);
		lab_routes m;
		lab_routes_make(&m, T, k, E, x4k_moe_tile(T, k), sel.data(), wts.data(), L.s);
		const size_t no = (size_t)T * k * d;
		float *ref = (float *)lab_alloc(no * 4);
		const float *on;
		x4k_gemm_mma_set(0);
		LAB_X4(x4k_moe_experts(&m.r, X4_T_IQ4_NL, x, d, f, gate[0], up[0], down[0], ws, wsb, &on, L.s,
				       &e), e);
		LAB_CK(cudaMemcpyAsync(ref, on, no * 4, cudaMemcpyDeviceToDevice, L.s));
		x4k_gemm_mma_set(1);
		LAB_X4(x4k_moe_experts(&m.r, X4_T_IQ4_NL, x, d, f, gate[0], up[0], down[0], ws, wsb, &on, L.s,
				       &e), e);
		LAB_CK(cudaStreamSynchronize(L.s));
		size_t bad;
		const double diff = lab_normwise_diff(on, ref, no, &bad);
		const bool same = diff <= 1e-4 && bad == 0;
		fprintf(stderr, "# check %s: route outputs max|new - old| / max|old| %.3g, %zu not finite: %s\n",
			nm, diff, bad, same ? "ok" : "DIFFER");
		ok = ok && same;
		LAB_CK(cudaFree(ref));
		for (int core = 0; core < 2; core++) {
			if (!(core ? L.run_new : L.run_old))
				continue;
			x4k_gemm_mma_set(core);
			lab_row(&L, "moe_experts", core ? "new" : "old", nm, bytes, lab_time_us(&L, [&] {
					LAB_X4(x4k_moe_experts(&m.r, X4_T_IQ4_NL, x, d, f, gate[0], up[0],
							       down[0], ws, wsb, NULL, L.s, &e), e);
				}), flops);
		}
		x4k_gemm_mma_set(1);
		LAB_CK(cudaFree(m.rws));
		if (T == 512 && L.run_new) {
			lab_routes_make(&m, T, k, E, 4, sel.data(), wts.data(), L.s);
			lab_row(&L, "moe_experts", "tile4", nm, bytes, lab_time_us(&L, [&] {
					LAB_X4(x4k_moe_experts(&m.r, X4_T_IQ4_NL, x, d, f, gate[0], up[0],
							       down[0], ws, wsb, NULL, L.s, &e), e);
				}), flops);
			LAB_CK(cudaFree(m.rws));
		}
	}
	fprintf(stderr, "# check: %s\n", ok ? "both chunks ok" : "DIFFER");
	return ok ? 0 : 1;
}
