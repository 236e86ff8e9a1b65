/*
 * mla_decode.cu - the kernel lab for the decode attention (x4k_mla_decode:
 * the split attention and its combine) at 32 heads, the fp16 latent cache
 * of 576 a row, contexts 512 and 4096 in a cache of 4096 rows and 512,
 * 4096 and 32768 in a cache of 32768 rows (the grid is sized from the
 * cache, the spans from the context), and a few shapes for the checks
 * (lengths that are not a multiple of 32, one split, a peaked softmax):
 * the splits of 317feb9 (old/mla_317.cuh: at least 128 rows, one dependent
 * load round at a time) against the library's, and the library's
 * tensor-core variant (kernels/mla_mma.cuh, sm_80+) at two pipeline depths:
 * mma (double-buffered: x4k_mla_decode_mma, what `--attn mma` runs) and
 * mma4 (four stages, the same template), L2 flushed between repetitions.
 * Bytes: the cache rows attended (the queries, 74 KB, not counted).
 * Then, for each shape with more than one split, the combine alone on the
 * partials the library's attention left (mla_combine: old the combine of
 * fd09ed0, old/mla_comb_fd0.cuh; new the library's), which must give the
 * same bits (`# combine check`; exit 1 if not); its bytes are the partials
 * read and ob written.
 *
 * Data: cache values N(0, 1) in fp16, queries N(0, 1.2^2) (scores of
 * standard deviation ~2) and, for the shapes marked peaked, N(0, 12^2)
 * (~21: a peaked softmax).  With `new` (or `all`) every shape also checks
 * mma and mma4 against the library's kernel (the fp32 reference here):
 * stderr gets `# mma check <shape>: max abs diff X, max rel diff Y (of max
 * |ob|)` and whether the timing runs left the same bits; the program exits
 * 1 if Y > 1e-5, a value is not finite or the bits differ.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/mla_decode [old|new|all]
 */
#include <math.h>

#include "lab.h"
#include "x4_kern.h"
#include "old/mla_317.cuh"
#include "old/mla_comb_fd0.cuh"
#include "mla_mma.cuh"

