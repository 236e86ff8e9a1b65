/*
 * moe_experts.h - kernels/moe_experts.cu (x4k_moe_experts, x4k_moe_reduce:
 * the routed experts, IQ4_NL and Q8_0) against x4r_moe_experts
 * (lib/ref/ref_moe.c), by the mag-relative rule (gpu_harness.h), on route
 * tables that moe_router.h's check_table checks.
 */

/* Expert weights: gate, up [n_expert][f][d], down [n_expert][d][f]. */
struct moe_w {
	int type, d, f, n_expert;
	size_t gb, db; /* bytes of gate (= up) and of down */
	uint8_t *g, *u, *dn;
	void *dg, *du, *ddn;
};

static void moe_w_make(struct moe_w *m, int type, int d, int f, int n_expert, uint64_t seed)
{
	m->type = type, m->d = d, m->f = f, m->n_expert = n_expert;
	m->gb = x4_type_bytes(type, (uint64_t)n_expert * f * d);
	m->db = m->gb;
	m->g = hmalloc(m->gb), m->u = hmalloc(m->gb), m->dn = hmalloc(m->db);
	rng_seed(seed);
	fill_weights(type, m->g, (size_t)n_expert * f, d);
	fill_weights(type, m->u, (size_t)n_expert * f, d);
	fill_weights(type, m->dn, (size_t)n_expert * d, f);
	m->dg = dput(m->g, m->gb), m->du = dput(m->u, m->gb), m->ddn = dput(m->dn, m->db);
}

static void moe_w_free(struct moe_w *m)
{
	free(m->g), free(m->u), free(m->dn);
	x4_dev_free(m->dg), x4_dev_free(m->du), x4_dev_free(m->ddn);
}

/* k distinct experts a token; with skew >= 0 every token also takes that one. */
static void random_routes(int n_tok, int k, int n_expert, int skew, int32_t *sel, float *wts)
{
	for (int t = 0; t < n_tok; t++) {
		int32_t *s = sel + (size_t)t * k;
		int forced = skew >= 0 ? (int)(rnd() % (uint64_t)k) : -1;
		for (int j = 0; j < k; j++) {
			int ex, dup;
			do {
				ex = j == forced ? skew : (int)(rnd() % (uint64_t)n_expert);
				dup = 0;
				for (int i = 0; i < j; i++)
					dup |= s[i] == ex;
				if (j != forced && skew >= 0 && ex == skew)
					dup = 1;
			} while (dup);
			s[j] = ex;
			wts[(size_t)t * k + j] = unif(0.1f, 0.6f);
		}
	}
}

struct moe_run {
	x4k_moe_routes r;
	void *rws, *ews;
	size_t ews_bytes;
	float *dx, *dshared, *dy;
};

static int moe_forward(struct moe_run *m, const struct moe_w *w, bool table)
{
	poison(m->ews, m->ews_bytes);
	poison(m->dy, (size_t)m->r.n_tok * w->d * 4);
	const float *out;
	if (table && x4k_moe_route_table(&m->r, st, &err))
		return -1;
	if (x4k_moe_experts(&m->r, w->type, m->dx, w->d, w->f, w->dg, w->du, w->ddn, m->ews,
			    m->ews_bytes, &out, st, &err) ||
	    x4k_moe_reduce(&m->r, out, m->dshared, w->d, m->dy, st, &err))
		return -1;
	return x4_cuda_check(cudaStreamSynchronize(st), "moe kernels", &err);
}

/* Routed experts for random routes against the reference, then the same
 * bits twice, for a permuted route table and for permuted slots. */
