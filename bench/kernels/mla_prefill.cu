/*
 * mla_prefill.cu - the kernel lab for the prefill attention at 32 heads over
 * the fp16 latent cache of 576 a row: the library's fp32 kernel
 * (x4k_mla_prefill: a block a token and 8 heads walks the causal rows, no
 * split; variant `new`) beside its tensor-core variant
 * (kernels/mla_prefill_mma.cuh, sm_80+) at two pipeline depths: `mma`
 * (double-buffered: x4k_mla_prefill_mma, what `--attn mma` runs) and `mma3`
 * (three stages, the same template).  Chunks of 64, 512 and 2048 tokens
 * whose last token ends the context at 512 (2048 for the 2048-token chunk),
 * 4096 and 32768, in a cache of 32768 rows (the rows past the context are
 * never read: the cache's size does not change the work).  L2 flushed
 * between repetitions.  Bytes: the context's cache rows once (the fp32
 * kernel re-reads the rows a token shares with its neighbours, the
 * tensor-core one those a block of 32 (token, head) rows shares with the
 * others, from L2), qt read and ob written; tflops: the scores (576) and
 * the weighted sum (512) over every causal row of every head, 2 flops a
 * multiply-add (the useful work: the tensor cores do twice that, hi and lo).
 *
 * Data: cache values N(0, 1) in fp16, queries N(0, 1.2^2) (scores of
 * standard deviation ~2) and, for the shape marked peaked, N(0, 12^2) (~21:
 * a peaked softmax).  With `new` (or `all`) every shape also checks mma and
 * mma3 against the library's fp32 kernel: stderr gets `# mma check <shape>:
 * max abs diff X, max rel diff Y (of max |ob|)`, whether the timing runs
 * left the same bits, and whether mma3 gave mma's bits (the stages do not
 * change the arithmetic); the program exits 1 if Y > 1e-5, a value is not
 * finite or the bits differ.
 *
 * `long` times only the tensor-core kernel, a 4096-token chunk (the
 * runtime's chunk on the H200) ending at 4096, 65536, 131072, 196608 and
 * 262144 positions of a 262,144-row cache, checks sampled rows of the last
 * against float64 on the host, and fits the time of a chunk-layer as a line in the
 * context: the sum over the 64 chunks of a 262,144-token prefill, times
 * the model's layers, is that prefill's attention (a measurement a chunk at
 * a time, where the whole prefill runs past one device call).
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/mla_prefill [new|all|long]
 */
#include <math.h>

#include "lab.h"
#include "x4_kern.h"
#include "blockfmt.h"
#include "mla_prefill_mma.cuh"

typedef int (*pfa_fn)(int, int, int, int, const float *, const uint16_t *, int, const int *, float,
		      float *, cudaStream_t, x4_err *);

