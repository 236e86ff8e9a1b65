/*
 * gpu_kern_core_cases.h - the cases of tests/gpu_kern_core.c, one function
 * an operation (included once, by that file only: it uses its helpers).
 */

/* ---------------- embedding ---------------- */

static void embed_case(int n_vocab, int D, int n_hc, int n_tok, uint64_t sd, bool time)
{
	char shape[128];
	snprintf(shape, sizeof shape, "vocab %d D %d n_hc %d tokens %d", n_vocab, D, n_hc, n_tok);
	seed(sd);
	uint16_t *emb = bvec((size_t)n_vocab * D, 1.f);
	int32_t *ids = hmalloc(sizeof *ids * (size_t)n_tok);
	for (int t = 0; t < n_tok; t++)
		ids[t] = (int32_t)(urand() * n_vocab);
	ids[n_tok - 1] = n_vocab - 1;
	size_t nh = (size_t)n_tok * n_hc * D;
	float *ref = hmalloc(nh * sizeof *ref), *got = hmalloc(nh * sizeof *got);
	x4r_embed(emb, n_vocab, D, n_hc, ids, n_tok, ref);
	void *demb = dput(emb, (size_t)n_vocab * D * 2), *dids = dput(ids, sizeof *ids * n_tok);
	float *dH = dpoison(nh * sizeof(float));
	int rc = x4k_embed(demb, n_vocab, D, n_hc, dids, n_tok, dH, st, &err);
	dget(got, dH, nh * sizeof *got);
	T_OK(rc == 0, "embed launch", "%s: %s", shape, err.msg);
	/* exact: a BF16 value widens to fp32 without rounding */
	check("embed", shape, got, ref, NULL, nh, 0, 0, ELEM);
	if (time)
		TIME("embed (1 token, D 3584, 4 streams)",
		     x4k_embed(demb, n_vocab, D, n_hc, dids, 1, dH, st, &err));
	/* an id outside the vocabulary: a NaN row, no stray read */
	ids[0] = n_vocab;
	x4_dev_upload(dids, ids, sizeof *ids, "ids", &err);
	x4k_embed(demb, n_vocab, D, n_hc, dids, 1, dH, st, &err);
	dget(got, dH, sizeof(float) * (size_t)n_hc * D);
	bool nan_row = true;
	for (int i = 0; i < n_hc * D; i++)
		nan_row = nan_row && isnan(got[i]);
	T_OK(nan_row, "embed bad id", "%s: id %d did not give a NaN row", shape, n_vocab);
	x4_dev_free(demb);
	x4_dev_free(dids);
	x4_dev_free(dH);
	free(emb);
	free(ids);
	free(ref);
	free(got);
}

static void test_embed(void)
{
	embed_case(37, 96, 4, 5, 11, false);
	embed_case(4096, full.n_embd, full.n_hc, 7, 12, true);
}

/* ---------------- RMSNorm and the head ---------------- */

static void norm_case(int n_tok, int n, int ld, bool gain, uint64_t sd, bool time)
{
	char shape[128];
	snprintf(shape, sizeof shape, "rows %d n %d ld %d gain %d", n_tok, n, ld, gain);
	seed(sd);
	float *x = fvec((size_t)n_tok * ld, -3, 3), *g = fvec((size_t)n, 0.5f, 1.5f);
	size_t ny = (size_t)n_tok * ld;
	float *ref = hmalloc(ny * 4), *got = hmalloc(ny * 4);
	for (size_t i = 0; i < ny; i++)
		ref[i] = NAN;
	x4r_rmsnorm(n_tok, n, x, ld, gain ? g : NULL, 1e-6f, ref, ld);
	float *dx = dput(x, ny * 4), *dg = dput(g, (size_t)n * 4), *dy = dpoison(ny * 4);
	int rc = x4k_rmsnorm(n_tok, n, dx, ld, gain ? dg : NULL, 1e-6f, dy, ld, st, &err);
	dget(got, dy, ny * 4);
	T_OK(rc == 0, "rmsnorm launch", "%s: %s", shape, err.msg);
	/* compare the n columns of each row (the ld padding stays unwritten) */
	float *gc = hmalloc((size_t)n_tok * n * 4), *rc_ = hmalloc((size_t)n_tok * n * 4);
	for (int t = 0; t < n_tok; t++)
		for (int i = 0; i < n; i++) {
			gc[(size_t)t * n + i] = got[(size_t)t * ld + i];
			rc_[(size_t)t * n + i] = ref[(size_t)t * ld + i];
		}
	/* fp32: a sum of squares and three roundings per element: 1e-5 relative */
	check("rmsnorm", shape, gc, rc_, NULL, (size_t)n_tok * n, 1e-5, 1e-30, ELEM);
	bool pad = true;
	for (int t = 0; t < n_tok; t++)
		for (int i = n; i < ld; i++)
			pad = pad && isnan(got[(size_t)t * ld + i]);
	T_OK(pad, "rmsnorm stays in its row", "%s: wrote past n", shape);
	{ /* a fixed reduction order: the same bits again */
		float *again = hmalloc(ny * 4);
		repoison(dy, ny * 4);
		int rc2 = x4k_rmsnorm(n_tok, n, dx, ld, gain ? dg : NULL, 1e-6f, dy, ld, st, &err);
		dget(again, dy, ny * 4);
		T_OK(rc2 == 0 && !memcmp(again, got, ny * 4), "rmsnorm twice",
		     "%s: a second call gave other bits", shape);
		free(again);
	}
	if (time)
		TIME("rmsnorm (1 row of 3584)",
		     x4k_rmsnorm(1, n, dx, ld, dg, 1e-6f, dy, ld, st, &err));
	x4_dev_free(dx);
	x4_dev_free(dg);
	x4_dev_free(dy);
	free(x);
	free(g);
	free(ref);
	free(got);
	free(gc);
	free(rc_);
}