static void test_experts(const char *label, const struct moe_w *w, int n_tok, int k, int tile,
			 int skew, uint64_t seed)
{
	int d = w->d, E = w->n_expert;
	size_t nr = (size_t)n_tok * k;
	char cas[200], name[96];
	/* tiles of 64 routes run on x4k_gemm_mma_get()'s core (gemm_quant.h) */
	const char *core = tile == 64 ? gemm_core() : "gemv";
	snprintf(cas, sizeof cas, "op moe_experts type %s d %d f %d experts %d k %d tokens %d tile %d "
		 "seed %llu core %s", x4_type_name(w->type), d, w->f, E, k, n_tok, tile,
		 (unsigned long long)seed, core);
	snprintf(name, sizeof name, "moe experts %s %s tile %d %s", x4_type_name(w->type), label, tile, core);
	if (!t_want("moe_experts", cas))
		return;
	rng_seed(seed);
	float *x = hmalloc((size_t)n_tok * d * 4), *sh = hmalloc((size_t)n_tok * d * 4);
	int32_t *sel = hmalloc(nr * 4);
	float *wts = hmalloc(nr * 4);
	fill_x(x, (size_t)n_tok * d);
	fill_x(sh, (size_t)n_tok * d);
	random_routes(n_tok, k, E, skew, sel, wts);
	float *ref = hmalloc((size_t)n_tok * d * 4), *mag = hmalloc((size_t)n_tok * d * 4);
	float *y1 = hmalloc((size_t)n_tok * d * 4), *y2 = hmalloc((size_t)n_tok * d * 4);
	struct moe_run m;
	size_t rb = x4k_moe_routes_bytes(n_tok, k, E, tile);
	m.rws = dalloc(rb);
	m.ews_bytes = x4k_moe_experts_workspace_bytes(n_tok, k, d, w->f);
	m.ews = dalloc(m.ews_bytes);
	m.dx = dput(x, (size_t)n_tok * d * 4);
	m.dshared = dput(sh, (size_t)n_tok * d * 4);
	m.dy = dalloc((size_t)n_tok * d * 4);
	if (x4k_moe_routes_init(&m.r, m.rws, rb, n_tok, k, E, tile, &err) ||
	    x4_dev_upload(m.r.sel, sel, nr * 4, "sel", &err) ||
	    x4_dev_upload(m.r.wts, wts, nr * 4, "wts", &err) || moe_forward(&m, w, true)) {
		T_OK(0, name, "%s: %s", cas, err.msg);
		goto out;
	}
	check_table(cas, &m.r, sel);
	dget(y1, m.dy, (size_t)n_tok * d * 4);
	if (x4r_moe_experts(w->type, n_tok, d, w->f, E, k, x, w->g, w->u, w->dn, sel, wts, sh, ref,
			    mag, &err)) {
		T_OK(0, name, "%s: reference: %s", cas, err.msg);
		goto out;
	}
	compare(name, cas, y1, ref, mag, (size_t)n_tok * d);

	/* the same bits on a second run */
	snprintf(name, sizeof name, "moe experts %s %s tile %d %s bit-identical rerun",
		 x4_type_name(w->type), label, tile, core);
	int rc = moe_forward(&m, w, true);
	if (!rc)
		dget(y2, m.dy, (size_t)n_tok * d * 4);
	T_OK(!rc && !memcmp(y1, y2, (size_t)n_tok * d * 4), name, "%s: %s", cas,
	     rc ? err.msg : "outputs differ");

	/* a permuted route table: each expert's routes shuffled */
	int32_t *route = hmalloc(nr * 4), *off = hmalloc(((size_t)E + 1) * 4);
	dget(route, m.r.route, nr * 4);
	dget(off, m.r.offsets, ((size_t)E + 1) * 4);
	for (int ex = 0; ex < E; ex++)
		for (int i = off[ex + 1] - 1; i > off[ex]; i--) {
			int j = off[ex] + (int)(rnd() % (uint64_t)(i - off[ex] + 1));
			int32_t tmp = route[i];
			route[i] = route[j];
			route[j] = tmp;
		}
	snprintf(name, sizeof name, "moe experts %s %s tile %d %s bit-identical permuted table",
		 x4_type_name(w->type), label, tile, core);
	rc = x4_dev_upload(m.r.route, route, nr * 4, "route", &err);
	if (!rc)
		rc = moe_forward(&m, w, false);
	if (!rc)
		dget(y2, m.dy, (size_t)n_tok * d * 4);
	T_OK(!rc && !memcmp(y1, y2, (size_t)n_tok * d * 4), name, "%s: %s", cas,
	     rc ? err.msg : "outputs differ");

	/* permuted slots: each token's slots reversed, with their weights */
	for (int t = 0; t < n_tok; t++)
		for (int j = 0; j < k / 2; j++) {
			size_t a = (size_t)t * k + j, b = (size_t)t * k + k - 1 - j;
			int32_t ts = sel[a];
			float tw = wts[a];
			sel[a] = sel[b], wts[a] = wts[b];
			sel[b] = ts, wts[b] = tw;
		}
	snprintf(name, sizeof name, "moe experts %s tile %d %s bit-identical permuted slots", label, tile,
		 core);
	rc = x4_dev_upload(m.r.sel, sel, nr * 4, "sel", &err);
	if (!rc)
		rc = x4_dev_upload(m.r.wts, wts, nr * 4, "wts", &err);
	if (!rc)
		rc = moe_forward(&m, w, true);
	if (!rc)
		dget(y2, m.dy, (size_t)n_tok * d * 4);
	T_OK(!rc && !memcmp(y1, y2, (size_t)n_tok * d * 4), name, "%s: %s", cas,
	     rc ? err.msg : "outputs differ");
	free(route), free(off);
out:
	x4_dev_free(m.rws), x4_dev_free(m.ews), x4_dev_free(m.dx), x4_dev_free(m.dshared);
	x4_dev_free(m.dy);
	free(x), free(sh), free(sel), free(wts), free(ref), free(mag), free(y1), free(y2);
}

/* One token's x4k_moe_experts_sum case: the shared down's weights, x, the
 * shared expert's h, k random routes and their table, on the host and the
 * device (from seed). */
struct sum_case {
	int d, f, E, k, sd_type;
	size_t sb, eb;
	uint8_t *sdn, *sg, *su; /* the shared down, gate and up */
	float *x, *shh, *wts;
	int32_t *sel;
	x4k_moe_routes r;
	void *rws, *ews, *dsdn, *dsg, *dsu;
	float *dx, *dsh, *dy;
};

