/*
 * gemv_quant.h - kernels/gemv_quant.cu (x4k_gemv, x4k_gemv2, x4k_gemv_swiglu:
 * the decode products of IQ4_NL, Q6_K and BF16 weights) against x4r_gemv
 * and x4r_gemm (lib/ref/ref_gemv.c), by the mag-relative rule (gpu_harness.h).
 * run_product serves gemm_quant.h too: one check for one token or many.
 */

/* a product of rows x cols (out x in) weights on t tokens */
struct pcase {
	int type, n, k, t;
	uint64_t seed;
};

/* x4k_gemm's core as the case text names it (x4k_gemm_mma_get: the tensor
 * cores where the device and the shape take them, else the FMA core) */
static const char *gemm_core(void)
{
	return !x4k_gemm_mma_get() ? "fma" : x4k_tc_copy_get() ? "mma" : "mma warp-copy";
}

/* mv: x4k_gemv (one token), else x4k_gemm (any number, one included) */
static void run_product_op(const char *label, struct pcase c, int check_tok, bool mv)
{
	const char *op = mv ? "gemv" : "gemm";
	char cas[200], name[64];
	/* IQ4_NL's gemv takes the tensor cores too where the switch and the
	 * shape allow (kernels/gemv_tc.cuh) */
	const bool named = !mv || c.type == X4_T_IQ4_NL;
	snprintf(cas, sizeof cas, "op %s type %s rows %d cols %d tokens %d seed %llu%s%s", op,
		 x4_type_name(c.type), c.n, c.k, c.t, (unsigned long long)c.seed,
		 named ? " core " : "", named ? gemm_core() : "");
	if (!t_want(op, cas))
		return;
	rng_seed(c.seed);
	size_t wb = x4_type_bytes(c.type, (uint64_t)c.n * c.k);
	uint8_t *w = hmalloc(wb);
	fill_weights(c.type, w, (size_t)c.n, c.k);
	float *x = hmalloc((size_t)c.t * c.k * 4);
	fill_x(x, (size_t)c.t * c.k);
	void *dw = dput(w, wb);
	float *dx = dput(x, (size_t)c.t * c.k * 4);
	float *dy = dalloc((size_t)c.t * c.n * 4);
	poison(dy, (size_t)c.t * c.n * 4);
	int rc = mv ? x4k_gemv(c.type, dw, c.n, c.k, dx, dy, st, &err)
			  : x4k_gemm(c.type, dw, c.n, c.k, c.t, dx, dy, st, &err);
	snprintf(name, sizeof name, "%s %s %s%s%s", op, x4_type_name(c.type), label, named ? " " : "",
		 named ? gemm_core() : "");
	if (!rc)
		rc = x4_cuda_check(cudaStreamSynchronize(st), "kernel", &err);
	if (rc) {
		T_OK(0, name, "%s: %s", cas, err.msg);
		goto out;
	}
	float *y = hmalloc((size_t)c.t * c.n * 4);
	dget(y, dy, (size_t)c.t * c.n * 4);
	{ /* a fixed reduction order: the same bits on a second run */
		const size_t yb = (size_t)c.t * c.n * 4;
		float *y2 = hmalloc(yb);
		poison(dy, yb);
		int rc2 = mv ? x4k_gemv(c.type, dw, c.n, c.k, dx, dy, st, &err)
				   : x4k_gemm(c.type, dw, c.n, c.k, c.t, dx, dy, st, &err);
		if (!rc2)
			dget(y2, dy, yb);
		char nm[96];
		snprintf(nm, sizeof nm, "%s bit-identical rerun", name);
		T_OK(!rc2 && !memcmp(y, y2, yb), nm, "%s: %s", cas, rc2 ? err.msg : "outputs differ");
		free(y2);
	}
	/* The reference on every token, or on check_tok of them (the first, the
	 * last, both sides of the 64-token tile edge, and some between) when
	 * the double loops would take too long; NaN is checked everywhere. */
	int nt = check_tok && check_tok < c.t ? check_tok : c.t;
	int *tok = hmalloc((size_t)nt * sizeof *tok);
	for (int i = 0; i < nt; i++)
		tok[i] = nt == c.t ? i : (int)((long long)i * (c.t - 1) / (nt - 1));
	if (nt != c.t && nt >= 4 && c.t > 65) {
		tok[1] = 63;
		tok[2] = 64;
	}
	float *xs = hmalloc((size_t)nt * c.k * 4), *ref = hmalloc((size_t)nt * c.n * 4);
	float *mag = hmalloc((size_t)nt * c.n * 4), *got = hmalloc((size_t)nt * c.n * 4);
	for (int i = 0; i < nt; i++) {
		memcpy(xs + (size_t)i * c.k, x + (size_t)tok[i] * c.k, (size_t)c.k * 4);
		memcpy(got + (size_t)i * c.n, y + (size_t)tok[i] * c.n, (size_t)c.n * 4);
	}
	if (x4r_gemm(c.type, w, c.n, c.k, nt, xs, ref, mag, &err)) {
		T_OK(0, name, "%s: reference: %s", cas, err.msg);
	} else {
		if (nt != c.t) {
			char nm[96];
			snprintf(nm, sizeof nm, "%s all written", name);
			check_written(nm, cas, y, (size_t)c.t * c.n);
		}
		compare(name, cas, got, ref, mag, (size_t)nt * c.n);
	}
	free(tok), free(xs), free(ref), free(mag), free(got), free(y);
out:
	x4_dev_free(dw), x4_dev_free(dx), x4_dev_free(dy);
	free(w), free(x);
}