/* y = x: every value is read before any is written. */
static void norm_inplace_case(int n_tok, int n, uint64_t sd)
{
	char shape[128];
	snprintf(shape, sizeof shape, "rows %d n %d in place", n_tok, n);
	seed(sd);
	size_t ny = (size_t)n_tok * n;
	float *x = fvec(ny, -3, 3), *g = fvec((size_t)n, 0.5f, 1.5f);
	float *ref = hmalloc(ny * 4), *got = hmalloc(ny * 4);
	x4r_rmsnorm(n_tok, n, x, n, g, 1e-6f, ref, n);
	float *dx = dput(x, ny * 4), *dg = dput(g, (size_t)n * 4);
	int rc = x4k_rmsnorm(n_tok, n, dx, n, dg, 1e-6f, dx, n, st, &err);
	dget(got, dx, ny * 4);
	T_OK(rc == 0, "rmsnorm in place launch", "%s: %s", shape, err.msg);
	/* fp32, as norm_case: 1e-5 relative */
	check("rmsnorm in place", shape, got, ref, NULL, ny, 1e-5, 1e-30, ELEM);
	x4_dev_free(dx);
	x4_dev_free(dg);
	free(x);
	free(g);
	free(ref);
	free(got);
}

static void head_case(int n_tok, int n_hc, int D, uint64_t sd, bool time)
{
	char shape[128];
	snprintf(shape, sizeof shape, "tokens %d n_hc %d D %d", n_tok, n_hc, D);
	seed(sd);
	size_t nh = (size_t)n_tok * n_hc * D, ny = (size_t)n_tok * D;
	float *H = fvec(nh, -40, 40), *g = fvec((size_t)D, 0.5f, 1.5f);
	float *ref = hmalloc(ny * 4), *got = hmalloc(ny * 4);
	x4r_head(n_tok, n_hc, D, H, g, 1e-6f, ref);
	float *dH = dput(H, nh * 4), *dg = dput(g, (size_t)D * 4), *dy = dpoison(ny * 4);
	int rc = x4k_head(n_tok, n_hc, D, dH, dg, 1e-6f, dy, st, &err);
	dget(got, dy, ny * 4);
	T_OK(rc == 0, "head launch", "%s: %s", shape, err.msg);
	/* fp32, normwise: the stream mean can cancel, so an element's error is
	 * measured against the row's largest value; 1e-5 */
	for (int t = 0; t < n_tok; t++)
		check("head", shape, got + (size_t)t * D, ref + (size_t)t * D, NULL, (size_t)D, 1e-5,
		      0, NORMWISE);
	if (time)
		TIME("head: stream mean + output norm (1 token)",
		     x4k_head(1, n_hc, D, dH, dg, 1e-6f, dy, st, &err));
	x4_dev_free(dH);
	x4_dev_free(dg);
	x4_dev_free(dy);
	free(H);
	free(g);
	free(ref);
	free(got);
}

static void test_norms(void)
{
	norm_case(5, 97, 100, true, 21, false);
	norm_case(3, 96, 96, false, 22, false);
	norm_case(1, full.n_embd, full.n_embd, true, 23, true);
	norm_case(64, full.n_embd, full.n_embd, true, 24, false);
	norm_case(8, full.q_lora, full.q_lora, true, 25, false);
	norm_case(2, 16384, 16384, true, 26, false); /* the widest row held in registers */
	norm_case(3, 5001, 5003, true, 27, false);   /* scalar loads, two a thread */
	norm_case(2, 16388, 16388, true, 28, false); /* past the registers: the plain loop */
	norm_inplace_case(1, full.q_lora, 29);        /* y = x, as the trunk's c_q norm */
	norm_inplace_case(3, 97, 30);
	head_case(3, 4, 95, 31, false);
	head_case(1, full.n_hc, full.n_embd, 32, true);
	head_case(16, full.n_hc, full.n_embd, 33, false);
}

/* ---------------- hyper-connection ---------------- */

struct hc_data {
	x4k_hc_cfg c;
	int n_tok, nc;
	size_t K;
	float *H, *y, *cp, *base, *scale;
	uint16_t *fn;
};

static void hc_make(struct hc_data *d, int n_hc, int D, int n_tok, float comb_scale, uint64_t sd)
{
	seed(sd);
	d->c = (x4k_hc_cfg){ n_hc, D, 20, 1e-6f, 1e-6f, -30.f, 30.f };
	d->n_tok = n_tok;
	d->nc = X4K_HC_NCOEF(n_hc);
	d->K = (size_t)n_hc * D;
	d->H = hmalloc(sizeof(float) * d->K * n_tok);
	for (int t = 0; t < n_tok; t++) /* streams of different sizes, like a real residual */
		for (int s = 0; s < n_hc; s++)
			for (int i = 0; i < D; i++)
				d->H[(size_t)t * d->K + (size_t)s * D + i] = frand(-2, 2) * (1.f + s);
	d->y = fvec((size_t)n_tok * D, -3, 3);
	/* the previous sublayer's coefficients: pre/post in range, a comb whose
	 * columns sum to about 1 and that is not symmetric */
	d->cp = hmalloc(sizeof(float) * d->nc * n_tok);
	for (int t = 0; t < n_tok; t++) {
		float *cf = d->cp + (size_t)t * d->nc;
		for (int s = 0; s < n_hc; s++)
			cf[s] = frand(0.1f, 0.9f), cf[n_hc + s] = frand(0.2f, 1.8f);
		for (int a = 0; a < n_hc; a++)
			for (int b = 0; b < n_hc; b++)
				cf[2 * n_hc + a * n_hc + b] = (a == b ? 0.5f : 0.5f / n_hc) + 0.1f * a - 0.03f * b;
	}
	/* |W| ~ 2 sqrt(3/K) so that m is O(1) after the RMS */
	d->fn = bvec((size_t)d->nc * d->K, 2.f * sqrtf(3.f / (float)d->K));
	d->base = fvec((size_t)d->nc, -1, 1);
	d->scale = hmalloc(3 * sizeof(float));
	d->scale[0] = 0.8f;
	d->scale[1] = 0.9f;
	d->scale[2] = comb_scale;
	if (comb_scale < 0) { /* comb logits past +-30 on a third of the entries each way */
		d->scale[2] = 1.5f;
		for (int k = 0; k < n_hc * n_hc; k++)
			d->base[2 * n_hc + k] = k % 3 == 0 ? 34.f : k % 3 == 1 ? -34.f : d->base[2 * n_hc + k];
	}
}

static void hc_free(struct hc_data *d)
{
	free(d->H);
	free(d->y);
	free(d->cp);
	free(d->fn);
	free(d->base);
	free(d->scale);
}

/* One shape: the fused and eager paths, with and without the fused update,
 * against the reference and against each other; two fused calls give the
 * same bits (the split's counter is reset). */