static int sum_case_make(struct sum_case *c, const struct moe_w *w, int sd_type, int k, uint64_t seed)
{
	const int d = w->d, f = w->f, E = w->n_expert;
	c->d = d, c->f = f, c->E = E, c->k = k, c->sd_type = sd_type;
	rng_seed(seed);
	c->sb = x4_type_bytes(sd_type, (uint64_t)d * f);
	c->sdn = hmalloc(c->sb), c->sg = hmalloc(c->sb), c->su = hmalloc(c->sb);
	fill_weights(sd_type, c->sdn, (size_t)d, f);
	fill_weights(sd_type, c->sg, (size_t)f, d);
	fill_weights(sd_type, c->su, (size_t)f, d);
	c->x = hmalloc((size_t)d * 4), c->shh = hmalloc((size_t)f * 4), c->wts = hmalloc((size_t)k * 4);
	c->sel = hmalloc((size_t)k * 4);
	fill_x(c->x, (size_t)d);
	fill_x(c->shh, (size_t)f);
	random_routes(1, k, E, -1, c->sel, c->wts);
	const size_t rb = x4k_moe_routes_bytes(1, k, E, 4);
	c->eb = x4k_moe_experts_workspace_bytes(1, k, d, f);
	c->rws = dalloc(rb), c->ews = dalloc(c->eb), c->dsdn = dput(c->sdn, c->sb);
	c->dsg = dput(c->sg, c->sb), c->dsu = dput(c->su, c->sb);
	c->dx = dput(c->x, (size_t)d * 4), c->dsh = dput(c->shh, (size_t)f * 4), c->dy = dalloc((size_t)d * 4);
	return x4k_moe_routes_init(&c->r, c->rws, rb, 1, k, E, 4, &err) ||
	       x4_dev_upload(c->r.sel, c->sel, (size_t)k * 4, "sel", &err) ||
	       x4_dev_upload(c->r.wts, c->wts, (size_t)k * 4, "wts", &err) ||
	       x4k_moe_route_table(&c->r, st, &err);
}

/* x4k_moe_experts_sum on the case into y (host, [d]), the workspace and
 * the output poisoned first; with gu, the shared gate and up too, sh
 * (host, [f]) receiving the product it forms (else the case's h is the
 * input). */
static int sum_case_run_gu(struct sum_case *c, const struct moe_w *w, float *y, bool gu, float *sh)
{
	poison(c->ews, c->eb);
	poison(c->dy, (size_t)c->d * 4);
	float *dsh = gu ? dalloc((size_t)c->f * 4) : c->dsh;
	if (gu)
		poison(dsh, (size_t)c->f * 4);
	int rc = x4k_moe_experts_sum(&c->r, NULL, w->type, c->dx, c->d, c->f, w->dg, w->du, w->ddn, c->sd_type,
				     gu ? c->dsg : NULL, gu ? c->dsu : NULL, c->dsdn, dsh, c->ews, c->eb,
				     c->dy, st, &err) ||
		 x4_cuda_check(cudaStreamSynchronize(st), "x4k_moe_experts_sum", &err);
	if (!rc)
		dget(y, c->dy, (size_t)c->d * 4);
	if (!rc && gu)
		dget(sh, dsh, (size_t)c->f * 4);
	if (gu)
		x4_dev_free(dsh);
	return rc;
}

static int sum_case_run(struct sum_case *c, const struct moe_w *w, float *y)
{
	return sum_case_run_gu(c, w, y, false, NULL);
}

static void sum_case_free(struct sum_case *c)
{
	x4_dev_free(c->rws), x4_dev_free(c->ews), x4_dev_free(c->dsdn), x4_dev_free(c->dx);
	x4_dev_free(c->dsg), x4_dev_free(c->dsu), x4_dev_free(c->dsh), x4_dev_free(c->dy);
	free(c->sdn), free(c->sg), free(c->su), free(c->x), free(c->shh), free(c->wts), free(c->sel);
}

/* x4k_moe_experts_sum forming the shared expert's product itself (its
 * gate and up given: on the tensor cores, one more column of blocks in the
 * experts' gate/up launch) against x4k_gemv_swiglu's product handed to it:
 * the product and y the same bits, with the switch off (mma 0) and on, and
 * on the tensor cores with each warp copying its own slice too. */