static void run_product(const char *label, struct pcase c, int check_tok)
{
	run_product_op(label, c, check_tok, c.t == 1);
}

/* x4k_gemv2: two matrices sharing x in one launch.  Each output against
 * the reference (the rule of run_product), and bit for bit against
 * x4k_gemv on the same matrix: a row's sum runs in the same order. */
static void run_gemv2(int type, int n1, int n2, int k, uint64_t seed)
{
	char cas[200];
	snprintf(cas, sizeof cas, "op gemv2 type %s rows %d + %d cols %d seed %llu%s%s", x4_type_name(type),
		 n1, n2, k, (unsigned long long)seed, type == X4_T_IQ4_NL ? " core " : "",
		 type == X4_T_IQ4_NL ? gemm_core() : "");
	if (!t_want("gemv2", cas))
		return;
	rng_seed(seed);
	size_t b1 = x4_type_bytes(type, (uint64_t)n1 * k), b2 = x4_type_bytes(type, (uint64_t)n2 * k);
	uint8_t *w1 = hmalloc(b1), *w2 = hmalloc(b2);
	fill_weights(type, w1, (size_t)n1, k);
	fill_weights(type, w2, (size_t)n2, k);
	float *x = hmalloc((size_t)k * 4);
	fill_x(x, (size_t)k);
	void *dw1 = dput(w1, b1), *dw2 = dput(w2, b2);
	float *dx = dput(x, (size_t)k * 4);
	float *dy1 = dalloc((size_t)n1 * 4), *dy2 = dalloc((size_t)n2 * 4);
	float *dz1 = dalloc((size_t)n1 * 4), *dz2 = dalloc((size_t)n2 * 4);
	poison(dy1, (size_t)n1 * 4);
	poison(dy2, (size_t)n2 * 4);
	int rc = x4k_gemv2(type, dw1, n1, dy1, dw2, n2, dy2, k, dx, st, &err);
	if (!rc)
		rc = x4k_gemv(type, dw1, n1, k, dx, dz1, st, &err);
	if (!rc)
		rc = x4k_gemv(type, dw2, n2, k, dx, dz2, st, &err);
	if (!rc)
		rc = x4_cuda_check(cudaStreamSynchronize(st), "kernel", &err);
	if (rc) {
		T_OK(0, "gemv2", "%s: %s", cas, err.msg);
	} else {
		float *y1 = hmalloc((size_t)n1 * 4), *y2 = hmalloc((size_t)n2 * 4);
		float *z1 = hmalloc((size_t)n1 * 4), *z2 = hmalloc((size_t)n2 * 4);
		float *r1 = hmalloc((size_t)n1 * 4), *r2 = hmalloc((size_t)n2 * 4);
		float *m1 = hmalloc((size_t)n1 * 4), *m2 = hmalloc((size_t)n2 * 4);
		dget(y1, dy1, (size_t)n1 * 4);
		dget(y2, dy2, (size_t)n2 * 4);
		dget(z1, dz1, (size_t)n1 * 4);
		dget(z2, dz2, (size_t)n2 * 4);
		if (x4r_gemv(type, w1, n1, k, x, r1, m1, &err) || x4r_gemv(type, w2, n2, k, x, r2, m2, &err)) {
			T_OK(0, "gemv2", "%s: reference: %s", cas, err.msg);
		} else {
			char name[64];
			snprintf(name, sizeof name, "gemv2 %s first", x4_type_name(type));
			compare(name, cas, y1, r1, m1, (size_t)n1);
			snprintf(name, sizeof name, "gemv2 %s second", x4_type_name(type));
			compare(name, cas, y2, r2, m2, (size_t)n2);
			T_OK(!memcmp(y1, z1, (size_t)n1 * 4) && !memcmp(y2, z2, (size_t)n2 * 4),
			     "gemv2 = two gemv, bit for bit", "%s", cas);
		}
		free(y1), free(y2), free(z1), free(z2), free(r1), free(r2), free(m1), free(m2);
	}
	x4_dev_free(dw1), x4_dev_free(dw2), x4_dev_free(dx), x4_dev_free(dy1), x4_dev_free(dy2);
	x4_dev_free(dz1), x4_dev_free(dz2);
	free(w1), free(w2), free(x);
}

