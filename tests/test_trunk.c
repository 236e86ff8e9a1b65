/*
 * test_trunk.c - the CPU trunk: its pieces against the numbers of docs/forward.md and
 * hand-computed cases, then the whole forward on the tiny checkpoint (F32
 * against F64, thread counts, prefill against decode, reset, the context
 * check) and the sampler.
 */
#include "t.h"
#include "t_trunk.h"
#include "trunk_int.h"
#include "x4_kern.h"

#include <math.h>
#include <unistd.h>

#define TINY "build/models/tiny/xing4_0-tiny.gguf"

static void test_yarn(void)
{
	x4_config c;
	x4_err e;
	if (x4_config_preset("full", &c, &e)) {
		T_OK(0, "yarn", "preset full: %s", e.msg);
		return;
	}
	float w[32];
	x4_yarn_freqs(&c, w);
	static const struct { int i; double want; } chk[] = {
		{ 0, 1.0 }, { 10, 0.0562341 }, { 16, 0.00545673 }, { 23, 2.08363e-5 }, { 31, 2.08363e-6 },
	};
	for (size_t k = 0; k < sizeof chk / sizeof chk[0]; k++) {
		char name[64];
		snprintf(name, sizeof name, "yarn omega_%d", chk[k].i);
		double rel = fabs(w[chk[k].i] - chk[k].want) / chk[k].want;
		T_OK(rel < 1e-5, name, "omega_%d = %.8g, spec %.8g", chk[k].i, w[chk[k].i], chk[k].want);
	}
	T_OK(fabs(c.kq_scale - 0.14467963) < 1e-7, "kq_scale", "kq_scale %.9f, want 0.14467963",
	     c.kq_scale);
}

/* Columns sum to 1 up to eps after the last (column) step; rows nearly. */
static void test_sinkhorn(void)
{
	x4_config c;
	x4_err e;
	x4_config_preset("full", &c, &e);
	double m[24], pre[4], post[4], C[16];
	float mf[24], pref[4], postf[4], Cf[16], base[24], scale[3] = { 0.7f, 1.3f, 2.5f };
	uint64_t s = 12345;
	for (int i = 0; i < 24; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		m[i] = (double)((s >> 33) % 2000) / 100.0 - 10.0;
		mf[i] = (float)m[i];
		base[i] = (float)((int)(i % 5) - 2) * 0.5f;
	}
	x4_hc_coef_f64(&c, m, base, scale, pre, post, C);
	x4_hc_coef_f32(&c, mf, base, scale, pref, postf, Cf);
	double worst = 0, worst_f = 0, worst_row = 0, dif = 0;
	for (int j = 0; j < 4; j++) {
		double cs = 0, csf = 0, rs = 0;
		for (int d = 0; d < 4; d++) {
			cs += C[d * 4 + j];
			csf += Cf[d * 4 + j];
			rs += C[j * 4 + d];
		}
		worst = fmax(worst, fabs(cs - 1));
		worst_f = fmax(worst_f, fabs(csf - 1));
		worst_row = fmax(worst_row, fabs(rs - 1));
	}
	for (int i = 0; i < 16; i++)
		dif = fmax(dif, fabs(C[i] - Cf[i]));
	T_OK(worst < 1e-5, "sinkhorn columns sum to 1 (f64)", "worst |col sum - 1| %g", worst);
	T_OK(worst_f < 1e-5, "sinkhorn columns sum to 1 (f32)", "worst |col sum - 1| %g", worst_f);
	/* Twenty rounds ending on a column step leave the rows only near 1
	 * when the logits are as spread as these (|logit| up to 25). */
	T_OK(worst_row < 0.1, "sinkhorn rows near 1", "worst |row sum - 1| %g", worst_row);
	T_OK(dif < 1e-5, "sinkhorn f32 matches f64", "max |diff| %g", dif);
}