static void test_experts_sum_shared(const char *label, const struct moe_w *w, int sd_type, int k,
				    uint64_t seed, int mma)
{
	int d = w->d, f = w->f;
	char cas[200], name[128];
	snprintf(cas, sizeof cas, "op moe_experts sum type %s shared %s d %d f %d experts %d k %d "
		 "seed %llu shared gate/up core %s", x4_type_name(w->type), x4_type_name(sd_type), d, f,
		 w->n_expert, k, (unsigned long long)seed, mma ? "mma" : "fma");
	snprintf(name, sizeof name, "moe experts sum %s %s %s: shared gate/up inside = x4k_gemv_swiglu",
		 x4_type_name(w->type), label, mma ? "mma" : "fma");
	if (!t_want("moe_experts", cas))
		return;
	const int was = x4k_gemm_mma_get();
	x4k_gemm_mma_set(mma);
	struct sum_case c;
	float *y1 = hmalloc((size_t)d * 4), *y2 = hmalloc((size_t)d * 4);
	float *h1 = hmalloc((size_t)f * 4), *h2 = hmalloc((size_t)f * 4);
	float *g = dalloc((size_t)f * 4), *u = dalloc((size_t)f * 4);
	int rc = sum_case_make(&c, w, sd_type, k, seed) ||
		 x4k_gemv_swiglu(sd_type, c.dsg, c.dsu, f, d, c.dx, g, u, c.dsh, st, &err) ||
		 sum_case_run(&c, w, y1);
	if (!rc)
		dget(h1, c.dsh, (size_t)f * 4);
	for (int copy = 1; copy >= (mma ? 0 : 1); copy--) {
		x4k_tc_copy_set(copy);
		if (!rc)
			rc = sum_case_run_gu(&c, w, y2, true, h2);
		char nm[160];
		snprintf(nm, sizeof nm, "%s%s", name, copy ? "" : " (warp copy)");
		T_OK(!rc && !memcmp(h1, h2, (size_t)f * 4) && !memcmp(y1, y2, (size_t)d * 4), nm, "%s: %s",
		     cas, rc ? err.msg : memcmp(h1, h2, (size_t)f * 4) ? "shared products differ" : "outputs differ");
	}
	x4k_tc_copy_set(1);
	x4k_gemm_mma_set(was);
	sum_case_free(&c);
	x4_dev_free(g), x4_dev_free(u);
	free(y1), free(y2), free(h1), free(h2);
}

/* x4k_moe_experts_sum selecting the routes itself (pick: the router's
 * logits only before it; on the tensor cores each routed block selects its
 * own expert and the first writes the table) against the router's own
 * selection and table before the call: y, the shared product, sel, wts
 * and every array of the table the same bits, with the switch off (mma 0:
 * the selection's launch first) and on, block and warp copy.  mode 1: an
 * exact tie of five experts (equal router rows and biases) that the lower
 * ids must win (where the experts are that many); mode 2: every bias NaN
 * but two, the rest picked by id. */