/* x4k_gemv_swiglu: h = silu(W_gate x) * (W_up x).  The same bits when run
 * twice (its sums have a fixed order: a row's groups in group order; for
 * IQ4_NL that order is the register core's, not the plain gemv's staged
 * chunks, so it is not bit for bit the two x4k_gemv), and against the
 * reference: the gate's and up's errors
 * (TOL * their mag) carried through silu (|silu'| <= 1.1) and the product,
 * plus the product's own rounding (8 ulps of |h|, as test_swiglu). */
static void run_gemv_swiglu(int type, int n, int k, uint64_t seed)
{
	char cas[200];
	snprintf(cas, sizeof cas, "op gemv_swiglu type %s rows %d cols %d seed %llu core %s",
		 x4_type_name(type), n, k, (unsigned long long)seed, gemm_core());
	if (!t_want("gemv_swiglu", cas))
		return;
	rng_seed(seed);
	size_t wb = x4_type_bytes(type, (uint64_t)n * k);
	uint8_t *wg = hmalloc(wb), *wu = hmalloc(wb);
	fill_weights(type, wg, (size_t)n, k);
	fill_weights(type, wu, (size_t)n, k);
	float *x = hmalloc((size_t)k * 4);
	fill_x(x, (size_t)k);
	void *dwg = dput(wg, wb), *dwu = dput(wu, wb);
	float *dx = dput(x, (size_t)k * 4);
	float *dg = dalloc((size_t)n * 4), *du = dalloc((size_t)n * 4), *dh = dalloc((size_t)n * 4);
	float *dh2 = dalloc((size_t)n * 4);
	poison(dh, (size_t)n * 4);
	poison(dh2, (size_t)n * 4);
	int rc = x4k_gemv_swiglu(type, dwg, dwu, n, k, dx, dg, du, dh, st, &err);
	if (!rc)
		rc = x4k_gemv_swiglu(type, dwg, dwu, n, k, dx, dg, du, dh2, st, &err);
	if (!rc)
		rc = x4_cuda_check(cudaStreamSynchronize(st), "kernel", &err);
	if (rc) {
		T_OK(0, "gemv_swiglu", "%s: %s", cas, err.msg);
	} else {
		float *h = hmalloc((size_t)n * 4), *h2 = hmalloc((size_t)n * 4);
		float *rg = hmalloc((size_t)n * 4), *ru = hmalloc((size_t)n * 4);
		float *mg = hmalloc((size_t)n * 4), *mu = hmalloc((size_t)n * 4);
		float *rh = hmalloc((size_t)n * 4), *mh = hmalloc((size_t)n * 4);
		dget(h, dh, (size_t)n * 4);
		dget(h2, dh2, (size_t)n * 4);
		T_OK(!memcmp(h, h2, (size_t)n * 4), "gemv_swiglu: the same bits twice", "%s", cas);
		if (x4r_gemv(type, wg, n, k, x, rg, mg, &err) || x4r_gemv(type, wu, n, k, x, ru, mu, &err)) {
			T_OK(0, "gemv_swiglu", "%s: reference: %s", cas, err.msg);
		} else {
			for (int i = 0; i < n; i++) {
				double g = rg[i], sg = g / (1.0 + exp(-g));
				rh[i] = (float)(sg * ru[i]);
				mh[i] = (float)(1.1 * mg[i] * fabs(ru[i]) + fabs(sg) * mu[i] +
						fabs(sg * ru[i]) * (8 * 0x1p-24 / TOL));
			}
			char name[64];
			snprintf(name, sizeof name, "gemv_swiglu %s %s", x4_type_name(type), gemm_core());
			compare(name, cas, h, rh, mh, (size_t)n);
		}
		free(h), free(h2), free(rg), free(ru), free(mg), free(mu), free(rh), free(mh);
	}
	x4_dev_free(dwg), x4_dev_free(dwu), x4_dev_free(dx), x4_dev_free(dg), x4_dev_free(du);
	x4_dev_free(dh), x4_dev_free(dh2);
	free(wg), free(wu), free(x);
}