static void hc_case(int n_hc, int D, int n_tok, float comb_scale, uint64_t sd, bool time)
{
	struct hc_data d;
	hc_make(&d, n_hc, D, n_tok, comb_scale, sd);
	int nc = d.nc;
	size_t K = d.K, nH = K * n_tok, nx = (size_t)D * n_tok, ncf = (size_t)nc * n_tok;
	float *dH = dput(d.H, nH * 4), *dy = dput(d.y, nx * 4), *dcp = dput(d.cp, ncf * 4);
	void *dfn = dput(d.fn, (size_t)nc * K * 2);
	float *dbase = dput(d.base, (size_t)nc * 4), *dscale = dput(d.scale, 12);
	float *dHo = dpoison(nH * 4), *dx = dpoison(nx * 4), *dcf = dpoison(ncf * 4);
	size_t wsb = x4k_hc_workspace_bytes(&d.c, n_tok);
	void *ws = dpoison(wsb);
	cudaMemset(ws, 0, wsb); /* zeroed once, as the header asks */
	float *rx = hmalloc(nx * 4), *rcf = hmalloc(ncf * 4), *rHo = hmalloc(nH * 4);
	float *xmag = hmalloc(nx * 4), *hmag = hmalloc(nH * 4);
	float *gx[2][2], *gcf[2][2], *gHo = hmalloc(nH * 4);

	for (int upd = 0; upd < 2; upd++) {
		x4r_hc_pre(&d.c, n_tok, d.H, d.fn, d.base, d.scale, upd ? d.y : NULL,
			   upd ? d.cp : NULL, rHo, rx, rcf, xmag);
		if (upd) /* the update's error scale: |post y| + sum_s |C H| */
			for (int t = 0; t < n_tok; t++)
				for (int a = 0; a < n_hc; a++)
					for (int i = 0; i < D; i++) {
						const float *cf = d.cp + (size_t)t * nc;
						double m = fabs(cf[n_hc + a] * d.y[(size_t)t * D + i]);
						for (int b = 0; b < n_hc; b++)
							m += fabs(cf[2 * n_hc + a * n_hc + b] *
								  d.H[(size_t)t * K + (size_t)b * D + i]);
						hmag[(size_t)t * K + (size_t)a * D + i] = (float)m;
					}
		for (int eager = 0; eager < 2; eager++) {
			char shape[160];
			snprintf(shape, sizeof shape, "n_hc %d D %d tokens %d comb-scale %g %s%s", n_hc,
				 D, n_tok, comb_scale, eager ? "eager" : "fused",
				 upd ? " +update" : "");
			repoison(dHo, nH * 4);
			repoison(dx, nx * 4);
			repoison(dcf, ncf * 4);
			int rc = x4k_hc_pre(&d.c, n_tok, dH, dfn, dbase, dscale, upd ? dy : NULL,
					    upd ? dcp : NULL, dHo, dx, dcf, eager, ws, wsb, st, &err);
			T_OK(rc == 0, "hc_pre launch", "%s: %s", shape, err.msg);
			gx[upd][eager] = hmalloc(nx * 4);
			gcf[upd][eager] = hmalloc(ncf * 4);
			dget(gx[upd][eager], dx, nx * 4);
			dget(gcf[upd][eager], dcf, ncf * 4);
			/* fp32 (docs/numerics.md 4: 1e-5).  Coefficients: pre and comb lie in
			 * [0, 1] with sums near 1, post in (0, 2): error against
			 * max(1, |r|).  Collapse: against sum_s |pre h|. */
			float *one = hmalloc(ncf * 4);
			for (size_t i = 0; i < ncf; i++)
				one[i] = fabsf(rcf[i]) > 1 ? fabsf(rcf[i]) : 1;
			check("hc coef", shape, gcf[upd][eager], rcf, one, ncf, 1e-5, 0, ELEM);
			free(one);
			check("hc collapse", shape, gx[upd][eager], rx, xmag, nx, 1e-5, 1e-30, ELEM);
			if (upd) {
				dget(gHo, dHo, nH * 4);
				check("hc fused update", shape, gHo, rHo, hmag, nH, 1e-5, 1e-30, ELEM);
			}
			if (!eager) { /* again: the same bits, and the counter was reset */
				float *x2 = hmalloc(nx * 4), *c2 = hmalloc(ncf * 4);
				repoison(dx, nx * 4);
				repoison(dcf, ncf * 4);
				x4k_hc_pre(&d.c, n_tok, dH, dfn, dbase, dscale, upd ? dy : NULL,
					   upd ? dcp : NULL, dHo, dx, dcf, false, ws, wsb, st, &err);
				dget(x2, dx, nx * 4);
				dget(c2, dcf, ncf * 4);
				T_OK(!memcmp(x2, gx[upd][0], nx * 4) && !memcmp(c2, gcf[upd][0], ncf * 4),
				     "hc fused twice", "%s: a second call gave other bits", shape);
				free(x2);
				free(c2);
			}
		}
		char shape[160];
		snprintf(shape, sizeof shape, "n_hc %d D %d tokens %d %s fused vs eager", n_hc, D,
			 n_tok, upd ? "+update" : "");
		float *one = hmalloc(ncf * 4);
		for (size_t i = 0; i < ncf; i++)
			one[i] = 1;
		/* the two paths differ only in the projection's summation order */
		check("hc fused=eager coef", shape, gcf[upd][0], gcf[upd][1], one, ncf, 1e-5, 0, ELEM);
		check("hc fused=eager collapse", shape, gx[upd][0], gx[upd][1], xmag, nx, 1e-5, 1e-30,
		      ELEM);
		free(one);
	}

	/* the standalone stream update (docs/forward.md 5.2 A4/F4) */
	{
		char shape[128];
		snprintf(shape, sizeof shape, "n_hc %d D %d tokens %d", n_hc, D, n_tok);
		x4r_hc_post(&d.c, n_tok, d.cp, d.y, d.H, rHo);
		repoison(dHo, nH * 4);
		int rc = x4k_hc_post(&d.c, n_tok, dcp, dy, dH, dHo, st, &err);
		T_OK(rc == 0, "hc_post launch", "%s: %s", shape, err.msg);
		dget(gHo, dHo, nH * 4);
		check("hc_post", shape, gHo, rHo, hmag, nH, 1e-5, 1e-30, ELEM);
	}

	if (time) {
		TIME("hc gate fused (1 token, +update)",
		     x4k_hc_pre(&d.c, 1, dH, dfn, dbase, dscale, dy, dcp, dHo, dx, dcf, false, ws,
				wsb, st, &err));
		TIME("hc gate fused (1 token)",
		     x4k_hc_pre(&d.c, 1, dH, dfn, dbase, dscale, NULL, NULL, dHo, dx, dcf, false, ws,
				wsb, st, &err));
		TIME("hc gate eager (1 token, +update, 5 launches)",
		     x4k_hc_pre(&d.c, 1, dH, dfn, dbase, dscale, dy, dcp, dHo, dx, dcf, true, ws,
				wsb, st, &err));
		TIME("hc stream update alone (1 token)",
		     x4k_hc_post(&d.c, 1, dcp, dy, dH, dHo, st, &err));
		if (n_tok >= 64)
			TIME("hc gate fused (64 tokens, +update)",
			     x4k_hc_pre(&d.c, 64, dH, dfn, dbase, dscale, dy, dcp, dHo, dx, dcf, false,
					ws, wsb, st, &err));
	}
	for (int u = 0; u < 2; u++)
		for (int g = 0; g < 2; g++) {
			free(gx[u][g]);
			free(gcf[u][g]);
		}
	x4_dev_free(dH);
	x4_dev_free(dy);
	x4_dev_free(dcp);
	x4_dev_free(dfn);
	x4_dev_free(dbase);
	x4_dev_free(dscale);
	x4_dev_free(dHo);
	x4_dev_free(dx);
	x4_dev_free(dcf);
	x4_dev_free(ws);
	free(rx);
	free(rcf);
	free(rHo);
	free(xmag);
	free(hmag);
	free(gHo);
	hc_free(&d);
}

