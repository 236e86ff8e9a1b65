/*
 * trunk_cpu.c - the CPU reference trunk's frame: the thread pool, the
 * latent KV cache, the YaRN table, the checks a forward makes before any
 * work, and the choice between the float and double instances of the one
 * forward pass in lib/cpu/trunk_cpu_tmpl.h.
 */
#include "trunk_int.h"
#include "blockfmt.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

/* ---- the pool ---- */

/* Workers sleep on a condition variable between dispatches; a decode step
 * makes a few hundred dispatches, so creating threads per product (as
 * x4_parallel_for does) would cost more than the tiny preset's work. */
struct x4_pool {
	int n;
	pthread_t *th;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	uint64_t gen;
	int busy;
	bool quit;
	void (*fn)(void *, int64_t, int);
	void *arg;
	int64_t ntask;
	atomic_llong next;
};

struct pool_start {
	x4_pool *p;
	int id;
};

static void pool_work(x4_pool *p, int id)
{
	for (;;) {
		int64_t i = atomic_fetch_add(&p->next, 1);
		if (i >= p->ntask)
			return;
		p->fn(p->arg, i, id);
	}
}

static void *pool_main(void *arg)
{
	struct pool_start st = *(struct pool_start *)arg;
	free(arg);
	x4_pool *p = st.p;
	uint64_t seen = 0;
	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (p->gen == seen && !p->quit)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->quit) {
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		seen = p->gen;
		pthread_mutex_unlock(&p->mu);
		pool_work(p, st.id);
		pthread_mutex_lock(&p->mu);
		if (--p->busy == 0)
			pthread_cond_signal(&p->done);
		pthread_mutex_unlock(&p->mu);
	}
}

int x4_pool_create(x4_pool **out, int nthreads, x4_err *e)
{
	*out = NULL;
	x4_pool *p = x4_calloc(1, sizeof *p, "the thread pool", e);
	if (!p)
		return X4_ENOMEM;
	p->n = nthreads < 1 ? 1 : nthreads;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	p->th = x4_calloc((size_t)p->n, sizeof *p->th, "the thread pool", e);
	if (!p->th) {
		x4_pool_free(p);
		return X4_ENOMEM;
	}
	for (int i = 1; i < p->n; i++) {
		struct pool_start *st = malloc(sizeof *st);
		if (st) {
			st->p = p;
			st->id = i;
		}
		if (!st || pthread_create(&p->th[i], NULL, pool_main, st) != 0) {
			free(st);
			p->n = i; /* free() joins the ones started */
			x4_pool_free(p);
			return x4_err_set(e, X4_ENOMEM, "could not start CPU thread %d of %d", i,
					  nthreads);
		}
	}
	*out = p;
	return 0;
}