/* The Q6_K product at 2 and 4 rows a warp (x4k_q6k_rows_set) bit for bit
 * as at 1 (a warp a row), and on the tensor cores with two tiles in flight
 * a block and one (x4k_q6k_tc_set) bit for bit each other, each against the
 * reference by run_product's rule.  w is placed off bytes past a 16-byte boundary (4-byte aligned, as
 * the kernel takes it), so that a warp's span of rows starts and ends
 * ragged in every way. */
static void run_q6k_rows(int n, int k, int off, uint64_t seed)
{
	char cas[200];
	snprintf(cas, sizeof cas, "op gemv_q6k_rows type Q6_K rows %d cols %d offset %d seed %llu", n, k,
		 off, (unsigned long long)seed);
	if (!t_want("gemv_q6k_rows", cas))
		return;
	rng_seed(seed);
	size_t wb = x4_type_bytes(X4_T_Q6_K, (uint64_t)n * k), yb = (size_t)n * 4;
	uint8_t *w = hmalloc(wb);
	fill_weights(X4_T_Q6_K, w, (size_t)n, k);
	float *x = hmalloc((size_t)k * 4);
	fill_x(x, (size_t)k);
	uint8_t *dw = dalloc(wb + 16);
	if (x4_dev_upload(dw + off, w, wb, "upload", &err))
		die_cuda("upload");
	float *dx = dput(x, (size_t)k * 4), *dy = dalloc(yb);
	float *y[3], *ref = hmalloc(yb), *mag = hmalloc(yb);
	const int was = x4k_q6k_rows_get();
	int rc = 0;
	x4k_q6k_tc_set(-1); /* the rows forms */
	for (int i = 0; i < 3; i++) {
		y[i] = hmalloc(yb);
		x4k_q6k_rows_set(1 << i);
		poison(dy, yb);
		if (!rc && !(rc = x4k_gemv(X4_T_Q6_K, dw + off, n, k, dx, dy, st, &err)))
			dget(y[i], dy, yb);
	}
	x4k_q6k_rows_set(was);
	/* the tensor-core form with two tiles in flight a block and with one:
	 * the same bits (where the shape is not its own, the rows form) */
	float *yt[2];
	for (int i = 0; i < 2; i++) {
		yt[i] = hmalloc(yb);
		x4k_q6k_tc_set(2 - i);
		poison(dy, yb);
		if (!rc && !(rc = x4k_gemv(X4_T_Q6_K, dw + off, n, k, dx, dy, st, &err)))
			dget(yt[i], dy, yb);
	}
	x4k_q6k_tc_set(0);
	if (rc) {
		T_OK(0, "gemv_q6k_rows", "%s: %s", cas, err.msg);
	} else if (x4r_gemv(X4_T_Q6_K, w, n, k, x, ref, mag, &err)) {
		T_OK(0, "gemv_q6k_rows", "%s: reference: %s", cas, err.msg);
	} else {
		for (int i = 0; i < 3; i++) {
			char name[64];
			snprintf(name, sizeof name, "gemv_q6k_rows %d a warp", 1 << i);
			compare(name, cas, y[i], ref, mag, (size_t)n);
			if (i) {
				size_t d = 0;
				while (d < (size_t)n && !memcmp(&y[i][d], &y[0][d], 4))
					d++;
				snprintf(name, sizeof name, "gemv_q6k_rows %d a warp = 1, bit for bit", 1 << i);
				T_OK(d == (size_t)n, name, "%s: row %zu: %a against %a", cas, d,
				     d < (size_t)n ? y[i][d] : 0.f, d < (size_t)n ? y[0][d] : 0.f);
			}
		}
		compare("gemv_q6k tensor cores", cas, yt[0], ref, mag, (size_t)n);
		size_t d = 0;
		while (d < (size_t)n && !memcmp(&yt[1][d], &yt[0][d], 4))
			d++;
		T_OK(d == (size_t)n, "gemv_q6k tensor cores, 1 in flight = 2, bit for bit", "%s: row %zu", cas, d);
	}
	for (int i = 0; i < 3; i++)
		free(y[i]);
	free(yt[0]), free(yt[1]);
	x4_dev_free(dw), x4_dev_free(dx), x4_dev_free(dy);
	free(w), free(x), free(ref), free(mag);
}