static void test_experts_sum_pick(const char *label, const struct moe_w *w, int k, uint64_t seed, int mma,
				  int mode)
{
	static const int tied[] = { 1, 2, 3, 4, 6, 9, 12, 13 };
	const int d = w->d, f = w->f, E = w->n_expert;
	char cas[220], name[160];
	snprintf(cas, sizeof cas, "op moe_experts sum type %s d %d f %d experts %d k %d seed %llu pick core "
		 "%s%s", x4_type_name(w->type), d, f, E, k, (unsigned long long)seed, mma ? "mma" : "fma",
		 mode == 1 ? " exact-tie" : mode == 2 ? " nan-bias" : "");
	snprintf(name, sizeof name, "moe experts sum %s %s %s%s: own selection = the router's table",
		 x4_type_name(w->type), label, mma ? "mma" : "fma",
		 mode == 1 ? " (tie)" : mode == 2 ? " (NaN bias)" : "");
	if (!t_want("moe_experts", cas))
		return;
	const int was = x4k_gemm_mma_get();
	x4k_gemm_mma_set(mma);
	struct sum_case c;
	int rc = sum_case_make(&c, w, X4_T_IQ4_NL, k, seed);
	float *wr = hmalloc((size_t)E * d * 4), *b = hmalloc((size_t)E * 4);
	for (size_t i = 0; i < (size_t)E * d; i++)
		wr[i] = unif(-0.05f, 0.05f);
	for (int i = 0; i < E; i++)
		b[i] = mode == 2 ? (i == 1 || i == E - 1 ? 0.5f : NAN) : unif(-0.1f, 0.1f);
	for (size_t i = 1; mode == 1 && i < X4_ARRAY_LEN(tied) && tied[i] < E; i++) {
		memcpy(wr + (size_t)tied[i] * d, wr + (size_t)tied[0] * d, (size_t)d * 4);
		b[tied[i]] = b[tied[0]] = 1.0f;
	}
	float *dwr = dput(wr, (size_t)E * d * 4), *db = dput(b, (size_t)E * 4);
	const x4k_moe_pick pk = { db, 2.0f, true };
	const size_t rb = x4k_moe_routes_bytes(1, k, E, 4), n_arr = (size_t)3 * k + 2 * E + 1 + 2 * k + 1;
	void *rws[2] = { dalloc(rb), dalloc(rb) };
	float *dsh = dalloc((size_t)f * 4);
	float *y[2] = { hmalloc((size_t)d * 4), hmalloc((size_t)d * 4) };
	float *h[2] = { hmalloc((size_t)f * 4), hmalloc((size_t)f * 4) };
	int32_t *tab[2] = { hmalloc(n_arr * 4), hmalloc(n_arr * 4) };
	for (int copy = 1; copy >= (mma ? 0 : 1) && !rc; copy--) {
		x4k_tc_copy_set(copy);
		for (int arm = 0; arm < 2 && !rc; arm++) {
			x4k_moe_routes r;
			poison(rws[arm], rb), poison(c.ews, c.eb), poison(c.dy, (size_t)d * 4), poison(dsh, (size_t)f * 4);
			rc = x4k_moe_routes_init(&r, rws[arm], rb, 1, k, E, 4, &err) ||
			     (arm ? x4k_moe_router_logits(&r, c.dx, d, dwr, st, &err)
				  : x4k_moe_router_table(&r, c.dx, d, dwr, db, 2.0f, true, st, &err)) ||
			     x4k_moe_experts_sum(&r, arm ? &pk : NULL, w->type, c.dx, d, f, w->dg, w->du, w->ddn,
						 X4_T_IQ4_NL, c.dsg, c.dsu, c.dsdn, dsh, c.ews, c.eb, c.dy, st, &err) ||
			     x4_cuda_check(cudaStreamSynchronize(st), "x4k_moe_experts_sum", &err);
			if (rc)
				break;
			dget(y[arm], c.dy, (size_t)d * 4);
			dget(h[arm], dsh, (size_t)f * 4);
			int32_t *t = tab[arm];
			dget(t, r.sel, (size_t)k * 4), t += k;
			dget(t, r.wts, (size_t)k * 4), t += k;
			dget(t, r.route, (size_t)k * 4), t += k;
			dget(t, r.counts, (size_t)E * 4), t += E;
			dget(t, r.offsets, (size_t)(E + 1) * 4), t += E + 1;
			dget(t, r.n_tiles, 4);
			const int nt = *t++;
			memset(t, 0, (size_t)2 * k * 4);
			if (nt >= 0 && nt <= k) {
				dget(t, r.tile_expert, (size_t)nt * 4);
				dget(t + k, r.tile_start, (size_t)nt * 4);
			}
			if (arm)
				check_table(cas, &r, tab[1]);
		}
		char nm[200];
		snprintf(nm, sizeof nm, "%s%s", name, copy ? "" : " (warp copy)");
		T_OK(!rc && !memcmp(tab[0], tab[1], n_arr * 4) && !memcmp(h[0], h[1], (size_t)f * 4) &&
		     !memcmp(y[0], y[1], (size_t)d * 4), nm, "%s: %s", cas,
		     rc ? err.msg : memcmp(tab[0], tab[1], n_arr * 4) ? "the selection or table differs"
				  : memcmp(h[0], h[1], (size_t)f * 4) ? "shared products differ" : "outputs differ");
		if (!rc && mode == 1 && tied[k - 1] < E)
			T_OK(!memcmp(tab[1], tied, (size_t)k * 4), "moe experts sum own selection: the tie to the "
			     "lower ids", "%s: picks %d %d, want %d %d", cas, tab[1][0], tab[1][k - 1], tied[0],
			     tied[k - 1]);
	}
	x4k_tc_copy_set(1);
	x4k_gemm_mma_set(was);
	sum_case_free(&c);
	x4_dev_free(dwr), x4_dev_free(db), x4_dev_free(rws[0]), x4_dev_free(rws[1]), x4_dev_free(dsh);
	free(wr), free(b), free(y[0]), free(y[1]), free(h[0]), free(h[1]), free(tab[0]), free(tab[1]);
}

/* x4k_moe_experts_sum (one token: the experts and both downs summed in the
 * fused down kernel where it applies, else three launches) with the
 * products' switch off, against the three launches it stands for,
 * x4k_moe_experts + x4k_gemv of the shared down + x4k_moe_reduce, which
 * test_experts checks against the reference: the same bits, on every run. */
static void test_experts_sum(const char *label, const struct moe_w *w, int sd_type, int k,
			     uint64_t seed)
{
	int d = w->d, f = w->f, E = w->n_expert;
	char cas[200], name[96];
	snprintf(cas, sizeof cas, "op moe_experts sum type %s shared %s d %d f %d experts %d k %d "
		 "seed %llu", x4_type_name(w->type), x4_type_name(sd_type), d, f, E, k,
		 (unsigned long long)seed);
	snprintf(name, sizeof name, "moe experts sum %s %s bit-identical to three launches",
		 x4_type_name(w->type), label);
	if (!t_want("moe_experts", cas))
		return;
	const int was = x4k_gemm_mma_get();
	x4k_gemm_mma_set(0); /* the register core's bits (test_experts_sum_tc: the tensor cores') */
	struct sum_case c;
	float *y1 = hmalloc((size_t)d * 4), *y2 = hmalloc((size_t)d * 4), *y3 = hmalloc((size_t)d * 4);
	float *dshared = dalloc((size_t)d * 4);
	const float *out;
	int rc = sum_case_make(&c, w, sd_type, k, seed) ||
		 x4k_moe_experts(&c.r, w->type, c.dx, d, f, w->dg, w->du, w->ddn, c.ews, c.eb, &out, st, &err) ||
		 x4k_gemv(sd_type, c.dsdn, d, f, c.dsh, dshared, st, &err) ||
		 x4k_moe_reduce(&c.r, out, dshared, d, c.dy, st, &err) ||
		 x4_cuda_check(cudaStreamSynchronize(st), "three launches", &err);
	if (!rc)
		dget(y1, c.dy, (size_t)d * 4);
	if (!rc)
		rc = sum_case_run(&c, w, y2) || sum_case_run(&c, w, y3);
	T_OK(!rc && !memcmp(y1, y2, (size_t)d * 4) && !memcmp(y2, y3, (size_t)d * 4), name, "%s: %s",
	     cas, rc ? err.msg : "outputs differ");
	x4k_gemm_mma_set(was);
	sum_case_free(&c);
	x4_dev_free(dshared);
	free(y1), free(y2), free(y3);
}