void x4_pool_free(x4_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->quit = true;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; p->th && i < p->n; i++)
		pthread_join(p->th[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	free(p->th);
	free(p);
}

int x4_pool_size(const x4_pool *p) { return p->n; }

void x4_pool_run(x4_pool *p, int64_t n, void (*fn)(void *, int64_t, int), void *arg)
{
	if (p->n == 1 || n == 1) {
		for (int64_t i = 0; i < n; i++)
			fn(arg, i, 0);
		return;
	}
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->ntask = n;
	atomic_store(&p->next, 0);
	p->busy = p->n - 1;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	pool_work(p, 0);
	pthread_mutex_lock(&p->mu);
	while (p->busy > 0)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

/* ---- weight rows ---- */

/* A weight row to float: lib/blockfmt.h's decode (x4_dequant's values, bit
 * for bit), compiled here with the vectorizer on: one call a weight row is
 * the CPU trunk's inner loop.  The binding admitted only the types of each
 * tensor's role; a type without a decode (a format added to the table but
 * not to x4b_decode_row) gives NaNs, which reach the logits (the
 * generation's check refuses them, X4_ENUMERIC), not the last row's values. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-vectorize")))
#endif
void x4_cpu_dequant_row(int type, const void *src, float *y, uint64_t n)
{
	if (x4b_decode_row(type, src, y, n))
		for (uint64_t i = 0; i < n; i++)
			y[i] = NAN;
}

/* ---- YaRN ---- */

/* docs/forward.md 6.2: correction dims from beta_fast/slow, a linear ramp between
 * them, the interpolated (divided by the factor) and the original
 * frequency blended by it; computed in double and rounded to fp32 once,
 * as fp32 is what the angle product is formed in. */
void x4_yarn_freqs(const x4_config *c, float *omega)
{
	int dim = c->d_rope, half = dim / 2;
	double base = c->rope_base, orig = c->yarn_orig_ctx, f = c->yarn_factor;
	double lo = 0, hi = 1;
	if (f > 1) {
		lo = floor(dim * log(orig / (2 * M_PI * c->yarn_beta_fast)) / (2 * log(base)));
		hi = ceil(dim * log(orig / (2 * M_PI * c->yarn_beta_slow)) / (2 * log(base)));
		lo = lo < 0 ? 0 : lo;
		hi = hi > dim - 1 ? dim - 1 : hi;
		if (hi == lo)
			hi += 0.001; /* a zero-width ramp would divide by zero */
	}
	for (int i = 0; i < half; i++) {
		double w = pow(base, -2.0 * i / dim);
		if (f > 1) {
			double r = (i - lo) / (hi - lo);
			r = r < 0 ? 0 : r > 1 ? 1 : r;
			w *= (1 - r) + r / f;
		}
		omega[i] = (float)w;
	}
}

/* ---- create, forward ---- */

int x4_trunk_cpu_create(x4_trunk_cpu **out, const x4_model *m, const x4_trunk_opts *o,
			x4_err *e)
{
	*out = NULL;
	const x4_config *c = &m->c;
	int max_ctx = o->max_ctx; /* resolved and checked by lib/run/trunk.c */
	x4_trunk_cpu *t = x4_calloc(1, sizeof *t, "the CPU trunk", e);
	if (!t)
		return X4_ENOMEM;
	t->m = m;
	t->c = c;
	t->o = *o;
	t->max_ctx = max_ctx;
	t->nthr = o->threads ? o->threads : x4_ncpu();
	t->chunk = X4_MIN(o->prefill_chunk ? o->prefill_chunk : 64, max_ctx);
	t->cw = c->kv_lora + c->d_rope;
	const x4_gguf *g = m->g;
	for (int64_t i = 0; i < x4_gguf_tensor_count(g); i++)
		t->kmax = X4_MAX(t->kmax, (size_t)x4_gguf_tensor_at(g, i)->ne[0]);
	/* Twice the room: the F64 instance widens a row in place. */
	t->kmax *= 2;
	size_t cache_n = (size_t)c->n_block * (size_t)max_ctx * (size_t)t->cw;
	size_t cache_b = o->prec == X4_PREC_F64 ? sizeof(double) : sizeof(float);
	t->kv16 = o->kv == X4_KV_F16 || (o->kv == X4_KV_DEFAULT && o->prec == X4_PREC_F32);
	int rc = x4_pool_create(&t->pool, t->nthr, e);
	if (rc == 0) {
		t->omega = x4_alloc(sizeof(float) * (size_t)(c->d_rope / 2 + 1), "the rope table", e);
		t->cache = x4_alloc(cache_n * cache_b, "the KV cache (lower --max-model-len)", e);
		t->wrow = x4_calloc((size_t)t->nthr, sizeof *t->wrow, "the trunk", e);
		t->att = x4_calloc((size_t)t->nthr, sizeof *t->att, "the trunk", e);
		if (!t->omega || !t->cache || !t->wrow || !t->att)
			rc = X4_ENOMEM;
	}
	if (rc == 0) {
		x4_yarn_freqs(c, t->omega);
		rc = o->prec == X4_PREC_F64 ? x4_cpu_ws_alloc_f64(t, e) : x4_cpu_ws_alloc_f32(t, e);
	}
	if (rc) {
		x4_trunk_cpu_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

void x4_trunk_cpu_free(x4_trunk_cpu *t)
{
	if (!t)
		return;
	if (t->o.prec == X4_PREC_F64)
		x4_cpu_ws_free_f64(t);
	else
		x4_cpu_ws_free_f32(t);
	for (int i = 0; i < t->nthr; i++) {
		if (t->wrow)
			free(t->wrow[i]);
		if (t->att)
			free(t->att[i]);
	}
	free(t->wrow);
	free(t->att);
	free(t->cache);
	free(t->omega);
	x4_pool_free(t->pool);
	free(t);
}

/* The length is what says how much of the cache is context; the rows are
 * overwritten by the next prefill (the shared-cache bug of docs/record.md 7). */
void x4_trunk_cpu_reset(x4_trunk_cpu *t) { t->pos = 0; }

int x4_trunk_cpu_pos(const x4_trunk_cpu *t) { return t->pos; }

/* The cache and the length are all the state a position leaves: the rope
 * angles are made from the position at each forward, and the workspaces
 * hold one chunk's activations, written before they are read. */
static size_t elem_bytes(const x4_trunk_cpu *t)
{
	return t->o.prec == X4_PREC_F64 ? sizeof(double) : sizeof(float);
}

uint64_t x4_trunk_cpu_row_bytes(const x4_trunk_cpu *t)
{
	return (uint64_t)t->c->n_block * (uint64_t)t->cw * elem_bytes(t);
}

void x4_trunk_cpu_cache_read(const x4_trunk_cpu *t, int from, int n, void *rows)
{
	size_t lb = (size_t)t->cw * elem_bytes(t), rb = (size_t)x4_trunk_cpu_row_bytes(t);
	for (int b = 0; b < t->c->n_block; b++) {
		const char *src = (const char *)t->cache + ((size_t)b * (size_t)t->max_ctx + (size_t)from) * lb;
		for (int p = 0; p < n; p++)
			memcpy((char *)rows + (size_t)p * rb + (size_t)b * lb, src + (size_t)p * lb, lb);
	}
}

void x4_trunk_cpu_cache_write(x4_trunk_cpu *t, int n, const void *rows)
{
	size_t lb = (size_t)t->cw * elem_bytes(t), rb = (size_t)x4_trunk_cpu_row_bytes(t);
	for (int b = 0; b < t->c->n_block; b++) {
		char *dst = (char *)t->cache + (size_t)b * (size_t)t->max_ctx * lb;
		for (int p = 0; p < n; p++)
			memcpy(dst + (size_t)p * lb, (const char *)rows + (size_t)p * rb + (size_t)b * lb, lb);
	}
	t->pos = n;
}

void x4_trunk_cpu_set_probe(x4_trunk_cpu *t, x4_probe_fn fn, void *ctx)
{
	t->probe = fn;
	t->probe_ctx = ctx;
}

int x4_trunk_cpu_forward(x4_trunk_cpu *t, const int32_t *ids, int n, float *logits,
			 bool all_logits, x4_err *e)
{
	/* The arguments were checked by lib/run/trunk.c. */
	if (t->o.prec == X4_PREC_F64)
		x4_cpu_forward_f64(t, ids, n, logits, all_logits);
	else
		x4_cpu_forward_f32(t, ids, n, logits, all_logits);
	t->pos += n;
	return 0;
}