/* n_hc 2, one Sinkhorn round, by hand: m = (pre 0, ln 3 | post 0, 0 |
 * comb [[0, ln 3], [0, 0]]), unit scales, zero bases.
 *   pre = (1/2, 3/4), post = (1, 1)
 *   exp(L - rowmax) = [[1/3, 1], [1, 1]]; rows -> [[1/4, 3/4], [1/2, 1/2]]
 *   columns -> C = [[1/3, 3/5], [2/3, 2/5]]   (C[dst][src])
 * H = (H0 = 1, H1 = 0) with y = 0 must give H' = (C[0][0], C[1][0]) =
 * (1/3, 2/3); the transposed reading would give (1/3, 3/5). */
static void test_hc_by_hand(void)
{
	x4_config c;
	x4_err e;
	x4_config_preset("tiny", &c, &e);
	c.n_hc = 2;
	c.sinkhorn_iters = 1;
	c.hc_eps = 1e-12f;
	double l3 = log(3.0);
	double m[8] = { 0, l3, 0, 0, 0, l3, 0, 0 }, pre[2], post[2], C[4];
	float base[8] = { 0 }, scale[3] = { 1, 1, 1 };
	x4_hc_coef_f64(&c, m, base, scale, pre, post, C);
	double want_C[4] = { 1.0 / 3, 3.0 / 5, 2.0 / 3, 2.0 / 5 };
	double err = fabs(pre[0] - 0.5) + fabs(pre[1] - 0.75) + fabs(post[0] - 1) + fabs(post[1] - 1);
	for (int i = 0; i < 4; i++)
		err += fabs(C[i] - want_C[i]);
	T_OK(err < 1e-9, "hc coefficients by hand", "pre %g %g post %g %g C %g %g %g %g", pre[0],
	     pre[1], post[0], post[1], C[0], C[1], C[2], C[3]);
	double H[2] = { 1, 0 }, y[1] = { 0 }, out[2];
	x4_hc_update_f64(2, 1, post, C, H, y, out);
	T_OK(fabs(out[0] - 1.0 / 3) < 1e-9 && fabs(out[1] - 2.0 / 3) < 1e-9,
	     "comb orientation [dst][src]", "H' = (%g, %g), want (1/3, 2/3); (1/3, 3/5) is the "
	     "transposed (DeepSeek-V4) reading", out[0], out[1]);
	double y2[1] = { 2 }, out2[2];
	x4_hc_update_f64(2, 1, post, C, H, y2, out2);
	T_OK(fabs(out2[0] - (2 + 1.0 / 3)) < 1e-9 && fabs(out2[1] - (2 + 2.0 / 3)) < 1e-9,
	     "hc update adds post*y", "H' = (%g, %g)", out2[0], out2[1]);
	float Hf[2] = { 1, 0 }, yf[1] = { 0 }, postf[2] = { 1, 1 }, outf[2];
	float Cf[4] = { 1.0f / 3, 3.0f / 5, 2.0f / 3, 2.0f / 5 };
	x4_hc_update_f32(2, 1, postf, Cf, Hf, yf, outf);
	T_OK(fabs(outf[1] - 2.0f / 3) < 1e-6, "comb orientation f32", "H'[1] = %g", outf[1]);
	/* The clamp: a logit of 100 behaves as 30. */
	double mc[8] = { 0, 0, 0, 0, 100, 0, 0, 0 }, mc30[8] = { 0, 0, 0, 0, 30, 0, 0, 0 };
	double C100[4], C30[4];
	x4_hc_coef_f64(&c, mc, base, scale, pre, post, C100);
	x4_hc_coef_f64(&c, mc30, base, scale, pre, post, C30);
	T_OK(memcmp(C100, C30, sizeof C30) == 0, "comb logits clamped to 30", "C[0][0] %g vs %g",
	     C100[0], C30[0]);
}

