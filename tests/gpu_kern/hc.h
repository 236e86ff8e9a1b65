/*
 * hc.h - kernels/hc.cu (x4k_hc_pre, x4k_hc_pre_norm, x4k_hc_post: the
 * hyper-connection gate and the stream update) against x4r_hc_pre and
 * x4r_hc_post (lib/ref/ref_hc.c).
 */

struct hc_data {
	x4k_hc_cfg c;
	int n_tok, nc;
	size_t K;
	float *H, *y, *cp, *base, *scale;
	uint16_t *fn;
};

static void hc_make(struct hc_data *d, int n_hc, int D, int n_tok, float comb_scale, uint64_t sd)
{
	rng_seed(sd);
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

/* d's inputs on the device, the outputs poisoned, and a zeroed workspace
 * (as the header asks) for ws_tok tokens. */
struct hc_dev {
	float *H, *y, *cp, *base, *scale, *Ho, *x, *cf;
	void *fn, *ws;
	size_t wsb;
};

static void hc_dev_make(struct hc_dev *v, const struct hc_data *d, int ws_tok)
{
	size_t nH = d->K * d->n_tok, nx = (size_t)d->c.D * d->n_tok, ncf = (size_t)d->nc * d->n_tok;
	v->H = dput(d->H, nH * 4), v->y = dput(d->y, nx * 4), v->cp = dput(d->cp, ncf * 4);
	v->fn = dput(d->fn, (size_t)d->nc * d->K * 2);
	v->base = dput(d->base, (size_t)d->nc * 4), v->scale = dput(d->scale, 12);
	v->Ho = dpoison(nH * 4), v->x = dpoison(nx * 4), v->cf = dpoison(ncf * 4);
	v->wsb = x4k_hc_workspace_bytes(&d->c, ws_tok);
	v->ws = dpoison(v->wsb);
	cudaMemset(v->ws, 0, v->wsb);
}

static void hc_dev_free(struct hc_dev *v)
{
	x4_dev_free(v->H), x4_dev_free(v->y), x4_dev_free(v->cp), x4_dev_free(v->fn);
	x4_dev_free(v->base), x4_dev_free(v->scale), x4_dev_free(v->Ho), x4_dev_free(v->x);
	x4_dev_free(v->cf), x4_dev_free(v->ws);
}

/* One shape: the fused and eager paths, with and without the fused update,
 * against the reference and against each other; two fused calls give the
 * same bits (the split's counter is reset). */
static void hc_case(int n_hc, int D, int n_tok, float comb_scale, uint64_t sd)
{
	struct hc_data d;
	hc_make(&d, n_hc, D, n_tok, comb_scale, sd);
	int nc = d.nc;
	size_t K = d.K, nH = K * n_tok, nx = (size_t)D * n_tok, ncf = (size_t)nc * n_tok;
	struct hc_dev v;
	hc_dev_make(&v, &d, n_tok);
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
			poison(v.Ho, nH * 4);
			poison(v.x, nx * 4);
			poison(v.cf, ncf * 4);
			int rc = x4k_hc_pre(&d.c, n_tok, v.H, v.fn, v.base, v.scale, upd ? v.y : NULL,
					    upd ? v.cp : NULL, v.Ho, v.x, v.cf, eager, v.ws, v.wsb, st, &err);
			T_OK(rc == 0, "hc_pre launch", "%s: %s", shape, err.msg);
			gx[upd][eager] = hmalloc(nx * 4);
			gcf[upd][eager] = hmalloc(ncf * 4);
			dget(gx[upd][eager], v.x, nx * 4);
			dget(gcf[upd][eager], v.cf, ncf * 4);
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
				dget(gHo, v.Ho, nH * 4);
				check("hc fused update", shape, gHo, rHo, hmag, nH, 1e-5, 1e-30, ELEM);
			}
			if (!eager) { /* again: the same bits, and the counter was reset */
				float *x2 = hmalloc(nx * 4), *c2 = hmalloc(ncf * 4);
				poison(v.x, nx * 4);
				poison(v.cf, ncf * 4);
				x4k_hc_pre(&d.c, n_tok, v.H, v.fn, v.base, v.scale, upd ? v.y : NULL,
					   upd ? v.cp : NULL, v.Ho, v.x, v.cf, false, v.ws, v.wsb, st, &err);
				dget(x2, v.x, nx * 4);
				dget(c2, v.cf, ncf * 4);
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
		poison(v.Ho, nH * 4);
		int rc = x4k_hc_post(&d.c, n_tok, v.cp, v.y, v.H, v.Ho, st, &err);
		T_OK(rc == 0, "hc_post launch", "%s: %s", shape, err.msg);
		dget(gHo, v.Ho, nH * 4);
		check("hc_post", shape, gHo, rHo, hmag, nH, 1e-5, 1e-30, ELEM);
	}

	for (int u = 0; u < 2; u++)
		for (int g = 0; g < 2; g++) {
			free(gx[u][g]);
			free(gcf[u][g]);
		}
	hc_dev_free(&v);
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
	struct hc_dev v;
	hc_dev_make(&v, &d, 1);
	x4k_hc_pre(&d.c, 1, v.H, v.fn, v.base, v.scale, NULL, NULL, v.Ho, v.x, v.cf, false, v.ws, v.wsb, st,
		   &err);
	float cf[X4K_HC_NCOEF(4)];
	dget(cf, v.cf, sizeof cf);
	bool ok = true;
	for (int a = 0; a < n; a++)
		ok = ok && cf[2 * n + a * n + (a + 1) % n] > 0.99f && cf[2 * n + ((a + 1) % n) * n + a] < 0.01f;
	T_OK(ok, "hc comb orientation (gate)", "seed 41: comb[d][d+1] should be ~1, comb[d+1][d] ~0; "
	     "got C[0][1] %g C[1][0] %g", cf[2 * n + 1], cf[2 * n + 4]);
	/* the update with this C: H'[d] = post[d] y + H[d+1] */
	float *got = hmalloc(K * 4), *ref = hmalloc(K * 4);
	x4k_hc_post(&d.c, 1, v.cf, v.y, v.H, v.Ho, st, &err);
	dget(got, v.Ho, K * 4);
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
	hc_dev_free(&v);
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
	struct hc_dev v;
	hc_dev_make(&v, &d, 16);
	float *rx = hmalloc(nx * 4), *rcf = hmalloc(ncf * 4), *rHo = hmalloc(nH * 4);
	float *xmag = hmalloc(nx * 4), *gx = hmalloc(nx * 4);
	x4r_hc_pre(&d.c, n_tok, d.H, d.fn, d.base, d.scale, d.y, d.cp, rHo, rx, rcf, xmag);
	int rc = x4k_hc_pre(&d.c, n_tok, v.H, v.fn, v.base, v.scale, v.y, v.cp, v.Ho, v.x, v.cf, false, v.ws,
			    v.wsb, st, &err);
	T_OK(rc == 0, "hc_pre in a 16-token workspace", "8 tokens, D %d: %s", D, rc ? err.msg : "");
	dget(gx, v.x, nx * 4);
	check("hc collapse in a 16-token workspace", "n_hc 4 D 3584 tokens 8 +update", gx, rx,
	      xmag, nx, 1e-5, 1e-30, ELEM);
	hc_dev_free(&v);
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
	struct hc_dev v;
	hc_dev_make(&v, &d, n_tok);
	float *dg = dput(g, (size_t)D * 4), *dxh = dpoison(nx * 4);
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
	int rc = x4k_hc_pre_norm(&d.c, n_tok, v.H, v.fn, v.base, v.scale, v.y, v.cp, v.Ho, v.x, v.cf, dg,
				 1e-6f, dxh, eager, v.ws, v.wsb, NULL, st, &err);
	T_OK(rc == 0, "hc_pre_norm launch", "%s: %s", shape, err.msg);
	dget(gx, v.x, nx * 4);
	dget(gxh, dxh, nx * 4);
	/* fp32: the collapse's error (1e-5 of sum |pre h|, as hc_case) carried
	 * through the norm, plus the norm's own (its inverse moves every value
	 * by the same relative amount): 2e-5 of (xmag + |x|) inv |gain| */
	check("hc_pre_norm collapse", shape, gx, rx, xmag, nx, 1e-5, 1e-30, ELEM);
	check("hc_pre_norm xh", shape, gxh, rxh, mag, nx, 2e-5, 1e-30, ELEM);
	/* against the norm of the kernel's own x: fp32, 1e-5 relative, as norm_case */
	x4r_rmsnorm(n_tok, D, gx, D, g, 1e-6f, sxh, D);
	check("hc_pre_norm xh = rmsnorm(x)", shape, gxh, sxh, NULL, nx, 1e-5, 1e-30, ELEM);
	float *cf1 = hmalloc(ncf * 4), *cf2 = hmalloc(ncf * 4);
	dget(cf1, v.cf, ncf * 4);
	poison(dxh, nx * 4);
	x4k_hc_pre_norm(&d.c, n_tok, v.H, v.fn, v.base, v.scale, v.y, v.cp, v.Ho, v.x, v.cf, dg, 1e-6f, dxh,
			eager, v.ws, v.wsb, NULL, st, &err);
	dget(again, dxh, nx * 4);
	T_OK(!memcmp(again, gxh, nx * 4), "hc_pre_norm twice", "%s: a second call gave other bits",
	     shape);
	/* the coefficients finished on a side stream (the decode step's form):
	 * the same bits, complete once `done` is */
	x4k_side side = { 0 };
	rc = x4_cuda_check(cudaStreamCreate(&side.s), "side stream", &err) ||
	     x4_cuda_check(cudaEventCreateWithFlags(&side.fork, cudaEventDisableTiming), "event", &err) ||
	     x4_cuda_check(cudaEventCreateWithFlags(&side.done, cudaEventDisableTiming), "event", &err);
	poison(dxh, nx * 4);
	poison(v.cf, ncf * 4);
	if (!rc)
		rc = x4k_hc_pre_norm(&d.c, n_tok, v.H, v.fn, v.base, v.scale, v.y, v.cp, v.Ho, v.x, v.cf, dg,
				     1e-6f, dxh, eager, v.ws, v.wsb, &side, st, &err) ||
		     x4_cuda_check(cudaStreamWaitEvent(st, side.done, 0), "join", &err) ||
		     x4_cuda_check(cudaStreamSynchronize(st), "side call", &err);
	if (!rc) {
		dget(again, dxh, nx * 4);
		dget(cf2, v.cf, ncf * 4);
	}
	T_OK(!rc && !memcmp(again, gxh, nx * 4) && !memcmp(cf1, cf2, ncf * 4), "hc_pre_norm side stream",
	     "%s: %s", shape, rc ? err.msg : "other bits than the call without a side");
	if (side.done)
		cudaEventDestroy(side.done);
	if (side.fork)
		cudaEventDestroy(side.fork);
	if (side.s)
		cudaStreamDestroy(side.s);
	free(cf1);
	free(cf2);
	hc_dev_free(&v);
	x4_dev_free(dg);
	x4_dev_free(dxh);
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
	hc_case(4, 96, 3, 1.5f, 51);     /* tiny */
	hc_case(3, 99, 2, 1.5f, 52);     /* odd D: the scalar path */
	hc_case(4, 1100, 2, 1.5f, 53);   /* three splits, the last partial */
	hc_case(4, 96, 9, -1.f, 54);     /* comb logits past +-30: the clamp */
	hc_case(full.n_hc, full.n_embd, 1, 1.5f, 55);
	hc_case(full.n_hc, full.n_embd, 8, 1.5f, 56);
	hc_case(full.n_hc, full.n_embd, 64, 1.5f, 57); /* a block a token */
	hc_orientation();
	hc_ws_serves_fewer();
}