/* The comb's orientation (docs/forward.md 5.3): a gate whose comb logits favour
 * source s = d+1 for destination d must give C[d][d+1] (flat 8 + 4d + s)
 * near 1, and the update must read C as [dst][src]: with a non-symmetric
 * C the transposed reading is far from the kernel's output. */
static void hc_orientation(void)
{
	const int n = 4, D = 64;
	struct hc_data d;
	hc_make(&d, n, D, 1, 0.01f, 41);
	for (int a = 0; a < n; a++)
		for (int b = 0; b < n; b++)
			d.base[2 * n + a * n + b] = b == (a + 1) % n ? 6.f : -6.f;
	size_t K = d.K;
	float *dH = dput(d.H, K * 4), *dy = dput(d.y, (size_t)D * 4);
	void *dfn = dput(d.fn, (size_t)d.nc * K * 2);
	float *dbase = dput(d.base, (size_t)d.nc * 4), *dscale = dput(d.scale, 12);
	float *dHo = dpoison(K * 4), *dx = dpoison((size_t)D * 4), *dcf = dpoison((size_t)d.nc * 4);
	size_t wsb = x4k_hc_workspace_bytes(&d.c, 1);
	void *ws = dpoison(wsb);
	cudaMemset(ws, 0, wsb);
	x4k_hc_pre(&d.c, 1, dH, dfn, dbase, dscale, NULL, NULL, dHo, dx, dcf, false, ws, wsb, st,
		   &err);
	float cf[X4K_HC_NCOEF(4)];
	dget(cf, dcf, sizeof cf);
	bool ok = true;
	for (int a = 0; a < n; a++)
		ok = ok && cf[2 * n + a * n + (a + 1) % n] > 0.99f && cf[2 * n + ((a + 1) % n) * n + a] < 0.01f;
	T_OK(ok, "hc comb orientation (gate)", "seed 41: comb[d][d+1] should be ~1, comb[d+1][d] ~0; "
	     "got C[0][1] %g C[1][0] %g", cf[2 * n + 1], cf[2 * n + 4]);
	/* the update with this C: H'[d] = post[d] y + H[d+1] */
	float *got = hmalloc(K * 4), *ref = hmalloc(K * 4);
	x4k_hc_post(&d.c, 1, dcf, dy, dH, dHo, st, &err);
	dget(got, dHo, K * 4);
	x4r_hc_post(&d.c, 1, cf, d.y, d.H, ref);
	double far = 0;
	for (int a = 0; a < n; a++)
		for (int i = 0; i < D; i++) {
			double tr = cf[n + a] * d.y[i]; /* the transposed (DeepSeek-V4) reading */
			for (int b = 0; b < n; b++)
				tr += cf[2 * n + b * n + a] * d.H[(size_t)b * D + i];
			double dd = fabs(tr - got[(size_t)a * D + i]);
			far = dd > far ? dd : far;
		}
	check("hc comb orientation (update)", "n_hc 4 D 64", got, ref, NULL, K, 1e-5, 1e-6, ELEM);
	T_OK(far > 0.5, "hc comb not transposed", "seed 41: the output is within %g of the "
	     "transposed reading", far);
	x4_dev_free(dH);
	x4_dev_free(dy);
	x4_dev_free(dfn);
	x4_dev_free(dbase);
	x4_dev_free(dscale);
	x4_dev_free(dHo);
	x4_dev_free(dx);
	x4_dev_free(dcf);
	x4_dev_free(ws);
	free(got);
	free(ref);
	hc_free(&d);
}

/* A workspace sized for N tokens serves every call of fewer (the trunk sizes
 * one for its prefill chunk and decodes in it), though a split call of up to
 * 8 tokens needs more per token than an unsplit one: the size never shrinks
 * as N grows, and 8 tokens at the model's D run in a workspace for 16. */
