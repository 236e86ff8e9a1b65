/*
 * moe_router.h - kernels/moe_router.cu (x4k_moe_router, x4k_moe_route_table,
 * x4k_moe_router_table) against x4r_moe_router (lib/ref/ref_moe.c), and the
 * route table's invariants.
 */

/* The table's invariants, from the device copy, against sel on the host. */
static void check_table(const char *cas, const x4k_moe_routes *r, const int32_t *sel)
{
	int n = r->n_tok * r->k, E = r->n_expert, nt = 0, ok = 1;
	int32_t *cnt = hmalloc((size_t)E * 4), *off = hmalloc((size_t)(E + 1) * 4);
	int32_t *route = hmalloc((size_t)n * 4 + 4), *te = hmalloc((size_t)r->max_tiles * 4 + 4);
	int32_t *ts = hmalloc((size_t)r->max_tiles * 4 + 4), *seen = calloc((size_t)n + 1, 4);
	dget(cnt, r->counts, (size_t)E * 4);
	dget(off, r->offsets, (size_t)(E + 1) * 4);
	dget(route, r->route, (size_t)n * 4);
	dget(&nt, r->n_tiles, 4);
	dget(te, r->tile_expert, (size_t)r->max_tiles * 4);
	dget(ts, r->tile_start, (size_t)r->max_tiles * 4);
	char why[200] = "";
	int want_tiles = 0;
	for (int ex = 0, at = 0; ex < E && ok; ex++) {
		int c = 0;
		for (int i = 0; i < n; i++)
			c += sel[i] == ex;
		if (cnt[ex] != c || off[ex] != at) {
			snprintf(why, sizeof why, "expert %d: count %d offset %d, want %d and %d", ex, cnt[ex],
				 off[ex], c, at);
			ok = 0;
		}
		for (int j = 0; ok && j < c; j += r->tile, want_tiles++)
			if (want_tiles >= nt || te[want_tiles] != ex || ts[want_tiles] != at + j) {
				snprintf(why, sizeof why, "tile %d: not expert %d from %d", want_tiles, ex, at + j);
				ok = 0;
			}
		for (int i = at; ok && i < at + c; i++) {
			int id = route[i];
			if (id < 0 || id >= n || sel[id] != ex || seen[id]++ || (i > at && route[i - 1] >= id)) {
				snprintf(why, sizeof why, "route[%d] = %d in expert %d's group", i, id, ex);
				ok = 0;
			}
		}
		at += c;
	}
	if (ok && (off[E] != n || nt != want_tiles || nt > r->max_tiles)) {
		snprintf(why, sizeof why, "total %d of %d, %d tiles, want %d (max %d)", off[E], n, nt,
			 want_tiles, r->max_tiles);
		ok = 0;
	}
	T_OK(ok, "moe route table", "%s: %s", cas, why);
	free(cnt), free(off), free(route), free(te), free(ts), free(seen);
}

/* The router against the reference.  A differing pick is accepted only as a
 * near tie: the reference's two scores closer than the fp32 logit error can
 * move them (sigmoid' <= 1/4, times TOL * the logit's mag).  tie: experts
 * 5, 9, 17, 40, 41, 60 get one weight row and bias 1.0, an exact tie for 4
 * places that the lower indices must win, in index order.  tie 2: every
 * bias NaN but experts 3 and 11's, so each token takes those two and then
 * the lowest ids not taken (x4r_topk's NaN rule), exactly as the reference. */