/* x4k_moe_experts_sum with the products' switch on (x4k_gemm_mma_set(1)):
 * where the device and the shapes take them, the tensor-core launches of
 * kernels/gemv_tc.cuh, which are not the register core's bits; so against
 * the reference (the routed experts' x4r_moe_experts with the shared down's
 * x4r_gemv as its shared term, mags added), and the same bits twice.
 * test_experts_sum checks the register core's bits with the switch off. */
static void test_experts_sum_tc(const char *label, const struct moe_w *w, int sd_type, int k,
				uint64_t seed)
{
	int d = w->d, f = w->f, E = w->n_expert;
	char cas[200], name[96];
	snprintf(cas, sizeof cas, "op moe_experts sum type %s shared %s d %d f %d experts %d k %d "
		 "seed %llu core mma", x4_type_name(w->type), x4_type_name(sd_type), d, f, E, k,
		 (unsigned long long)seed);
	snprintf(name, sizeof name, "moe experts sum %s %s mma", x4_type_name(w->type), label);
	if (!t_want("moe_experts", cas))
		return;
	const int was = x4k_gemm_mma_get();
	x4k_gemm_mma_set(1);
	struct sum_case c;
	float *y1 = hmalloc((size_t)d * 4), *y2 = hmalloc((size_t)d * 4);
	float *sref = hmalloc((size_t)d * 4), *smag = hmalloc((size_t)d * 4);
	float *ref = hmalloc((size_t)d * 4), *mag = hmalloc((size_t)d * 4);
	int rc = sum_case_make(&c, w, sd_type, k, seed) || sum_case_run(&c, w, y1) || sum_case_run(&c, w, y2);
	if (rc) {
		T_OK(0, name, "%s: %s", cas, err.msg);
	} else if (x4r_gemv(sd_type, c.sdn, d, f, c.shh, sref, smag, &err) ||
		   x4r_moe_experts(w->type, 1, d, f, E, k, c.x, w->g, w->u, w->dn, c.sel, c.wts, sref, ref,
				   mag, &err)) {
		T_OK(0, name, "%s: reference: %s", cas, err.msg);
	} else {
		for (int i = 0; i < d; i++)
			mag[i] += smag[i];
		compare(name, cas, y1, ref, mag, (size_t)d);
		char nm[128];
		snprintf(nm, sizeof nm, "%s bit-identical rerun", name);
		T_OK(!memcmp(y1, y2, (size_t)d * 4), nm, "%s: outputs differ", cas);
		/* each warp copying its own slice of the weights (x4k_tc_copy_set):
		 * the same operands in the same places, the same bits */
		x4k_tc_copy_set(0);
		rc = sum_case_run(&c, w, y2);
		x4k_tc_copy_set(1);
		snprintf(nm, sizeof nm, "%s warp copy = block copy", name);
		T_OK(!rc && !memcmp(y1, y2, (size_t)d * 4), nm, "%s: %s", cas, rc ? err.msg : "outputs differ");
	}
	x4k_gemm_mma_set(was);
	sum_case_free(&c);
	free(y1), free(y2), free(sref), free(smag), free(ref), free(mag);
}

/* Tiles of one route take the row-staged gemv core where the rows are
 * 16-byte aligned (k % 256 == 0) and fit its registers (moe_experts.cu):
 * every one-token case below and the tiles of one route among several
 * ("mixed tiles"), "tile 1" on the one-route grid of d / (8 * rows) down
 * blocks; 96 x 160 (rows of 54 and 90 bytes) and gate/up at d 4096 (2304
 * bytes a row, more than a lane's registers hold) keep the chunked core. */
/* test_experts on weights made for the one case */
static void test_shape(const char *label, int type, int d, int f, int n_expert, uint64_t wseed,
		       int n_tok, int k, int tile, int skew, uint64_t seed)
{
	struct moe_w w;
	moe_w_make(&w, type, d, f, n_expert, wseed);
	test_experts(label, &w, n_tok, k, tile, skew, seed);
	moe_w_free(&w);
}