static void hc_ws_serves_fewer(void)
{
	const int D = full.n_embd, n_hc = full.n_hc;
	x4k_hc_cfg c = { n_hc, D, 20, 1e-6f, 1e-6f, -30.f, 30.f };
	int shrink = 0;
	for (int n = 2; n <= 600 && !shrink; n++)
		if (x4k_hc_workspace_bytes(&c, n) < x4k_hc_workspace_bytes(&c, n - 1))
			shrink = n;
	T_OK(!shrink, "hc workspace never shrinks", "D %d: %zu bytes for %d tokens, %zu for %d",
	     D, shrink ? x4k_hc_workspace_bytes(&c, shrink) : 0, shrink,
	     shrink ? x4k_hc_workspace_bytes(&c, shrink - 1) : 0, shrink - 1);
	struct hc_data d;
	const int n_tok = 8;
	hc_make(&d, n_hc, D, n_tok, 1.5f, 58);
	size_t K = d.K, nH = K * n_tok, nx = (size_t)D * n_tok, ncf = (size_t)d.nc * n_tok;
	float *dH = dput(d.H, nH * 4), *dy = dput(d.y, nx * 4), *dcp = dput(d.cp, ncf * 4);
	void *dfn = dput(d.fn, (size_t)d.nc * K * 2);
	float *dbase = dput(d.base, (size_t)d.nc * 4), *dscale = dput(d.scale, 12);
	float *dHo = dpoison(nH * 4), *dx = dpoison(nx * 4), *dcf = dpoison(ncf * 4);
	size_t wsb = x4k_hc_workspace_bytes(&d.c, 16);
	void *ws = dpoison(wsb);
	cudaMemset(ws, 0, wsb);
	float *rx = hmalloc(nx * 4), *rcf = hmalloc(ncf * 4), *rHo = hmalloc(nH * 4);
	float *xmag = hmalloc(nx * 4), *gx = hmalloc(nx * 4);
	x4r_hc_pre(&d.c, n_tok, d.H, d.fn, d.base, d.scale, d.y, d.cp, rHo, rx, rcf, xmag);
	int rc = x4k_hc_pre(&d.c, n_tok, dH, dfn, dbase, dscale, dy, dcp, dHo, dx, dcf, false, ws,
			    wsb, st, &err);
	T_OK(rc == 0, "hc_pre in a 16-token workspace", "8 tokens, D %d: %s", D, rc ? err.msg : "");
	dget(gx, dx, nx * 4);
	check("hc collapse in a 16-token workspace", "n_hc 4 D 3584 tokens 8 +update", gx, rx,
	      xmag, nx, 1e-5, 1e-30, ELEM);
	x4_dev_free(dH);
	x4_dev_free(dy);
	x4_dev_free(dcp);
	x4_dev_free(dfn);
	x4_dev_free(dbase);
	x4_dev_free(dscale);
	x4_dev_free(dHo);
	x4_dev_free(dx);
	x4_dev_free(dcf);
	x4_dev_free(ws);
	free(rx);
	free(rcf);
	free(rHo);
	free(xmag);
	free(gx);
	hc_free(&d);
}

/* x4k_hc_pre_norm: the gate, then the sublayer's RMSNorm of its collapse
 * (fused into the split gate's last block).  xh against the reference norm
 * of the reference collapse, and against the norm of the collapse the
 * kernel itself wrote; the same bits twice. */
static void hc_norm_case(int n_hc, int D, int n_tok, bool eager, uint64_t sd)
{
	struct hc_data d;
	hc_make(&d, n_hc, D, n_tok, 1.5f, sd);
	size_t K = d.K, nH = K * n_tok, nx = (size_t)D * n_tok, ncf = (size_t)d.nc * n_tok;
	char shape[160];
	snprintf(shape, sizeof shape, "n_hc %d D %d tokens %d %s +update +norm", n_hc, D, n_tok,
		 eager ? "eager" : "fused");
	float *g = fvec((size_t)D, 0.5f, 1.5f);
	float *dH = dput(d.H, nH * 4), *dy = dput(d.y, nx * 4), *dcp = dput(d.cp, ncf * 4);
	void *dfn = dput(d.fn, (size_t)d.nc * K * 2);
	float *dbase = dput(d.base, (size_t)d.nc * 4), *dscale = dput(d.scale, 12);
	float *dg = dput(g, (size_t)D * 4);
	float *dHo = dpoison(nH * 4), *dx = dpoison(nx * 4), *dcf = dpoison(ncf * 4);
	float *dxh = dpoison(nx * 4);
	size_t wsb = x4k_hc_workspace_bytes(&d.c, n_tok);
	void *ws = dpoison(wsb);
	cudaMemset(ws, 0, wsb);
	float *rx = hmalloc(nx * 4), *rcf = hmalloc(ncf * 4), *rHo = hmalloc(nH * 4);
	float *xmag = hmalloc(nx * 4), *rxh = hmalloc(nx * 4), *mag = hmalloc(nx * 4);
	float *gx = hmalloc(nx * 4), *gxh = hmalloc(nx * 4), *sxh = hmalloc(nx * 4);
	float *again = hmalloc(nx * 4);
	x4r_hc_pre(&d.c, n_tok, d.H, d.fn, d.base, d.scale, d.y, d.cp, rHo, rx, rcf, xmag);
	x4r_rmsnorm(n_tok, D, rx, D, g, 1e-6f, rxh, D);
	for (int t = 0; t < n_tok; t++) {
		double ss = 0;
		for (int i = 0; i < D; i++)
			ss += (double)rx[(size_t)t * D + i] * rx[(size_t)t * D + i];
		double inv = 1.0 / sqrt(ss / D + 1e-6);
		for (int i = 0; i < D; i++) {
			size_t j = (size_t)t * D + i;
			mag[j] = (float)((xmag[j] + fabs(rx[j])) * inv * fabs(g[i]));
		}
	}
	int rc = x4k_hc_pre_norm(&d.c, n_tok, dH, dfn, dbase, dscale, dy, dcp, dHo, dx, dcf, dg,
				 1e-6f, dxh, eager, ws, wsb, st, &err);
	T_OK(rc == 0, "hc_pre_norm launch", "%s: %s", shape, err.msg);
	dget(gx, dx, nx * 4);
	dget(gxh, dxh, nx * 4);
	/* fp32: the collapse's error (1e-5 of sum |pre h|, as hc_case) carried
	 * through the norm, plus the norm's own (its inverse moves every value
	 * by the same relative amount): 2e-5 of (xmag + |x|) inv |gain| */
	check("hc_pre_norm collapse", shape, gx, rx, xmag, nx, 1e-5, 1e-30, ELEM);
	check("hc_pre_norm xh", shape, gxh, rxh, mag, nx, 2e-5, 1e-30, ELEM);
	/* against the norm of the kernel's own x: fp32, 1e-5 relative, as norm_case */
	x4r_rmsnorm(n_tok, D, gx, D, g, 1e-6f, sxh, D);
	check("hc_pre_norm xh = rmsnorm(x)", shape, gxh, sxh, NULL, nx, 1e-5, 1e-30, ELEM);
	repoison(dxh, nx * 4);
	x4k_hc_pre_norm(&d.c, n_tok, dH, dfn, dbase, dscale, dy, dcp, dHo, dx, dcf, dg, 1e-6f, dxh,
			eager, ws, wsb, st, &err);
	dget(again, dxh, nx * 4);
	T_OK(!memcmp(again, gxh, nx * 4), "hc_pre_norm twice", "%s: a second call gave other bits",
	     shape);
	x4_dev_free(dH);
	x4_dev_free(dy);
	x4_dev_free(dcp);
	x4_dev_free(dfn);
	x4_dev_free(dbase);
	x4_dev_free(dscale);
	x4_dev_free(dg);
	x4_dev_free(dHo);
	x4_dev_free(dx);
	x4_dev_free(dcf);
	x4_dev_free(dxh);
	x4_dev_free(ws);
	free(g);
	free(rx);
	free(rcf);
	free(rHo);
	free(xmag);
	free(rxh);
	free(mag);
	free(gx);
	free(gxh);
	free(sxh);
	free(again);
	hc_free(&d);
}