static void test_router(int n_tok, int d, int E, int k, uint64_t seed, int tie)
{
	static const int tied[] = { 5, 9, 17, 40, 41, 60 };
	char cas[200], name[64];
	const int nan_bias = tie == 2;
	if (nan_bias)
		tie = 0;
	snprintf(cas, sizeof cas, "op moe_router type F32 d %d experts %d k %d tokens %d seed %llu%s", d, E,
		 k, n_tok, (unsigned long long)seed, tie ? " exact-tie" : nan_bias ? " nan-bias" : "");
	snprintf(name, sizeof name, "moe router%s", tie ? " exact tie" : nan_bias ? " NaN bias" : "");
	if (!t_want("moe_router", cas))
		return;
	rng_seed(seed);
	size_t nr = (size_t)n_tok * k;
	float *x = hmalloc((size_t)n_tok * d * 4), *wr = hmalloc((size_t)E * d * 4), *b = hmalloc((size_t)E * 4);
	fill_x(x, (size_t)n_tok * d);
	for (size_t i = 0; i < (size_t)E * d; i++)
		wr[i] = unif(-0.05f, 0.05f);
	for (int i = 0; i < E; i++)
		b[i] = unif(-0.1f, 0.1f);
	if (tie)
		for (size_t i = 1; i < X4_ARRAY_LEN(tied); i++) {
			memcpy(wr + (size_t)tied[i] * d, wr + (size_t)tied[0] * d, (size_t)d * 4);
			b[tied[i]] = b[tied[0]] = 1.0f;
		}
	if (nan_bias)
		for (int i = 0; i < E; i++)
			b[i] = i == 3 || i == 11 ? 0.5f : NAN;
	int32_t *sel = hmalloc(nr * 4), *rsel = hmalloc(nr * 4);
	float *wts = hmalloc(nr * 4), *rwts = hmalloc(nr * 4);
	float *score = hmalloc((size_t)n_tok * E * 4), *lmag = hmalloc((size_t)n_tok * E * 4);
	float *dx = dput(x, (size_t)n_tok * d * 4), *dwr = dput(wr, (size_t)E * d * 4);
	float *db = dput(b, (size_t)E * 4);
	int tile = x4k_moe_tile(n_tok, k);
	size_t rb = x4k_moe_routes_bytes(n_tok, k, E, tile);
	void *rws = dalloc(rb);
	x4k_moe_routes r;
	int rc = x4k_moe_routes_init(&r, rws, rb, n_tok, k, E, tile, &err);
	if (!rc) {
		poison(r.sel, nr * 4);
		poison(r.wts, nr * 4);
		rc = x4k_moe_router(&r, dx, d, dwr, db, 2.0f, true, st, &err);
	}
	if (!rc)
		rc = x4k_moe_route_table(&r, st, &err);
	if (!rc)
		rc = x4_cuda_check(cudaStreamSynchronize(st), "router", &err);
	if (!rc)
		rc = x4r_moe_router(n_tok, d, E, k, x, wr, b, 2.0f, true, rsel, rwts, score, lmag, &err);
	if (rc) {
		T_OK(0, name, "%s: %s", cas, err.msg);
		goto out;
	}
	dget(sel, r.sel, nr * 4);
	dget(wts, r.wts, nr * 4);
	int bad = 0, near = 0;
	char why[200] = "";
	for (int t = 0; t < n_tok && !bad; t++) {
		const float *sc = score + (size_t)t * E, *lm = lmag + (size_t)t * E;
		int same = 1;
		double gsum = 0, lmax = 0;
		for (int j = 0; j < k; j++) {
			int a = sel[(size_t)t * k + j], c = rsel[(size_t)t * k + j];
			if (a < 0 || a >= E) {
				snprintf(why, sizeof why, "token %d slot %d: expert %d", t, j, a);
				bad = 1;
				break;
			}
			gsum += sc[c] - b[c];
			lmax = fmax(lmax, fmax(lm[a], lm[c]));
			if (a == c)
				continue;
			same = 0;
			if (tie || fabs((double)sc[a] - sc[c]) > 0.25 * TOL * fmax(lm[a], lm[c]) + 4 * 0x1p-24) {
				snprintf(why, sizeof why, "token %d slot %d: expert %d (score %.9g), ref %d (%.9g)",
					 t, j, a, sc[a], c, sc[c]);
				bad = 1;
			}
		}
		if (!same) {
			near++;
			continue;
		}
		/* w = 2 g / sum g: a logit error TOL*lmag moves g by a quarter of it */
		double wmag = 2.0 * (0.25 * lmax / gsum + 1.0);
		for (int j = 0; j < k && !bad; j++) {
			double dw = fabs((double)wts[(size_t)t * k + j] - rwts[(size_t)t * k + j]);
			if (isnan(wts[(size_t)t * k + j]) || dw > TOL * wmag) {
				snprintf(why, sizeof why, "token %d slot %d: weight %.9g, ref %.9g", t, j,
					 wts[(size_t)t * k + j], rwts[(size_t)t * k + j]);
				bad = 1;
			}
		}
		if (tie && !bad)
			for (int j = 0; j < k && !bad; j++)
				if (sel[(size_t)t * k + j] != tied[j] || wts[(size_t)t * k + j] != wts[(size_t)t * k]) {
					snprintf(why, sizeof why, "token %d slot %d: expert %d weight %.9g; want %d "
						 "and the same weight as slot 0", t, j, sel[(size_t)t * k + j],
						 wts[(size_t)t * k + j], tied[j]);
					bad = 1;
				}
	}
	if (nan_bias && !bad && memcmp(sel, rsel, nr * 4)) {
		snprintf(why, sizeof why, "the picks differ from the reference's (first token: %d %d, "
			 "ref %d %d)", sel[0], sel[k - 1], rsel[0], rsel[k - 1]);
		bad = 1;
	}
	T_OK(!bad, name, "%s: %s", cas, why);
	if (near && !nan_bias)
		printf("#   %s: %d tokens differ from the reference by a near tie only\n", cas, near);
	if (!tie)
		check_table(cas, &r, sel);
	{ /* x4k_moe_router_table: the same sel and wts bits, and a valid table */
		void *rws2 = dalloc(rb);
		x4k_moe_routes r2;
		int32_t *sel2 = hmalloc(nr * 4);
		float *wts2 = hmalloc(nr * 4);
		int rc2 = x4k_moe_routes_init(&r2, rws2, rb, n_tok, k, E, tile, &err);
		if (!rc2) {
			poison(rws2, rb);
			rc2 = x4k_moe_router_table(&r2, dx, d, dwr, db, 2.0f, true, st, &err);
		}
		if (!rc2)
			rc2 = x4_cuda_check(cudaStreamSynchronize(st), "router_table", &err);
		if (!rc2) {
			dget(sel2, r2.sel, nr * 4);
			dget(wts2, r2.wts, nr * 4);
		}
		char nm[80];
		snprintf(nm, sizeof nm, "moe router_table = router + route_table%s", tie ? " (tie)" : "");
		T_OK(!rc2 && !memcmp(sel, sel2, nr * 4) && !memcmp(wts, wts2, nr * 4), nm, "%s: %s", cas,
		     rc2 ? err.msg : "sel or wts differ");
		if (!rc2)
			check_table(cas, &r2, sel2);
		x4_dev_free(rws2);
		free(sel2), free(wts2);
	}
out:
	x4_dev_free(dx), x4_dev_free(dwr), x4_dev_free(db), x4_dev_free(rws);
	free(x), free(wr), free(b), free(sel), free(rsel), free(wts), free(rwts), free(score), free(lmag);
}

static void test_moe_router(void)
{
	test_router(1, 3584, 64, 4, 51, 0);
	test_router(37, 3584, 64, 4, 52, 0);
	test_router(512, 3584, 64, 4, 53, 0);
	test_router(3, 3584, 64, 4, 54, 1);
	test_router(4, 3584, 64, 4, 56, 2);
	test_router(5, 96, 7, 3, 55, 0);
}