/* tiny odd sizes: ragged 16-byte lines, a tail chunk, odd BF16 widths */
static const struct pcase gemv_tiny[] = {
	{ X4_T_IQ4_NL, 7, 96, 1, 1000 }, { X4_T_IQ4_NL, 7, 1184, 1, 1001 },
	{ X4_T_Q6_K, 7, 256, 1, 1004 }, { X4_T_Q6_K, 7, 1280, 1, 1005 },
	{ X4_T_BF16, 7, 13, 1, 1008 }, { X4_T_BF16, 7, 1031, 1, 1009 },
	/* the BF16 split-K path (k % 8 == 0): a partial unit, a ragged
	 * last unit over 4 and 8 warps, partial row groups at R 1 and 4 */
	{ X4_T_BF16, 7, 200, 1, 1012 }, { X4_T_BF16, 13, 1032, 1, 1013 },
	{ X4_T_BF16, 37, 2312, 1, 1014 }, { X4_T_BF16, 1000, 776, 1, 1015 },
	{ X4_T_BF16, 2111, 96, 1, 1016 }, { X4_T_BF16, 1061, 2048, 1, 1017 },
	/* the IQ4_NL register path (k % 256 == 0): one group a row, 3 and
	 * 9 groups with a partial last block of rows, and 128 groups (one
	 * row set a block) at R 2 with a partial pair */
	{ X4_T_IQ4_NL, 7, 256, 1, 1018 }, { X4_T_IQ4_NL, 37, 768, 1, 1019 },
	{ X4_T_IQ4_NL, 300, 2304, 1, 1020 }, { X4_T_IQ4_NL, 531, 32768, 1, 1021 },
	/* the Q6_K whole-row path (an even number of blocks a row, k <=
	 * 4096): 2, 6 and 16 blocks, partial blocks of rows */
	{ X4_T_Q6_K, 7, 512, 1, 1022 }, { X4_T_Q6_K, 37, 1536, 1, 1023 },
	{ X4_T_Q6_K, 9, 4096, 1, 1024 },
	/* the IQ4_NL tensor cores (kernels/gemv_tc.cuh: rows in sixteens, k in
	 * 256-value ranges over at most 20 warps, else 512-value ones): the
	 * smallest, 20 warps of 256, 20 of 512, and one past both (21 x 512:
	 * the register core) */
	{ X4_T_IQ4_NL, 16, 256, 1, 1025 }, { X4_T_IQ4_NL, 48, 5120, 1, 1026 },
	{ X4_T_IQ4_NL, 16, 10240, 1, 1027 }, { X4_T_IQ4_NL, 32, 10752, 1, 1028 },
};

/* the model's sizes (rows x cols = out x in); gemm_quant.h takes them to 67
 * tokens (5 for Q6_K) with seed + 1000 */
static const struct pcase gemv_model[] = {
	{ X4_T_IQ4_NL, 1024, 3584, 1, 2000 }, { X4_T_IQ4_NL, 3584, 1024, 1, 2001 },
	{ X4_T_IQ4_NL, 9216, 3584, 1, 2002 }, { X4_T_IQ4_NL, 3584, 9216, 1, 2003 },
	{ X4_T_BF16, 768, 3584, 1, 2004 }, { X4_T_BF16, 6144, 768, 1, 2005 },
	{ X4_T_BF16, 576, 3584, 1, 2006 }, { X4_T_BF16, 3584, 4096, 1, 2007 },
	{ X4_T_BF16, 16384, 128, 1, 2008 }, { X4_T_BF16, 4096, 512, 1, 2009 },
	{ X4_T_Q6_K, 131072, 3584, 1, 2010 },
};

/* the largest (gemm_quant.h's are 4000-4003) */
static const struct pcase gemv_big[] = {
	{ X4_T_BF16, 16384, 9216, 1, 4004 }, /* the BF16 gemv past the model: 3 load batches a warp */
	{ X4_T_IQ4_NL, 131072, 3584, 1, 4005 }, /* the IQ4_NL gemv at the head's shape, R 2 */
};

/* The IQ4_NL products on one core (x4k_gemm_mma_set: the tensor cores
 * where the device and the shape take them, else the register core). */