static void test_hc(void)
{
	hc_norm_case(4, 96, 3, false, 71);    /* tiny, the fused norm */
	hc_norm_case(3, 99, 2, false, 72);    /* odd D: scalar loads */
	hc_norm_case(4, 1100, 2, false, 73);  /* a partial last split */
	hc_norm_case(4, 96, 9, false, 74);    /* prefill sizes: the norm a second launch */
	hc_norm_case(full.n_hc, full.n_embd, 1, false, 75);
	hc_norm_case(full.n_hc, full.n_embd, 8, false, 76);
	hc_norm_case(full.n_hc, full.n_embd, 1, true, 77); /* eager */
	hc_norm_case(full.n_hc, full.n_embd, 64, false, 78);
	hc_case(4, 96, 3, 1.5f, 51, false);     /* tiny */
	hc_case(3, 99, 2, 1.5f, 52, false);     /* odd D: the scalar path */
	hc_case(4, 1100, 2, 1.5f, 53, false);   /* three splits, the last partial */
	hc_case(4, 96, 9, -1.f, 54, false);     /* comb logits past +-30: the clamp */
	hc_case(full.n_hc, full.n_embd, 1, 1.5f, 55, false);
	hc_case(full.n_hc, full.n_embd, 8, 1.5f, 56, false);
	hc_case(full.n_hc, full.n_embd, 64, 1.5f, 57, true); /* a block a token; timed */
	hc_orientation();
	hc_ws_serves_fewer();
}

/* ---------------- RoPE ---------------- */

static float *omega_of(int d_rope)
{
	x4_config c = full;
	c.d_rope = d_rope;
	float *om = hmalloc(sizeof(float) * (size_t)(d_rope / 2));
	x4_yarn_freqs(&c, om);
	return om;
}

/* |g - r| per pair against |a| + |b|: fp32 with cosf/sinf good to 2 ulp at
 * any angle; 1e-5 (docs/numerics.md 4) still fails __sinf, which misses by 1e-1 at 2e5 rad. */
static void rope_check(const char *shape, const float *g, const float *r, const float *in,
		       long n_pairs)
{
	float *mag = hmalloc(sizeof(float) * 2 * n_pairs);
	for (long i = 0; i < n_pairs; i++)
		mag[2 * i] = mag[2 * i + 1] = fabsf(in[2 * i]) + fabsf(in[2 * i + 1]);
	check("rope", shape, g, r, mag, 2 * (size_t)n_pairs, 1e-5, 1e-30, ELEM);
	free(mag);
}

static void rope_case(int n_tok, int n_vec, int d_rope, int pos, uint64_t sd, bool qlayout,
		      bool time)
{
	char shape[128];
	snprintf(shape, sizeof shape, "tokens %d vectors %d d_rope %d pos %d%s", n_tok, n_vec,
		 d_rope, pos, qlayout ? " q->qt layout" : "");
	seed(sd);
	/* q layout: vectors at +d_nope of [n_vec][d_nope + d_rope] rows, written
	 * into qt's tail at +kv_lora of [n_vec][kv_lora + d_rope] rows */
	int off_in = qlayout ? full.d_nope : 0, off_out = qlayout ? full.kv_lora : 0;
	int ld_iv = off_in + d_rope, ld_ov = off_out + d_rope;
	long ld_it = (long)n_vec * ld_iv, ld_ot = (long)n_vec * ld_ov;
	size_t nin = (size_t)ld_it * n_tok, nout = (size_t)ld_ot * n_tok;
	float *in = fvec(nin, -2, 2), *ref = hmalloc(nout * 4), *got = hmalloc(nout * 4);
	float *om = omega_of(d_rope);
	x4r_rope(n_tok, n_vec, d_rope, in + off_in, ld_it, ld_iv, ref + off_out, ld_ot, ld_ov, om,
		 pos);
	float *din = dput(in, nin * 4), *dout = dpoison(nout * 4), *dom = dput(om, (size_t)d_rope * 2);
	int *dpos = dint(pos);
	int rc = x4k_rope(n_tok, n_vec, d_rope, din + off_in, ld_it, ld_iv, dout + off_out, ld_ot,
			  ld_ov, dom, dpos, st, &err);
	T_OK(rc == 0, "rope launch", "%s: %s", shape, err.msg);
	dget(got, dout, nout * 4);
	/* gather the rope parts only (the rest of qt is another kernel's) */
	long np = (long)n_tok * n_vec * (d_rope / 2);
	float *g = hmalloc(sizeof(float) * 2 * np), *r = hmalloc(sizeof(float) * 2 * np);
	float *iv = hmalloc(sizeof(float) * 2 * np);
	size_t k = 0;
	for (int t = 0; t < n_tok; t++)
		for (int v = 0; v < n_vec; v++)
			for (int j = 0; j < d_rope; j++, k++) {
				g[k] = got[t * ld_ot + (long)v * ld_ov + off_out + j];
				r[k] = ref[t * ld_ot + (long)v * ld_ov + off_out + j];
				iv[k] = in[t * ld_it + (long)v * ld_iv + off_in + j];
			}
	rope_check(shape, g, r, iv, np);
	if (qlayout) {
		bool untouched = true;
		for (int t = 0; t < n_tok; t++)
			for (int v = 0; v < n_vec; v++)
				for (int j = 0; j < off_out; j++)
					untouched = untouched && isnan(got[t * ld_ot + (long)v * ld_ov + j]);
		T_OK(untouched, "rope writes only its part", "%s", shape);
	}
	if (time)
		TIME("rope (1 token, 32 heads x 64)",
		     x4k_rope(1, n_vec, d_rope, din + off_in, ld_it, ld_iv, dout + off_out, ld_ot,
			      ld_ov, dom, dpos, st, &err));
	x4_dev_free(din);
	x4_dev_free(dout);
	x4_dev_free(dom);
	x4_dev_free(dpos);
	free(in);
	free(ref);
	free(got);
	free(om);
	free(g);
	free(r);
	free(iv);
}

