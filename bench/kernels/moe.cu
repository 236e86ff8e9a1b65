/*
 * moe.cu - the kernel lab for the routed experts (x4k_moe_experts: gate
 * and up with the SwiGLU product, then down, IQ4_NL 3584 x 1024, top-4 of
 * 64), L2 flushed between repetitions:
 *   - the batch-1 decode step, one token's 4 routes on 4 distinct experts:
 *     the staged gemv tiles of 317feb9 (old/quant_dev_317.cuh) against the
 *     library's (tile 4);
 *   - a 512-token prefill chunk, 2048 routes spread evenly over the 64
 *     experts: the library's tile of 64 routes (new, x4k_moe_tile's choice)
 *     against the decode tile of 4 (tile4).
 * Bytes: the experts' weights the routes touch (3 matrices of 2 MB an
 * expert), x [n_tok][3584] read and the [n_tok*4][3584] route outputs
 * written (h, the workspace between the two launches, not counted);
 * tflops for the chunk: 6 f d a route.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/moe [old|new|all]
 */
#include "lab.h"
#include "x4_kern.h"
#include "old/quant_dev_317.cuh"

struct routed {
	x4k_moe_routes r;
	void *rws;
};

/* r's table for tile routes a tile from the host's sel and wts */
static void routes_make(routed *m, int n_tok, int k, int E, int tile, const int32_t *sel,
			const float *wts, cudaStream_t s)
{
	x4_err e = { 0 };
	size_t rb = x4k_moe_routes_bytes(n_tok, k, E, tile);
	m->rws = lab_alloc(rb);
	LAB_X4(x4k_moe_routes_init(&m->r, m->rws, rb, n_tok, k, E, tile, &e), e);
	LAB_CK(cudaMemcpy(m->r.sel, sel, (size_t)n_tok * k * 4, cudaMemcpyHostToDevice));
	LAB_CK(cudaMemcpy(m->r.wts, wts, (size_t)n_tok * k * 4, cudaMemcpyHostToDevice));
	LAB_X4(x4k_moe_route_table(&m->r, s, &e), e);
	LAB_CK(cudaStreamSynchronize(s));
}

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the routed experts, top-4 of 64: one token and 512");
	const x4_config c = lab_model();
	const int d = c.n_embd, f = c.n_ff_exp, E = c.n_expert, k = c.n_expert_used;
	const int T = 512;
	size_t mb = x4_type_bytes(X4_T_IQ4_NL, (uint64_t)E * f * d);
	const double eb = 3.0 * x4_type_bytes(X4_T_IQ4_NL, (uint64_t)f * d); /* one expert */
	void *gate = lab_alloc(mb), *up = lab_alloc(mb), *down = lab_alloc(mb);
	lab_bytes(gate, mb, 31);
	lab_bytes(up, mb, 32);
	lab_bytes(down, mb, 33);
	float *x = lab_f32((size_t)T * d, 34);
	size_t wsb = x4k_moe_experts_workspace_bytes(T, k, d, f); /* serves one token too */
	void *ws = lab_alloc(wsb);
	x4_err e = { 0 };

	{ /* one token */
		int32_t sel[4] = { 5, 17, 40, 63 };
		float wts[4] = { 0.4f, 0.3f, 0.2f, 0.1f };
		routed m;
		routes_make(&m, 1, k, E, x4k_moe_tile(1, k), sel, wts, L.s);
		float *h = (float *)ws;
		float *o = (float *)((char *)ws + (((size_t)k * f * 4 + 255) & ~(size_t)255));
		double bytes = k * eb + 4.0 * d + 4.0 * k * d;
		const char *nm = "1tok_top4_3584x1024";
		if (L.run_old)
			lab_row(&L, "moe_experts", "old", nm, bytes, lab_time_us(&L, [&] {
					x4d_317::moe_experts(&m.r, x, d, f, gate, up, down, h, o, L.s);
				}));
		if (L.run_new)
			lab_row(&L, "moe_experts", "new", nm, bytes, lab_time_us(&L, [&] {
					LAB_X4(x4k_moe_experts(&m.r, X4_T_IQ4_NL, x, d, f, gate, up, down, ws,
							       wsb, NULL, L.s, &e), e);
				}));
		LAB_CK(cudaFree(m.rws));
	}

	{ /* a 512-token chunk: token t on experts b, b+16, b+32, b+48 (b a hash
	   * of t), 32 routes an expert on average, every expert used */
		std::vector<int32_t> sel((size_t)T * k);
		std::vector<float> wts((size_t)T * k, 1.0f / k);
		for (int t = 0; t < T; t++) {
			int b = (int)(((uint32_t)t * 2654435761u >> 16) % (uint32_t)E);
			for (int j = 0; j < k; j++)
				sel[(size_t)t * k + j] = (b + j * (E / k)) % E;
		}
		double bytes = E * eb + 4.0 * T * d + 4.0 * T * k * d, flops = 6.0 * T * k * f * d;
		char nm[64];
		snprintf(nm, sizeof nm, "%dtok_top4_3584x1024", T);
		const int tiles[2] = { x4k_moe_tile(T, k), 4 };
		const char *variant[2] = { "new", "tile4" };
		for (int i = 0; i < 2 && L.run_new; i++) {
			routed m;
			routes_make(&m, T, k, E, tiles[i], sel.data(), wts.data(), L.s);
			lab_row(&L, "moe_experts", variant[i], nm, bytes, lab_time_us(&L, [&] {
					LAB_X4(x4k_moe_experts(&m.r, X4_T_IQ4_NL, x, d, f, gate, up, down, ws,
							       wsb, NULL, L.s, &e), e);
				}), flops);
			LAB_CK(cudaFree(m.rws));
		}
	}
	return 0;
}