static void test_gemv_iq4(void)
{
	for (size_t i = 0; i < X4_ARRAY_LEN(gemv_tiny); i++)
		if (gemv_tiny[i].type == X4_T_IQ4_NL)
			run_product("tiny", gemv_tiny[i], 0);
	for (size_t i = 0; i < X4_ARRAY_LEN(gemv_model); i++)
		if (gemv_model[i].type == X4_T_IQ4_NL)
			run_product("model", gemv_model[i], 0);
	for (size_t i = 0; i < X4_ARRAY_LEN(gemv_big); i++)
		if (gemv_big[i].type == X4_T_IQ4_NL)
			run_product("largest", gemv_big[i], 8);
	run_gemv2(X4_T_IQ4_NL, 1024, 1024, 3584, 5006);
	/* gate, up and SwiGLU in one launch: tiny (one and three groups; 16
	 * rows, the tensor cores' smallest), the shared expert's and the dense
	 * FFN's shapes, and the fallbacks */
	run_gemv_swiglu(X4_T_IQ4_NL, 7, 256, 6001);
	run_gemv_swiglu(X4_T_IQ4_NL, 37, 768, 6002);
	run_gemv_swiglu(X4_T_IQ4_NL, 16, 256, 6007);
	run_gemv_swiglu(X4_T_IQ4_NL, 1024, 3584, 6003);
	run_gemv_swiglu(X4_T_IQ4_NL, 9216, 3584, 6004);
	run_gemv_swiglu(X4_T_IQ4_NL, 16, 10240, 6008); /* 20 warps of 512 */
	run_gemv_swiglu(X4_T_IQ4_NL, 7, 96, 6005); /* k % 256: three launches */
}

static void test_gemv(void)
{
	for (size_t i = 0; i < X4_ARRAY_LEN(gemv_tiny); i++)
		if (gemv_tiny[i].type != X4_T_IQ4_NL)
			run_product("tiny", gemv_tiny[i], 0);
	for (size_t i = 0; i < X4_ARRAY_LEN(gemv_model); i++)
		if (gemv_model[i].type != X4_T_IQ4_NL)
			run_product("model", gemv_model[i], 0);
	for (size_t i = 0; i < X4_ARRAY_LEN(gemv_big); i++)
		if (gemv_big[i].type != X4_T_IQ4_NL)
			run_product("largest", gemv_big[i], 8);
	const int was = x4k_gemm_mma_get();
	x4k_gemm_mma_set(1);
	test_gemv_iq4();
	x4k_tc_copy_set(0); /* the tensor cores with each warp copying its own slice */
	test_gemv_iq4();
	x4k_tc_copy_set(1);
	x4k_gemm_mma_set(0);
	test_gemv_iq4();
	x4k_gemm_mma_set(was);

	/* two matrices, one launch: tiny odd (rows straddling the seam inside
	 * a row group), the model's q_a + kv_a, the largest (q_b's and the
	 * output's row counts over 4096 columns); IQ4_NL takes two launches */
	run_gemv2(X4_T_BF16, 7, 5, 200, 5001);
	run_gemv2(X4_T_BF16, 1061, 3, 2048, 5002);
	run_gemv2(X4_T_BF16, 768, 576, 3584, 5003);
	run_gemv2(X4_T_BF16, 6144, 3584, 4096, 5004);
	run_gemv2(X4_T_BF16, 5, 3, 13, 5005); /* odd k: the staged kernel, two launches */
	run_gemv_swiglu(X4_T_BF16, 7, 200, 6006);

	/* the head's Q6_K product at 1, 2 and 4 rows a warp: fewer rows than a
	 * warp takes, rows in no whole warp nor block (13, 37, 1061), k = 256
	 * (one block a row: the staged kernel, whatever the setting), 512 and
	 * 1536, the head's 131072 x 3584, and the largest k (Q6_KMAX), each w
	 * 16-byte aligned and 4 and 12 bytes past */
	run_q6k_rows(1, 512, 0, 7001);
	run_q6k_rows(3, 512, 4, 7002);
	run_q6k_rows(13, 256, 0, 7003);
	run_q6k_rows(37, 512, 12, 7004);
	run_q6k_rows(37, 1536, 4, 7005);
	run_q6k_rows(1061, 3584, 0, 7006);
	run_q6k_rows(1061, 3584, 12, 7007);
	run_q6k_rows(131072, 3584, 0, 7008);
	run_q6k_rows(37, 4096, 4, 7009);
	run_q6k_rows(2053, 4096, 12, 7010);
	run_q6k_rows(2053, 4096, 0, 7011); /* the tensor cores' 8 warps, a part tile */
	run_q6k_rows(16, 512, 0, 7012);   /* one tile */
}