/* The prefill tiles of 64 routes on each core (x4k_gemm_mma_set): the FMA
 * core's cases, then the tensor-core core's (kernels/gemm_mma.cuh, sm_80
 * and later) at the tiny preset's shape (d 256, f 128: down's IQ4_NL rows
 * of 72 bytes at every even offset of their lines, top-4 of 16) and the
 * model's (d 3584, f 1024, top-4 of 64) from one token to 600, an expert
 * taken by every token (skew: 2 and 3 tiles of it), in both formats. */
static void test_moe_prefill(int mma)
{
	const int was = x4k_gemm_mma_get();
	x4k_gemm_mma_set(mma);
	struct moe_w w;
	moe_w_make(&w, X4_T_IQ4_NL, 96, 160, 6, 61);
	test_experts("tiny", &w, 3, 2, 64, -1, 63);
	test_experts("tiny", &w, 70, 3, 64, 2, 64);
	moe_w_free(&w);
	moe_w_make(&w, X4_T_IQ4_NL, 256, 128, 16, 110);
	test_experts("tiny preset", &w, 37, 4, 64, 5, 111);
	test_experts("tiny preset", &w, 129, 4, 64, 5, 112);
	moe_w_free(&w);
	moe_w_make(&w, X4_T_IQ4_NL, 3584, 1024, 64, 71);
	test_experts("model prefill", &w, 1, 4, 64, -1, 113);
	test_experts("model prefill", &w, 70, 4, 64, 9, 74);
	test_experts("model prefill", &w, 130, 4, 64, 9, 114);
	if (mma)
		test_experts("model prefill", &w, 600, 4, 64, 9, 115);
	moe_w_free(&w);
	moe_w_make(&w, X4_T_Q8_0, 96, 160, 6, 76);
	test_experts("tiny", &w, 70, 3, 64, 2, 78);
	moe_w_free(&w);
	moe_w_make(&w, X4_T_Q8_0, 256, 128, 16, 116);
	test_experts("tiny preset", &w, 129, 4, 64, 5, 117);
	moe_w_free(&w);
	moe_w_make(&w, X4_T_Q8_0, 3584, 1024, 64, 79);
	test_experts("model prefill", &w, 70, 4, 64, 9, 81);
	test_experts("model prefill", &w, 130, 4, 64, 9, 118);
	moe_w_free(&w);
	x4k_gemm_mma_set(was);
}