/* The trunk's row dequantizer gives x4_dequant's values bit for bit. */
static void test_dequant_row(void)
{
	static const int types[] = { X4_T_IQ4_NL, X4_T_Q6_K, X4_T_BF16 };
	uint64_t s = 99;
	for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
		int ty = types[k];
		uint64_t n = 1024, nb = x4_type_bytes(ty, n);
		uint8_t *src = malloc(nb);
		float *a = malloc(n * 4), *b = malloc(n * 4);
		for (uint64_t i = 0; i < nb; i++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			src[i] = (uint8_t)(s >> 56);
		}
		/* Keep the fp16 scales finite and the BF16 values non-NaN. */
		int bb = x4_type_block_bytes(ty);
		for (uint64_t i = 0; ty != X4_T_BF16 && i < nb / (uint64_t)bb; i++)
			src[i * bb + (ty == X4_T_Q6_K ? 209 : 1)] &= 0x3b;
		for (uint64_t i = 1; ty == X4_T_BF16 && i < nb; i += 2)
			src[i] &= 0x7b;
		x4_err e;
		x4_dequant(ty, src, a, n, &e);
		x4_cpu_dequant_row(ty, src, b, n);
		char name[64];
		snprintf(name, sizeof name, "row dequant equals x4_dequant (%s)", x4_type_name(ty));
		T_OK(memcmp(a, b, n * 4) == 0, name, "values differ");
		free(src);
		free(a);
		free(b);
	}
	/* A type without a decode gives NaNs, not what the row held before. */
	float y[32] = { 0 };
	uint8_t z[64] = { 0 };
	x4_cpu_dequant_row(2, z, y, 32); /* Q4_0: not in the table */
	int nans = 0;
	for (int i = 0; i < 32; i++)
		nans += isnan(y[i]) != 0;
	T_OK(nans == 32, "row dequant of an unknown type is NaN (Q4_0)", "%d of 32 NaN", nans);
}

static void test_router(void)
{
	double s[5] = { 0.5, 0.7, 0.7, 0.2, 0.7 };
	int sel[4];
	x4r_topk(s, 5, 3, sel);
	T_OK(sel[0] == 1 && sel[1] == 2 && sel[2] == 4, "topk ties: lower index wins",
	     "selected %d %d %d, want 1 2 4", sel[0], sel[1], sel[2]);
	/* NaN scores (a non-finite residual arm) never win over a number, and
	 * the experts chosen stay distinct however many are NaN: the rule of
	 * x4r_topk, which the trunks, the replay and the kernel follow. */
	double h[5] = { NAN, 0.5, NAN, 0.25, NAN };
	x4r_topk(h, 5, 4, sel);
	T_OK(sel[0] == 1 && sel[1] == 3 && sel[2] == 0 && sel[3] == 2,
	     "topk: NaN scores last, experts distinct", "selected %d %d %d %d, want 1 3 0 2",
	     sel[0], sel[1], sel[2], sel[3]);
	double n3[3] = { NAN, NAN, NAN };
	x4r_topk(n3, 3, 3, sel);
	T_OK(sel[0] == 0 && sel[1] == 1 && sel[2] == 2, "topk: all NaN takes ids in order",
	     "selected %d %d %d", sel[0], sel[1], sel[2]);
	double inf[4] = { -INFINITY, INFINITY, NAN, 1 };
	x4r_topk(inf, 4, 4, sel);
	T_OK(sel[0] == 1 && sel[1] == 3 && sel[2] == 0 && sel[3] == 2,
	     "topk: +inf first, -inf before NaN", "selected %d %d %d %d", sel[0], sel[1], sel[2],
	     sel[3]);
	/* The reference router selects on score + bias by the same rule. */
	x4_err e;
	float x[2] = { 1, 0 }, wr[3 * 2] = { 2, 0, -2, 0, 0.5f, 0 }, b[3] = { -1, 0, 0.2f };
	int32_t rs[1];
	float wts[1];
	int rc = x4r_moe_router(1, 2, 3, 1, x, wr, b, 1, true, rs, wts, NULL, NULL, &e);
	T_OK(rc == 0 && rs[0] == 2, "router selects on score + bias", "rc %d selected %d, want 2",
	     rc, rs[0]);
}