static void test_rope(void)
{
	/* the check values of the YaRN frequencies (docs/forward.md 6.2) */
	float *om = omega_of(64);
	const int idx[] = { 0, 10, 16, 23, 31 };
	const double want[] = { 1, 0.0562341, 0.00545673, 2.08363e-5, 2.08363e-6 };
	bool ok = true;
	for (int i = 0; i < 5; i++)
		ok = ok && fabs(om[idx[i]] - want[i]) <= 1e-5 * want[i];
	T_OK(ok, "yarn omega check values", "omega_10 %g omega_16 %g omega_23 %g omega_31 %g",
	     om[10], om[16], om[23], om[31]);
	free(om);
	rope_case(5, 3, 8, 7, 61, false, false);
	rope_case(1, full.n_head, full.d_rope, 4095, 62, true, true);
	rope_case(64, full.n_head, full.d_rope, 200, 63, true, false);
	/* every position of the trained context, 0 .. 262143 */
	rope_case(full.n_ctx_train, 1, full.d_rope, 0, 64, false, false);
}

/* ---------------- the cache row ---------------- */

static void kv_case(int n_tok, int kv_lora, int d_rope, int pos, int max_ctx, uint64_t sd,
		    bool time)
{
	char shape[128];
	snprintf(shape, sizeof shape, "tokens %d kv_lora %d rope %d pos %d max_ctx %d", n_tok,
		 kv_lora, d_rope, pos, max_ctx);
	seed(sd);
	int cw = kv_lora + d_rope;
	float *kva = fvec((size_t)n_tok * cw, -3, 3), *g = fvec((size_t)kv_lora, 0.5f, 1.5f);
	float *om = omega_of(d_rope);
	size_t rows = (size_t)max_ctx + 2, nc = rows * cw; /* two guard rows past max_ctx */
	uint16_t *ref = hmalloc(nc * 2), *got = hmalloc(nc * 2);
	memset(ref, 0xff, nc * 2);
	x4r_kv_store(n_tok, kv_lora, d_rope, kva, g, 1e-6f, om, pos, ref, max_ctx);
	float *dkva = dput(kva, (size_t)n_tok * cw * 4), *dg = dput(g, (size_t)kv_lora * 4);
	float *dom = dput(om, (size_t)d_rope * 2);
	int *dpos = dint(pos);
	uint16_t *dc = dpoison(nc * 2);
	int rc = x4k_kv_store(n_tok, kv_lora, d_rope, dkva, dg, 1e-6f, dom, dpos, dc, max_ctx, st,
			      &err);
	T_OK(rc == 0, "kv_store launch", "%s: %s", shape, err.msg);
	dget(got, dc, nc * 2);
	int r0 = pos, r1 = pos + n_tok < max_ctx ? pos + n_tok : max_ctx;
	size_t nw = (size_t)(r1 - r0) * cw;
	float *gf = hmalloc(nw * 4), *rf = hmalloc(nw * 4);
	f16_to_f32v(got + (size_t)r0 * cw, gf, nw);
	f16_to_f32v(ref + (size_t)r0 * cw, rf, nw);
	/* fp16 storage: one rounding of 2^-11 relative, the fp32 arithmetic
	 * before it can move a value across a rounding boundary: 1 fp16 ulp;
	 * 4e-3 (docs/numerics.md 4) */
	check("kv_store", shape, gf, rf, NULL, nw, 4e-3, 1e-7, ELEM);
	bool guard = true;
	for (size_t i = 0; i < nc; i++)
		if (i < (size_t)r0 * cw || i >= (size_t)r1 * cw)
			guard = guard && got[i] == 0xffff;
	T_OK(guard, "kv_store writes only its rows", "%s", shape);
	{ /* with the query's norm in the same launch: the same cache bits, and q
	   * normed in place (fp32, 1e-5 relative, as norm_case) */
		const int nq = kv_lora + 37;
		float *q = fvec((size_t)n_tok * nq, -3, 3), *qg = fvec((size_t)nq, 0.5f, 1.5f);
		float *rq = hmalloc((size_t)n_tok * nq * 4), *gq = hmalloc((size_t)n_tok * nq * 4);
		x4r_rmsnorm(n_tok, nq, q, nq, qg, 1e-6f, rq, nq);
		float *dq = dput(q, (size_t)n_tok * nq * 4), *dqg = dput(qg, (size_t)nq * 4);
		uint16_t *dc2 = dpoison(nc * 2), *got2 = hmalloc(nc * 2);
		int rc2 = x4k_kv_store_norm(n_tok, kv_lora, d_rope, dkva, dg, 1e-6f, dom, dpos, dc2, max_ctx,
					    nq, dq, dqg, st, &err);
		dget(got2, dc2, nc * 2);
		dget(gq, dq, (size_t)n_tok * nq * 4);
		T_OK(rc2 == 0 && !memcmp(got, got2, nc * 2), "kv_store_norm cache = kv_store",
		     "%s: %s", shape, rc2 ? err.msg : "other bits");
		check("kv_store_norm q", shape, gq, rq, NULL, (size_t)n_tok * nq, 1e-5, 1e-30, ELEM);
		x4_dev_free(dq);
		x4_dev_free(dqg);
		x4_dev_free(dc2);
		free(q);
		free(qg);
		free(rq);
		free(gq);
		free(got2);
	}
	if (time)
		TIME("kv_store (1 token, 512 + 64)",
		     x4k_kv_store(1, kv_lora, d_rope, dkva, dg, 1e-6f, dom, dpos, dc, max_ctx, st, &err));
	x4_dev_free(dkva);
	x4_dev_free(dg);
	x4_dev_free(dom);
	x4_dev_free(dpos);
	x4_dev_free(dc);
	free(kva);
	free(g);
	free(om);
	free(ref);
	free(got);
	free(gf);
	free(rf);
}

static void test_kv_store(void)
{
	kv_case(3, 40, 8, 5, 7, 71, false); /* the third row is past max_ctx */
	kv_case(1, full.kv_lora, full.d_rope, 4095, 4096, 72, true);
	kv_case(64, full.kv_lora, full.d_rope, 100, 4096, 73, false);
}