typedef int (*mma_fn)(int, int, int, const float *, const uint16_t *, int, const int *, float,
		      float *, void *, size_t, cudaStream_t, x4_err *);

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the decode attention at contexts 512, 4096, 32768");
	const int n_head = 32, kv_lora = 512, d_rope = 64, cw = kv_lora + d_rope;
	const int max_ctx = 32768;
	const float kq_scale = 0.0721688f; /* 1/sqrt(192) */
	const size_t nob = (size_t)n_head * kv_lora;
	uint16_t *cache = (uint16_t *)lab_alloc((size_t)max_ctx * cw * 2);
	float *qt = (float *)lab_alloc((size_t)n_head * cw * 4), *qt_pk = (float *)lab_alloc((size_t)n_head * cw * 4);
	lab_fill_normal<<<1024, 256>>>(NULL, cache, (size_t)max_ctx * cw, 21, 1.0f);
	lab_fill_normal<<<64, 256>>>(qt, NULL, (size_t)n_head * cw, 22, 1.2f);
	lab_fill_normal<<<64, 256>>>(qt_pk, NULL, (size_t)n_head * cw, 23, 12.0f);
	LAB_CK(cudaGetLastError());
	float *ob = (float *)lab_alloc(nob * 4), *ob_mma = (float *)lab_alloc(nob * 4);
	int *pos = lab_int(0);
	size_t wsn = x4k_mla_decode_workspace_bytes(n_head, kv_lora, max_ctx);
	size_t wso = mla_317::workspace_bytes(n_head, kv_lora, max_ctx);
	void *ws_new = lab_alloc(wsn), *ws_old = lab_alloc(wso), *ws_mma = lab_alloc(wsn);
	LAB_CK(cudaDeviceSynchronize());
	x4_err e = { 0 };
	const struct { const char *name; mma_fn fn; } mmas[] = {
		{ "mma", x4k_mla_decode_mma },
		{ "mma4", mla_mma::mla_mma_decode<4> },
		{ "mma_r32", mla_mma::mla_mma_decode<2, 1> }, /* rounds of 32 rows (the library's below mla_mma::ROUND64_CTX) */
		{ "mma_r64", mla_mma::mla_mma_decode<2, 2> }, /* rounds of 64 (the library's from it) */
	};
	bool mma_skip[4] = { false, false, false, false }, fail = false;
	std::vector<float> h_ref(nob), h_mma(nob), h_again(nob);
	/* {cache rows, context, peaked}: the first rows serve as the smaller
	 * caches, whose workspaces the largest one's cover */
	const struct { int rows, ctx; bool peaked; } runs[] = {
		{ 4096, 512, false },  { 4096, 4096, false },	  { max_ctx, 512, false },
		{ max_ctx, 4096, false }, { max_ctx, max_ctx, false }, { 4096, 1000, false },
		{ 32, 29, false },	  { 4096, 1, false },	  { max_ctx, 32767, true },
		{ 4096, 1000, true },
	};
	for (const auto &run : runs) {
		const int rows = run.rows, ctx = run.ctx;
		const float *q = run.peaked ? qt_pk : qt;
		int p = ctx - 1;
		LAB_CK(cudaMemcpy(pos, &p, sizeof p, cudaMemcpyHostToDevice));
		char nm[64];
		snprintf(nm, sizeof nm, "ctx%d_of_%d%s", ctx, rows, run.peaked ? "_peaked" : "");
		double bytes = (double)ctx * cw * 2;
		if (L.run_old)
			lab_row(&L, "mla_decode", "old", nm, bytes, lab_time_us(&L, [&] {
					mla_317::decode(n_head, kv_lora, d_rope, q, cache, rows, pos, kq_scale,
							ob, ws_old, L.s);
				}));
		if (!L.run_new)
			continue;
		auto lib = [&] {
			LAB_X4(x4k_mla_decode(n_head, kv_lora, d_rope, q, cache, rows, pos, kq_scale, ob, ws_new,
					      wsn, L.s, &e), e);
		};
		lab_row(&L, "mla_decode", "new", nm, bytes, lab_time_us(&L, lib));
		lib();
		LAB_CK(cudaStreamSynchronize(L.s));
		LAB_CK(cudaGetLastError());
		LAB_CK(cudaMemcpy(h_ref.data(), ob, nob * 4, cudaMemcpyDeviceToHost));
		const int nsplit = x4k_mla_nsplit(rows);
		int span, nsp;
		x4c::mla_span(ctx, nsplit, &span, &nsp);
		if (nsp > 1) { /* the combine alone, on the partials lib() left in ws_new */
			const x4c::mla_params cp = x4c::mla_decode_params(q, cache, pos, ob_mma, ws_new, n_head,
									   kv_lora, cw, rows, kq_scale, nsplit);
			const double cb = (double)nsp * n_head * (kv_lora + 2) * 4 + (double)nob * 4;
			lab_row(&L, "mla_combine", "old", nm, cb, lab_time_us(&L, [&] {
					comb_fd0::combine(cp, nsplit, L.s);
				}));
			LAB_CK(cudaMemcpy(h_mma.data(), ob_mma, nob * 4, cudaMemcpyDeviceToHost));
			lab_row(&L, "mla_combine", "new", nm, cb, lab_time_us(&L, [&] {
					LAB_X4(x4c::mla_combine_launch(cp, nsplit, L.s, "combine", &e), e);
				}));
			LAB_CK(cudaMemcpy(h_again.data(), ob_mma, nob * 4, cudaMemcpyDeviceToHost));
			const bool same = !memcmp(h_again.data(), h_mma.data(), nob * 4) &&
					  !memcmp(h_again.data(), h_ref.data(), nob * 4);
			fprintf(stderr, "# combine check %s (%d splits): old, new and the library's call give "
				"the same bits: %s\n", nm, nsp, same ? "yes" : "NO  <- FAIL");
			if (!same)
				fail = true;
		}
		for (int v = 0; v < 4; v++) {
			if (mma_skip[v])
				continue;
			x4_err me = { 0 };
			auto mma = [&] {
				return mmas[v].fn(n_head, kv_lora, d_rope, q, cache, rows, pos, kq_scale, ob_mma,
						  ws_mma, wsn, L.s, &me);
			};
			LAB_CK(cudaMemset(ob_mma, 0xff, nob * 4)); /* NaN: a value not written shows */
			if (mma()) {
				fprintf(stderr, "# %s skipped: %s\n", mmas[v].name, me.msg);
				mma_skip[v] = true;
				continue;
			}
			LAB_CK(cudaStreamSynchronize(L.s));
			LAB_CK(cudaGetLastError());
			LAB_CK(cudaMemcpy(h_mma.data(), ob_mma, nob * 4, cudaMemcpyDeviceToHost));
			double dmax = 0, omax = 0;
			bool finite = true;
			for (size_t i = 0; i < nob; i++) {
				if (!isfinite(h_mma[i]) || !isfinite(h_ref[i]))
					finite = false;
				dmax = fmax(dmax, fabs((double)h_mma[i] - h_ref[i]));
				omax = fmax(omax, fabs((double)h_ref[i]));
			}
			const double rel = omax > 0 ? dmax / omax : dmax;
			lab_row(&L, "mla_decode", mmas[v].name, nm, bytes, lab_time_us(&L, [&] {
					LAB_X4(mma(), me);
				}));
			LAB_CK(cudaMemcpy(h_again.data(), ob_mma, nob * 4, cudaMemcpyDeviceToHost));
			const bool same = !memcmp(h_again.data(), h_mma.data(), nob * 4);
			const bool ok = finite && same && rel <= 1e-5;
			fprintf(stderr,
				"# %s check %s: max abs diff %.3g, max rel diff %.3g (of max |ob| %.3g)%s; "
				"same bits after the timing runs: %s%s\n",
				mmas[v].name, nm, dmax, rel, omax, finite ? "" : ", NOT FINITE", same ? "yes" : "NO",
				ok ? "" : "  <- FAIL");
			if (!ok)
				fail = true;
		}
	}
	return fail ? 1 : 0;
}