static void test_sampler(void)
{
	x4_err e;
	float l[6] = { 1, 3, 2, 3, -1, 0 };
	x4_sampler *s;
	x4_sampler_opts o = { .temperature = 0, .top_p = 1, .seed = 1 };
	x4_sampler_create(&s, &o, &e);
	T_OK(x4_sample(s, l, 6) == 1, "greedy: lowest id on ties", "got %d", x4_sample(s, l, 6));
	x4_sampler_free(s);
	o = (x4_sampler_opts){ .temperature = 0.8f, .top_k = 0, .top_p = 1, .seed = 42 };
	x4_sampler *a, *b2;
	x4_sampler_create(&a, &o, &e);
	x4_sampler_create(&b2, &o, &e);
	int same = 1, hist[6] = { 0 };
	for (int i = 0; i < 2000; i++) {
		int32_t x = x4_sample(a, l, 6), y = x4_sample(b2, l, 6);
		same &= x == y;
		hist[x]++;
	}
	T_OK(same, "sampler: same seed, same ids", "two samplers with seed 42 diverged");
	T_OK(hist[1] > 300 && hist[3] > 300 && hist[4] < hist[2], "sampler: temperature spreads",
	     "histogram %d %d %d %d %d %d", hist[0], hist[1], hist[2], hist[3], hist[4], hist[5]);
	x4_sampler_free(a);
	x4_sampler_free(b2);
	o = (x4_sampler_opts){ .temperature = 1, .top_k = 2, .top_p = 1, .seed = 7 };
	x4_sampler_create(&a, &o, &e);
	int ok = 1;
	for (int i = 0; i < 500; i++) {
		int32_t x = x4_sample(a, l, 6);
		ok &= x == 1 || x == 3;
	}
	T_OK(ok, "sampler: top-k keeps the k best", "drew outside {1, 3}");
	x4_sampler_free(a);
	/* A tiny top-p keeps the best, and every token tied with the last one
	 * kept (the device's rule): ids 1 and 3 tie at 3 here. */
	o = (x4_sampler_opts){ .temperature = 1, .top_k = 0, .top_p = 0.01f, .seed = 7 };
	x4_sampler_create(&a, &o, &e);
	ok = 1;
	int n1 = 0;
	for (int i = 0; i < 200; i++) {
		int32_t x = x4_sample(a, l, 6);
		ok &= x == 1 || x == 3;
		n1 += x == 1;
	}
	T_OK(ok && n1 > 0 && n1 < 200, "sampler: top-p keeps the tied best",
	     "drew outside {1, 3} or only one of them (%d of 200 were 1)", n1);
	float one[6] = { 1, 3, 2, 2.5f, -1, 0 };
	ok = 1;
	for (int i = 0; i < 200; i++)
		ok &= x4_sample(a, one, 6) == 1;
	T_OK(ok, "sampler: top-p keeps at least one", "tiny top-p drew other than the best");
	x4_sampler_free(a);
	o.top_p = 1.5f;
	T_OK(x4_sampler_create(&a, &o, &e) == X4_EINVAL, "sampler: top-p > 1 refused", "accepted");
	/* Non-finite rows: an infinite best is the certain pick, and a tiny
	 * temperature must not overflow the softmax into NaN (which picked the
	 * worst-ranked token before). */
	float inf_row[5] = { 1, INFINITY, 2, 0, -1 }, ninf[3] = { -INFINITY, -INFINITY, -INFINITY };
	float plain[5] = { 1, 5, 2, 0, -1 };
	o = (x4_sampler_opts){ .temperature = 0.8f, .top_k = 0, .top_p = 1, .seed = 3 };
	x4_sampler_create(&a, &o, &e);
	int32_t i1 = x4_sample(a, inf_row, 5), i2 = x4_sample(a, ninf, 3);
	x4_sampler_free(a);
	T_OK(i1 == 1 && i2 == 0, "sampler: +Inf best and all -Inf rows",
	     "got %d (want 1) and %d (want 0)", i1, i2);
	o.temperature = 1e-39f;
	x4_sampler_create(&a, &o, &e);
	int32_t i3 = x4_sample(a, plain, 5);
	x4_sampler_free(a);
	T_OK(i3 == 1, "sampler: a tiny temperature is the argmax", "got %d", i3);
}