/* `long`: see the head of the file.  0, or 1 on a failed check. */
static int long_ctx(lab *L, const x4_config &c)
{
	const int n_head = c.n_head, kv_lora = c.kv_lora, d_rope = c.d_rope, cw = kv_lora + d_rope;
	const int max_ctx = 262144, n = 4096;
	const size_t nq = (size_t)n * n_head * cw, nob = (size_t)n * n_head * kv_lora;
	uint16_t *cache = (uint16_t *)lab_alloc((size_t)max_ctx * cw * 2);
	float *qt = (float *)lab_alloc(nq * 4), *ob = (float *)lab_alloc(nob * 4);
	lab_fill_normal<<<1024, 256>>>(NULL, cache, (size_t)max_ctx * cw, 61, 1.0f);
	lab_fill_normal<<<1024, 256>>>(qt, NULL, nq, 62, 1.2f);
	LAB_CK(cudaGetLastError());
	int *pos = lab_int(0);
	LAB_CK(cudaDeviceSynchronize());
	x4_err e = { 0 };
	const int ctxs[] = { 4096, 65536, 131072, 196608, 262144 };
	double sx = 0, sy = 0, sxx = 0, sxy = 0;
	const int m = (int)(sizeof ctxs / sizeof ctxs[0]);
	for (int ctx : ctxs) {
		const int p = ctx - n;
		LAB_CK(cudaMemcpy(pos, &p, sizeof p, cudaMemcpyHostToDevice));
		char nm[64];
		snprintf(nm, sizeof nm, "t%d_ctx%d_of_%d", n, ctx, max_ctx);
		const double bytes = (double)ctx * cw * 2 + 4.0 * n * n_head * (cw + kv_lora);
		const double rows = (double)n * p + 0.5 * n * (n + 1.0);
		const double us = lab_time_us(L, [&] {
			LAB_X4(x4k_mla_prefill_mma(n, n_head, kv_lora, d_rope, qt, cache, max_ctx, pos, c.kq_scale,
						   ob, L->s, &e), e);
		});
		lab_row(L, "mla_prefill", "mma", nm, bytes, us, 2.0 * rows * n_head * (cw + kv_lora));
		sx += ctx, sy += us, sxx += (double)ctx * ctx, sxy += (double)ctx * us;
	}
	/* The last chunk (pos = ctx - n is left at its value) against float64
	 * on the host, on sampled (token, head) rows: scores over every causal
	 * row, the softmax and the weighted sum in double; each output within
	 * 3e-5 of its sum of P |row| (gpu_kern's attention rule). */
	std::vector<uint16_t> hc((size_t)max_ctx * cw);
	std::vector<float> hq(nq), a(nob);
	LAB_CK(cudaMemcpy(hc.data(), cache, hc.size() * 2, cudaMemcpyDeviceToHost));
	LAB_CK(cudaMemcpy(hq.data(), qt, nq * 4, cudaMemcpyDeviceToHost));
	LAB_CK(cudaMemcpy(a.data(), ob, nob * 4, cudaMemcpyDeviceToHost));
	std::vector<float> cf(hc.size());
	for (size_t i = 0; i < hc.size(); i++)
		cf[i] = x4b_f16(hc[i]);
	const int p_last = max_ctx - n;
	const int toks[] = { 0, 1, 1000, 2047, 3000, n - 2, n - 1 }, heads[] = { 0, 17, 31 };
	double worst = 0; /* largest |mma - ref| / (sum P |row|) */
	bool finite = true;
	for (int t : toks)
		for (int h : heads) {
			const float *q = &hq[((size_t)t * n_head + h) * cw];
			const int L = p_last + t + 1;
			std::vector<double> sc((size_t)L);
			double mx = -INFINITY;
			for (int r = 0; r < L; r++) {
				const float *row = &cf[(size_t)r * cw];
				double d = 0;
				for (int k = 0; k < cw; k++)
					d += (double)q[k] * row[k];
				sc[r] = d * c.kq_scale;
				mx = fmax(mx, sc[r]);
			}
			double sum = 0;
			for (int r = 0; r < L; r++)
				sum += (sc[r] = exp(sc[r] - mx));
			std::vector<double> o((size_t)kv_lora, 0.0), mag((size_t)kv_lora, 0.0);
			for (int r = 0; r < L; r++) {
				const double pr = sc[r] / sum;
				const float *row = &cf[(size_t)r * cw];
				for (int k = 0; k < kv_lora; k++)
					o[k] += pr * row[k], mag[k] += pr * fabs((double)row[k]);
			}
			const float *g = &a[((size_t)t * n_head + h) * kv_lora];
			for (int k = 0; k < kv_lora; k++) {
				finite = finite && isfinite(g[k]);
				worst = fmax(worst, fabs(g[k] - o[k]) / mag[k]);
			}
		}
	const bool ok = finite && worst <= 3e-5;
	fprintf(stderr, "# mma check t%d_ctx%d_of_%d: %d sampled rows against float64, the largest difference "
		"%.3g of the row's sum of P|row| (rule 3e-5)%s%s\n", n, max_ctx, max_ctx,
		(int)(sizeof toks / sizeof toks[0] * sizeof heads / sizeof heads[0]), worst,
		finite ? "" : ", NOT FINITE", ok ? "" : "  <- FAIL");
	const double slope = (m * sxy - sx * sy) / (m * sxx - sx * sx), icpt = (sy - slope * sx) / m;
	double sum = 0;
	for (int i = 1; i <= max_ctx / n; i++)
		sum += icpt + slope * (double)i * n;
	fprintf(stderr, "# long: a %d-token chunk-layer takes %.1f + %.5f x context us (fit over %d contexts); "
		"the %d chunks of a %d-token prefill sum to %.2f s a layer, %.0f s over %d layers\n", n, icpt,
		slope, m, max_ctx / n, max_ctx, sum * 1e-6, sum * 1e-6 * c.n_block, c.n_block);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	lab L;
	const bool long_mode = argc > 1 && !strcmp(argv[1], "long");
	char *nargv[] = { argv[0], (char *)"new", nullptr };
	lab_init(&L, long_mode ? 2 : argc, long_mode ? nargv : argv, "times the prefill attention, fp32 and "
		 "tensor cores, chunks of 64, 512 and 2048 tokens, contexts to 32768; `long`: 4096-token "
		 "chunks to 262144");
	const x4_config c = lab_model();
	if (long_mode)
		return long_ctx(&L, c);
	const int n_head = c.n_head, kv_lora = c.kv_lora, d_rope = c.d_rope, cw = kv_lora + d_rope;
	const int max_ctx = 32768, TMAX = 2048;
	const size_t nq = (size_t)TMAX * n_head * cw, nob_max = (size_t)TMAX * n_head * kv_lora;
	uint16_t *cache = (uint16_t *)lab_alloc((size_t)max_ctx * cw * 2);
	float *qt = (float *)lab_alloc(nq * 4), *qt_pk = (float *)lab_alloc(nq * 4);
	lab_fill_normal<<<1024, 256>>>(NULL, cache, (size_t)max_ctx * cw, 61, 1.0f);
	lab_fill_normal<<<1024, 256>>>(qt, NULL, nq, 62, 1.2f);
	lab_fill_normal<<<1024, 256>>>(qt_pk, NULL, nq, 63, 12.0f);
	LAB_CK(cudaGetLastError());
	float *ob = (float *)lab_alloc(nob_max * 4), *ob_mma = (float *)lab_alloc(nob_max * 4);
	int *pos = lab_int(0);
	LAB_CK(cudaDeviceSynchronize());
	x4_err e = { 0 };
	const struct { const char *name; pfa_fn fn; } mmas[] = {
		{ "mma", x4k_mla_prefill_mma },
		{ "mma3", mla_mma::mla_prefill_mma<3> },
	};
	bool mma_skip[2] = { false, false }, fail = false;
	std::vector<float> h_ref(nob_max), h_mma(nob_max), h_again(nob_max), h_first(nob_max);
	const struct { int n, ctx; bool peaked; } runs[] = {
		{ 64, 512, false },    { 64, 4096, false },    { 64, max_ctx, false },
		{ 512, 512, false },   { 512, 4096, false },   { 512, max_ctx, false },
		{ 2048, 2048, false }, { 2048, 4096, false },  { 2048, max_ctx, false },
		{ 512, 4096, true },
	};
	for (const auto &run : runs) {
		const int n = run.n, ctx = run.ctx, p = ctx - n;
		const float *q = run.peaked ? qt_pk : qt;
		const size_t nob = (size_t)n * n_head * kv_lora;
		LAB_CK(cudaMemcpy(pos, &p, sizeof p, cudaMemcpyHostToDevice));
		char nm[64];
		snprintf(nm, sizeof nm, "t%d_ctx%d_of_%d%s", n, ctx, max_ctx, run.peaked ? "_peaked" : "");
		double bytes = (double)ctx * cw * 2 + 4.0 * n * n_head * (cw + kv_lora);
		double rows = (double)n * p + 0.5 * n * (n + 1.0); /* sum over t of p + t + 1 */
		double flops = 2.0 * rows * n_head * (cw + kv_lora);
		if (!L.run_new)
			continue;
		auto lib = [&] {
			LAB_X4(x4k_mla_prefill(n, n_head, kv_lora, d_rope, q, cache, max_ctx, pos, c.kq_scale,
					       ob, L.s, &e), e);
		};
		lab_row(&L, "mla_prefill", "new", nm, bytes, lab_time_us(&L, lib), flops);
		lib();
		LAB_CK(cudaStreamSynchronize(L.s));
		LAB_CK(cudaGetLastError());
		LAB_CK(cudaMemcpy(h_ref.data(), ob, nob * 4, cudaMemcpyDeviceToHost));
		for (int v = 0; v < 2; v++) {
			if (mma_skip[v])
				continue;
			x4_err me = { 0 };
			auto mma = [&] {
				return mmas[v].fn(n, n_head, kv_lora, d_rope, q, cache, max_ctx, pos, c.kq_scale,
						  ob_mma, L.s, &me);
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
			lab_row(&L, "mla_prefill", mmas[v].name, nm, bytes, lab_time_us(&L, [&] {
					LAB_X4(mma(), me);
				}), flops);
			LAB_CK(cudaMemcpy(h_again.data(), ob_mma, nob * 4, cudaMemcpyDeviceToHost));
			const bool same = !memcmp(h_again.data(), h_mma.data(), nob * 4);
			bool as_mma = true; /* mma3's bits are mma's */
			if (v == 0)
				memcpy(h_first.data(), h_mma.data(), nob * 4);
			else if (!mma_skip[0])
				as_mma = !memcmp(h_first.data(), h_mma.data(), nob * 4);
			const bool ok = finite && same && as_mma && rel <= 1e-5;
			fprintf(stderr,
				"# %s check %s: max abs diff %.3g, max rel diff %.3g (of max |ob| %.3g)%s; "
				"same bits after the timing runs: %s%s%s\n",
				mmas[v].name, nm, dmax, rel, omax, finite ? "" : ", NOT FINITE", same ? "yes" : "NO",
				v == 0 ? "" : as_mma ? "; mma's bits: yes" : "; mma's bits: NO",
				ok ? "" : "  <- FAIL");
			if (!ok)
				fail = true;
		}
	}
	return fail ? 1 : 0;
}