/* ---------------- the absorb and expand products ---------------- */

static void absorb_case(int n_tok, int n_head, int kv_lora, int d_nope, int d_rope, int d_v,
			uint64_t sd, bool time)
{
	char shape[160];
	snprintf(shape, sizeof shape, "tokens %d heads %d kv_lora %d nope %d rope %d v %d", n_tok,
		 n_head, kv_lora, d_nope, d_rope, d_v);
	seed(sd);
	int dqk = d_nope + d_rope, cw = kv_lora + d_rope;
	size_t nq = (size_t)n_tok * n_head * dqk, nqt = (size_t)n_tok * n_head * cw;
	size_t nob = (size_t)n_tok * n_head * kv_lora, no = (size_t)n_tok * n_head * d_v;
	float *q = fvec(nq, -2, 2), *ob = fvec(nob, -1, 1);
	uint16_t *wkb = bvec((size_t)n_head * kv_lora * d_nope, 0.1f);
	uint16_t *wvb = bvec((size_t)n_head * d_v * kv_lora, 0.1f);
	float *rqt = hmalloc(nqt * 4), *gqt = hmalloc(nqt * 4), *ro = hmalloc(no * 4), *go = hmalloc(no * 4);
	x4r_mla_absorb_q(n_tok, n_head, kv_lora, d_nope, d_rope, wkb, q, rqt);
	x4r_mla_expand_v(n_tok, n_head, kv_lora, d_v, wvb, ob, ro);
	float *dq = dput(q, nq * 4), *dob = dput(ob, nob * 4);
	void *dkb = dput(wkb, (size_t)n_head * kv_lora * d_nope * 2);
	void *dvb = dput(wvb, (size_t)n_head * d_v * kv_lora * 2);
	float *dqt = dpoison(nqt * 4), *dout = dpoison(no * 4);
	int rc = x4k_mla_absorb_q(n_tok, n_head, kv_lora, d_nope, d_rope, dkb, dq, dqt, st, &err);
	T_OK(rc == 0, "absorb_q launch", "%s: %s", shape, err.msg);
	rc = x4k_mla_expand_v(n_tok, n_head, kv_lora, d_v, dvb, dob, dout, st, &err);
	T_OK(rc == 0, "expand_v launch", "%s: %s", shape, err.msg);
	dget(gqt, dqt, nqt * 4);
	dget(go, dout, no * 4);
	float *g = hmalloc(nob * 4), *r = hmalloc(nob * 4);
	bool tail = true;
	for (size_t th = 0; th < (size_t)n_tok * n_head; th++) {
		memcpy(g + th * kv_lora, gqt + th * cw, (size_t)kv_lora * 4);
		memcpy(r + th * kv_lora, rqt + th * cw, (size_t)kv_lora * 4);
		for (int j = kv_lora; j < cw; j++)
			tail = tail && isnan(gqt[th * cw + j]);
	}
	/* fp32 sums of BF16 x fp32 products (the BF16 weights are exact in
	 * fp32), normwise 1e-5: k <= 512 terms */
	check("absorb_q", shape, g, r, NULL, nob, 1e-5, 0, NORMWISE);
	T_OK(tail, "absorb_q leaves the rope part", "%s", shape);
	check("expand_v", shape, go, ro, NULL, no, 1e-5, 0, NORMWISE);
	{ /* absorb and the q rope in one launch: the bits of absorb_q then rope */
		float *om = omega_of(d_rope), *dom = dput(om, sizeof(float) * (size_t)(d_rope / 2));
		int *dpos = dint(1000 + n_tok);
		float *dqt2 = dpoison(nqt * 4), *g1 = hmalloc(nqt * 4), *g2 = hmalloc(nqt * 4);
		repoison(dqt, nqt * 4);
		rc = x4k_mla_absorb_q(n_tok, n_head, kv_lora, d_nope, d_rope, dkb, dq, dqt, st, &err);
		if (!rc)
			rc = x4k_rope(n_tok, n_head, d_rope, dq + d_nope, (long)n_head * dqk, dqk,
				      dqt + kv_lora, (long)n_head * cw, cw, dom, dpos, st, &err);
		int rc2 = x4k_mla_absorb_q_rope(n_tok, n_head, kv_lora, d_nope, d_rope, dkb, dq, dqt2, dom,
						dpos, st, &err);
		dget(g1, dqt, nqt * 4);
		dget(g2, dqt2, nqt * 4);
		T_OK(rc == 0 && rc2 == 0 && !memcmp(g1, g2, nqt * 4), "absorb_q_rope = absorb_q, rope",
		     "%s: %s", shape, rc || rc2 ? err.msg : "other bits");
		bool written = true;
		for (size_t i = 0; i < nqt; i++)
			written = written && !isnan(g2[i]);
		T_OK(written, "absorb_q_rope writes all of qt", "%s", shape);
		x4_dev_free(dom);
		x4_dev_free(dpos);
		x4_dev_free(dqt2);
		free(om);
		free(g1);
		free(g2);
	}
	if (time) {
		TIME("absorb q (1 token, 32 x 512x128 BF16)",
		     x4k_mla_absorb_q(1, n_head, kv_lora, d_nope, d_rope, dkb, dq, dqt, st, &err));
		TIME("expand v (1 token, 32 x 128x512 BF16)",
		     x4k_mla_expand_v(1, n_head, kv_lora, d_v, dvb, dob, dout, st, &err));
	}
	x4_dev_free(dq);
	x4_dev_free(dob);
	x4_dev_free(dkb);
	x4_dev_free(dvb);
	x4_dev_free(dqt);
	x4_dev_free(dout);
	free(q);
	free(ob);
	free(wkb);
	free(wvb);
	free(rqt);
	free(gqt);
	free(ro);
	free(go);
	free(g);
	free(r);
}

static void test_absorb(void)
{
	absorb_case(3, 3, 40, 10, 8, 6, 81, false);
	absorb_case(3, 3, 64, 16, 8, 6, 84, false); /* the 16-byte path: 2 and 8 lanes a row, 6 rows */
	absorb_case(1, full.n_head, full.kv_lora, full.d_nope, full.d_rope, full.d_v, 82, true);
	absorb_case(64, full.n_head, full.kv_lora, full.d_nope, full.d_rope, full.d_v, 83, false);
}