/* ---- the whole trunk on the tiny checkpoint ---- */

static int kv_mode;

struct probe_count {
	int n, last_block, finite;
};

static void count_probe(void *ctx, const x4_probe_row *r)
{
	struct probe_count *p = ctx;
	p->n++;
	p->last_block = r->block;
	p->finite &= isfinite(r->streams[0]) && isfinite(r->sub_out[0]);
}

enum { NP = 32, ND = 16 };

static void test_model_trunk(void)
{
	if (access(TINY, R_OK) != 0) {
		printf("# %s is missing (make tiny writes it): whole-trunk tests skipped\n", TINY);
		return;
	}
	x4_err e;
	x4_paths p;
	x4_model *m;
	if (x4_paths_resolve(TINY, NULL, &p, &e) || x4_model_open(&m, &p, &e)) {
		T_OK(0, "open tiny", "%s", e.msg);
		return;
	}
	const x4_config *c = x4_model_config(m);
	int V = c->n_vocab;
	int32_t ids[NP + ND];
	for (int i = 0; i < NP; i++)
		ids[i] = (int32_t)((i * 7919 + 13) % (V - 3)) + 3;
	float *l32 = malloc(sizeof(float) * (size_t)V * (NP + ND));
	float *l64 = malloc(sizeof(float) * (size_t)V * (NP + ND));
	float *lx = malloc(sizeof(float) * (size_t)V * (NP + ND));

	/* F64 drives: prompt, then 16 greedy steps; F32 fed the same ids.  Two
	 * pairs: both caches exact (the arithmetic alone), and both holding
	 * fp16 values (docs/numerics.md 1.7; F32's default; F64 told so). */
	x4_trunk *t64 = NULL, *t32 = NULL;
	int rc = 0;
	for (int pass = 0; pass < 2; pass++) {
		x4_trunk_free(t64);
		x4_trunk_free(t32);
		kv_mode = pass == 0 ? X4_KV_EXACT : X4_KV_F16;
		t64 = t_trunk(m, X4_PREC_F64, 2, 128, 0, kv_mode, X4_RESID_F32);
		kv_mode = pass == 0 ? X4_KV_EXACT : X4_KV_DEFAULT;
		t32 = t_trunk(m, X4_PREC_F32, 2, 128, 0, kv_mode, X4_RESID_F32);
		kv_mode = X4_KV_DEFAULT;
		if (!t64 || !t32) {
			T_OK(0, "trunk create", "see above");
			return;
		}
		rc = x4_trunk_forward(t64, ids, NP, l64, true, &e);
		rc |= x4_trunk_forward(t32, ids, NP, l32, true, &e);
		for (int i = 0; i < ND && rc == 0; i++) {
			ids[NP + i] = x4r_argmax(V, l64 + (size_t)(NP + i - 1) * V);
			rc |= x4_trunk_forward(t64, ids + NP + i, 1, l64 + (size_t)(NP + i) * V, false, &e);
			rc |= x4_trunk_forward(t32, ids + NP + i, 1, l32 + (size_t)(NP + i) * V, false, &e);
		}
		T_OK(rc == 0, pass ? "forward f32/f64, fp16 cache" : "forward f32/f64, exact cache",
		     "%s", e.msg);
		double worst = 0;
		int worst_at = 0, agree = 0;
		for (int i = 0; i < NP + ND; i++) {
			double r = t_rel_err(l32 + (size_t)i * V, l64 + (size_t)i * V, V);
			if (r > worst) {
				worst = r;
				worst_at = i;
			}
			agree += x4r_argmax(V, l32 + (size_t)i * V) == x4r_argmax(V, l64 + (size_t)i * V);
		}
		const char *name = pass ? "f32 vs f64 logits, fp16 cache values (32 + 16 decoded)"
					: "f32 vs f64 logits, exact caches (32 + 16 decoded)";
		T_OK(worst < 1e-4, name, "max relative error %.3g at position %d", worst, worst_at);
		printf("# %s: max rel err %.3g; argmax agrees at %d of %d positions\n", name, worst,
		       agree, NP + ND);
	}
	/* Reported too: the default F32 trunk (fp16 cache) against the
	 * default F64 one (exact cache). */
	{
		x4_trunk *r64 = t_trunk(m, X4_PREC_F64, 2, 128, 0, kv_mode, X4_RESID_F32);
		float *lr = malloc(sizeof(float) * (size_t)V * (NP + ND));
		rc = x4_trunk_forward(r64, ids, NP + ND, lr, true, &e);
		double worst = 0;
		for (int i = 0; i < NP + ND; i++)
			worst = fmax(worst, t_rel_err(l32 + (size_t)i * V, lr + (size_t)i * V, V));
		printf("# default f32 (fp16 cache) vs default f64 (exact cache): max rel err %.3g\n",
		       worst);
		T_OK(rc == 0 && worst < 1e-2, "f32 fp16-cache vs exact f64 within the cache's rounding",
		     "max rel err %.3g", worst);
		free(lr);
		x4_trunk_free(r64);
	}
	bool finite = true;
	for (size_t i = 0; i < (size_t)V * (NP + ND); i++)
		finite = finite && isfinite(l32[i]);
	T_OK(finite, "f32 logits finite", "a NaN/Inf in the tiny model's logits");

	/* Thread count 1 vs 2: bit-identical. */
	x4_trunk *t1 = t_trunk(m, X4_PREC_F32, 1, 128, 0, kv_mode, X4_RESID_F32);
	rc = x4_trunk_forward(t1, ids, NP + ND, lx, true, &e);
	x4_trunk *t2 = t_trunk(m, X4_PREC_F32, 2, 128, 0, kv_mode, X4_RESID_F32);
	float *ly = malloc(sizeof(float) * (size_t)V * (NP + ND));
	rc |= x4_trunk_forward(t2, ids, NP + ND, ly, true, &e);
	T_OK(rc == 0 && memcmp(lx, ly, sizeof(float) * (size_t)V * (NP + ND)) == 0,
	     "threads 1 vs 2 bit-identical", "rc %d, logits differ", rc);

	/* Prefill of 48 against token-by-token decode of the same (t32). */
	T_OK(t_rel_err(l32, ly, V * (NP + ND)) < 1e-6, "prefill equals decode",
	     "prefill vs step-by-step relative error %.3g", t_rel_err(l32, ly, V * (NP + ND)));
	printf("# prefill vs decode: %s\n",
	       memcmp(ly + (size_t)NP * V, l32 + (size_t)NP * V, sizeof(float) * (size_t)ND * V)
		       ? "close, not bit-identical" : "bit-identical");

	/* The same prompt twice after a reset: bit-identical. */
	x4_trunk_reset(t2);
	T_OK(x4_trunk_pos(t2) == 0, "reset drops the length", "pos %d", x4_trunk_pos(t2));
	rc = x4_trunk_forward(t2, ids, NP + ND, lx, true, &e);
	T_OK(rc == 0 && memcmp(lx, ly, sizeof(float) * (size_t)V * (NP + ND)) == 0,
	     "same prompt twice bit-identical", "rc %d", rc);

	/* Reset, then a shorter prompt: equal to a fresh trunk (docs/record.md 7). */
	x4_trunk_reset(t2);
	rc = x4_trunk_forward(t2, ids + 5, 9, lx, false, &e);
	x4_trunk *tf = t_trunk(m, X4_PREC_F32, 2, 128, 0, kv_mode, X4_RESID_F32);
	rc |= x4_trunk_forward(tf, ids + 5, 9, ly, false, &e);
	T_OK(rc == 0 && memcmp(lx, ly, sizeof(float) * (size_t)V) == 0,
	     "reset then shorter prompt equals a fresh trunk", "rc %d, rel err %.3g", rc,
	     t_rel_err(lx, ly, V));

	/* The context check comes before any work. */
	x4_trunk *ts = t_trunk(m, X4_PREC_F32, 1, 8, 0, kv_mode, X4_RESID_F32);
	rc = x4_trunk_forward(ts, ids, 9, lx, false, &e);
	T_OK(rc == X4_ERANGE && x4_trunk_pos(ts) == 0 && strstr(e.msg, "--max-model-len"),
	     "context overflow is X4_ERANGE", "rc %d pos %d: %s", rc, x4_trunk_pos(ts), e.msg);
	rc = x4_trunk_forward(ts, ids, 5, lx, false, &e);
	int rc2 = x4_trunk_forward(ts, ids, 4, lx, false, &e);
	T_OK(rc == 0 && rc2 == X4_ERANGE && x4_trunk_pos(ts) == 5, "overflow after use refused",
	     "rc %d/%d pos %d", rc, rc2, x4_trunk_pos(ts));
	int32_t bad = V;
	rc = x4_trunk_forward(ts, &bad, 1, lx, false, &e);
	T_OK(rc == X4_EINVAL && x4_trunk_pos(ts) == 5, "id outside the vocabulary refused",
	     "rc %d", rc);

	/* The probe: every sublayer of every block, once per forward. */
	struct probe_count pc = { 0, -1, 1 };
	x4_trunk_reset(ts);
	x4_trunk_set_probe(ts, count_probe, &pc);
	x4_trunk_forward(ts, ids, 4, lx, false, &e);
	T_OK(pc.n == 2 * c->n_block && pc.last_block == c->n_block - 1 && pc.finite,
	     "probe after every sublayer", "%d calls, last block %d", pc.n, pc.last_block);

	/* Narrow residuals run (the tiny model stays in range). */
	x4_trunk *th = t_trunk(m, X4_PREC_F32, 2, 128, 0, kv_mode, X4_RESID_F16);
	x4_trunk *tb = t_trunk(m, X4_PREC_F32, 2, 128, 0, kv_mode, X4_RESID_BF16);
	rc = x4_trunk_forward(th, ids, NP, lx, false, &e);
	rc |= x4_trunk_forward(tb, ids, NP, ly, false, &e);
	double rh = t_rel_err(lx, l32 + (size_t)(NP - 1) * V, V);
	double rb = t_rel_err(ly, l32 + (size_t)(NP - 1) * V, V);
	T_OK(rc == 0 && rh < 0.05 && rb < 0.2, "f16/bf16 residuals close to f32 on tiny",
	     "rel err f16 %.3g bf16 %.3g", rh, rb);
	printf("# residual f16 vs f32 rel err %.3g, bf16 %.3g\n", rh, rb);

	/* The sublayer input handed narrow (docs/numerics.md 1.3, --sublayer): the same
	 * narrowing under f32 and f64 arithmetic agrees within the width's
	 * tolerance (docs/numerics.md 4: fp16 4e-3, bf16 4e-2; measured 9e-4 and 4e-3 on
	 * tiny: the two round x-hat values near a boundary differently), and
	 * the narrowing is really applied (the logits move). */
	const int subs[2] = { X4_SUB_BF16, X4_SUB_F16 };
	const double sub_tol[2] = { 4e-2, 4e-3 };
	const char *sub_nm[2] = { "bf16", "f16" };
	for (int k = 0; k < 2; k++) {
		x4_trunk_opts o;
		x4_trunk_opts_default(&o);
		o.max_ctx = 128;
		o.sublayer = subs[k];
		x4_trunk *a = NULL, *b = NULL;
		int r1 = x4_trunk_create(&a, m, &o, &e);
		o.prec = X4_PREC_F64;
		o.kv = X4_KV_F16; /* the same cache as the f32 arm: only the arithmetic differs */
		int r2 = r1 ? r1 : x4_trunk_create(&b, m, &o, &e);
		if (!r2)
			r2 = x4_trunk_forward(a, ids, NP, lx, false, &e) ||
			     x4_trunk_forward(b, ids, NP, ly, false, &e);
		double r_ar = r2 ? 1 : t_rel_err(lx, ly, V);
		double r_f32 = r2 ? 0 : t_rel_err(lx, l32 + (size_t)(NP - 1) * V, V);
		char nm[64];
		snprintf(nm, sizeof nm, "sublayer %s: f32 vs f64 arithmetic", sub_nm[k]);
		T_OK(!r2 && r_ar < sub_tol[k], nm, "rel err %.3g (tolerance %g)%s%s", r_ar,
		     sub_tol[k], r2 ? ": " : "", r2 ? e.msg : "");
		snprintf(nm, sizeof nm, "sublayer %s: applied", sub_nm[k]);
		T_OK(!r2 && r_f32 > 0, nm, "the logits equal the f32 input's");
		printf("# sublayer %s: vs f64 arithmetic %.3g, vs an f32 input %.3g\n", sub_nm[k],
		       r_ar, r_f32);
		x4_trunk_free(a);
		x4_trunk_free(b);
	}

	/* The decode attention's option (x4_trunk_opts.attn, --attn): the CPU
	 * has one attention and runs mma as fp32, the same bits, and says fp32
	 * in its statistics; a value out of the enum is refused; on a GPU the
	 * tensor-core kernel asked for by name takes the model's shape only,
	 * refused for tiny's (4 heads, kv_lora 64) before any device is
	 * opened, so on any machine. */
	{
		x4_trunk_opts o;
		x4_trunk_opts_default(&o);
		T_OK(o.attn == X4_ATTN_AUTO, "attn: auto by default", "default %d", o.attn);
		o.max_ctx = 128;
		o.threads = 2;
		x4_trunk *a = NULL, *b = NULL;
		int r = x4_trunk_create(&a, m, &o, &e);
		o.attn = X4_ATTN_MMA;
		if (!r)
			r = x4_trunk_create(&b, m, &o, &e);
		if (!r)
			r = x4_trunk_forward(a, ids, NP, lx, false, &e) ||
			    x4_trunk_forward(b, ids, NP, ly, false, &e);
		T_OK(!r && !memcmp(lx, ly, sizeof(float) * (size_t)V), "attn: mma on the CPU is its one attention",
		     "%s", r ? e.msg : "other logits");
		x4_trunk_stats st;
		T_OK(!r && !x4_trunk_get_stats(a, &st) && st.attn == X4_ATTN_FP32 &&
		     !x4_trunk_get_stats(b, &st) && st.attn == X4_ATTN_FP32,
		     "attn: the CPU's statistics say fp32 for auto and mma", "attn %d", st.attn);
		o.attn = 5;
		r = x4_trunk_configure(a, &o, &e);
		T_OK(r == X4_EINVAL && strstr(e.msg, "not one of fp32, mma, auto"), "attn: 5 refused",
		     "rc %d: %s", r, e.msg);
		o.attn = X4_ATTN_MMA;
		r = x4_trunk_configure(a, &o, &e);
		T_OK(!r && x4_trunk_get_opts(a)->attn == X4_ATTN_MMA, "attn: configured to mma on the CPU",
		     "rc %d: %s", r, e.msg);
		x4_trunk *g = NULL;
		o.device = 0;
		r = x4_trunk_create(&g, m, &o, &e);
		T_OK(r == X4_EINVAL && !g && strstr(e.msg, "--attn mma: the tensor-core attention takes "
						     "the model's shape: heads a multiple of 16"),
		     "attn: mma refused for tiny's shape on a GPU", "rc %d: %s", r, e.msg);
		x4_trunk_free(a);
		x4_trunk_free(b);
	}

	x4_trunk *trunks[] = { t64, t32, t1, t2, tf, ts, th, tb };
	for (size_t i = 0; i < sizeof trunks / sizeof trunks[0]; i++)
		x4_trunk_free(trunks[i]);
	free(l32);
	free(l64);
	free(lx);
	free(ly);
	x4_model_close(m);
}

int main(void)
{
	test_yarn();
	test_sinkhorn();
	test_hc_by_hand();
	test_dequant_row();
	test_router();
	test_sampler();
	test_model_trunk();
	return t_done();
}