static void test_moe_experts(void)
{
	test_moe_prefill(0);
	test_moe_prefill(1);

	struct moe_w tiny;
	moe_w_make(&tiny, X4_T_IQ4_NL, 96, 160, 6, 61);
	test_experts("tiny", &tiny, 3, 2, 4, -1, 62);
	test_experts("tiny", &tiny, 70, 3, 4, 2, 65);
	test_experts("tiny", &tiny, 1, 2, 4, -1, 82); /* one route a tile, on the chunked core */
	moe_w_free(&tiny);

	/* one token, row-staged: down's 512 rows end inside block 10 */
	test_shape("small decode", X4_T_IQ4_NL, 512, 768, 6, 66, 1, 3, 4, -1, 67);

	/* the row-staged core at a tiny size: down's 256 rows, 7 a warp, end
	 * inside the fifth block's fifth warp */
	struct moe_w tiny_row;
	moe_w_make(&tiny_row, X4_T_IQ4_NL, 256, 512, 5, 83);
	test_experts("tiny row", &tiny_row, 1, 3, 4, -1, 84);
	test_experts("tiny row", &tiny_row, 3, 3, 1, 1, 85); /* tiles of one, three of expert 1 */
	moe_w_free(&tiny_row);

	struct moe_w full_w;
	moe_w_make(&full_w, X4_T_IQ4_NL, 3584, 1024, 64, 71);
	test_experts("model decode", &full_w, 1, 4, 4, -1, 72);
	test_experts("model decode", &full_w, 2, 4, 4, 7, 73); /* a tile of 2 routes */
	/* expert 7: 5 routes, tiles of 4 and 1, beside ~15 tiles of one */
	test_experts("model mixed tiles", &full_w, 5, 4, 4, 7, 86);
	test_experts("model decode", &full_w, 3, 4, 1, 7, 87);
	test_experts("model prefill", &full_w, 70, 4, 4, 9, 75);
	test_experts_sum("model", &full_w, X4_T_IQ4_NL, 4, 98);
	test_experts_sum("model, 3 routes", &full_w, X4_T_IQ4_NL, 3, 99);
	test_experts_sum_tc("model", &full_w, X4_T_IQ4_NL, 4, 98);
	test_experts_sum_tc("model, 3 routes", &full_w, X4_T_IQ4_NL, 3, 99);
	test_experts_sum_tc("model, 1 route", &full_w, X4_T_IQ4_NL, 1, 105);
	for (int mma = 0; mma < 2; mma++) {
		test_experts_sum_shared("model", &full_w, X4_T_IQ4_NL, 4, 98, mma);
		test_experts_sum_shared("model, 1 route", &full_w, X4_T_IQ4_NL, 1, 105, mma);
		for (int mode = 0; mode < 3; mode++)
			test_experts_sum_pick("model", &full_w, 4, 110 + mode, mma, mode);
		test_experts_sum_pick("model, 1 route", &full_w, 1, 113, mma, 0);
		test_experts_sum_pick("model, top-8", &full_w, 8, 114, mma, 0);
	}
	moe_w_free(&full_w);
	/* the fused down at a small size (d 224: 14 blocks of 16 rows; d is a
	 * multiple of 32 as the gate's columns must be) and where it does not
	 * apply (f 160: rows of 90 bytes) */
	{
		struct moe_w a;
		moe_w_make(&a, X4_T_IQ4_NL, 224, 256, 5, 100);
		test_experts_sum("tiny", &a, X4_T_IQ4_NL, 2, 101);
		/* the tensor cores' smallest: d 16 rows, f and d one 256-value range */
		moe_w_free(&a);
		moe_w_make(&a, X4_T_IQ4_NL, 256, 256, 5, 106);
		test_experts_sum_tc("tiny", &a, X4_T_IQ4_NL, 2, 107);
		test_experts_sum_shared("tiny", &a, X4_T_IQ4_NL, 2, 107, 1);
		test_experts_sum_pick("tiny", &a, 2, 115, 1, 0);
		test_experts_sum_pick("tiny", &a, 3, 116, 1, 1);
		moe_w_free(&a);
		/* the largest they take: d 5120 (20 warps a gate/up block), top-4 */
		moe_w_make(&a, X4_T_IQ4_NL, 5120, 1024, 8, 108);
		test_experts_sum_tc("largest", &a, X4_T_IQ4_NL, 4, 109);
		test_experts_sum_shared("largest", &a, X4_T_IQ4_NL, 4, 109, 1);
		test_experts_sum_pick("largest", &a, 4, 117, 1, 2);
		moe_w_free(&a);
		/* odd d (224: 14 row tiles of 16, k not in 256s): the register core */
		moe_w_make(&a, X4_T_IQ4_NL, 224, 256, 5, 100);
		test_experts_sum_tc("tiny odd", &a, X4_T_IQ4_NL, 2, 101);
		test_experts_sum_shared("tiny odd", &a, X4_T_IQ4_NL, 2, 101, 1);
		test_experts_sum_pick("tiny odd", &a, 3, 118, 1, 0);
		moe_w_free(&a);
		moe_w_make(&a, X4_T_IQ4_NL, 96, 160, 6, 102);
		test_experts_sum("tiny, three launches", &a, X4_T_IQ4_NL, 2, 103);
		test_experts_sum_shared("tiny, three launches", &a, X4_T_IQ4_NL, 2, 103, 1);
		test_experts_sum_pick("tiny, three launches", &a, 2, 119, 1, 1);
		moe_w_free(&a);
	}

	/* larger: f 2048 (down 3 rows a warp, 24 a block: 3584 ends inside
	 * block 150), top-8 of 16; and d 4096, gate/up on the chunked core */
	test_shape("larger decode", X4_T_IQ4_NL, 3584, 2048, 16, 88, 1, 8, 4, -1, 89);
	struct moe_w big;
	moe_w_make(&big, X4_T_IQ4_NL, 4096, 1024, 16, 90);
	test_experts("wide decode", &big, 1, 8, 4, -1, 91);
	test_experts("wide mixed tiles", &big, 3, 8, 4, 5, 92);
	moe_w_free(&big);

	/* the second expert format, Q8_0, through the same kernels */
	struct moe_w q8;
	moe_w_make(&q8, X4_T_Q8_0, 96, 160, 6, 76);
	test_experts("tiny", &q8, 3, 2, 4, -1, 77);
	moe_w_free(&q8);
	test_shape("tiny row", X4_T_Q8_0, 256, 512, 5, 93, 1, 3, 4, -1, 94);
	moe_w_make(&q8, X4_T_Q8_0, 3584, 1024, 64, 79);
	test_experts("model decode", &q8, 1, 4, 4, -1, 80);
	test_experts("model mixed tiles", &q8, 5, 4, 4, 7, 95);
	/* Q8_0 experts beside an IQ4_NL shared expert (as x4-synth --expert-type
	 * q8_0 writes them): the three launches */
	test_experts_sum("model, three launches", &q8, X4_T_IQ4_NL, 4, 104);
	test_experts_sum_tc("model, three launches", &q8, X4_T_IQ4_NL, 4, 104);
	test_experts_sum_shared("model, three launches", &q8, X4_T_IQ4_NL, 4, 104, 1);
	test_experts_sum_pick("model, three launches", &q8, 4, 120, 1, 0);
	moe_w_free(&q8);
	test_shape("larger decode", X4_T_Q8_0, 3584, 2048, 16, 96, 1, 8, 4, -1, 97);
}
