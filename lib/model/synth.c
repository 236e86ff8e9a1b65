/*
 * synth.c - synthetic weights for a xing4_0 layout.
 *
 * Quantised tensors are drawn directly as codes and block scales: no float
 * matrix is ever built or quantised, so the 20 GB full preset costs about
 * one RNG call per 8 bytes.  Each chunk of rows draws from its own
 * generator, seeded from (seed, tensor, chunk), so the file's bytes depend on
 * the seed alone and never on the thread count or the order chunks run in.
 *
 * Scale targets: a matrix applied to an RMS-normalised input of width K gets
 * a per-weight std of 1/sqrt(K), so its outputs are O(1) (docs/forward.md
 * 5.2 and 10.9: every sublayer and gate input has just been through an RMS
 * norm).
 */
#include "x4_int.h"
#include "blockfmt.h"

#include <math.h>
#include <pthread.h>

enum { CHUNK_BYTES = 2 << 20 };

/* RMS of the IQ4_NL codebook: sqrt(mean(K[i]^2)) = sqrt(72768 / 16). */
#define IQ4_RMS 67.4389f
/* RMS of a Q8_0 code uniform on -128..127: sqrt(1398144 / 256). */
#define Q8_RMS 73.9020f
/* RMS of Q6_K's (q - 32) for q uniform on 0..63: sqrt(21856 / 64). */
#define Q6_RMS 18.4797f
/* Q6_K sub-scales are drawn from +-[24, 40]: RMS about 32.3. */
#define Q6_SC_LO 24
#define Q6_SC_SPAN 17
#define Q6_SC_RMS 32.3f
/* fp16's smallest normal: BF16 weights at or above it cast to fp16 exactly (docs/numerics.md 1.9). */
#define F16_MIN_NORMAL 6.103515625e-05f

enum kind {
	K_BF16,     /* Gaussian-ish, std sigma */
	K_F32,      /* Gaussian-ish, std sigma */
	K_NORM,     /* RMS gains: 1 + N(0, 0.05) */
	K_HC_BASE,  /* [pre | post | comb] biases */
	K_HC_SCALE, /* (alpha_pre, alpha_post, alpha_comb) */
	K_BIAS,     /* the router's selection bias */
	K_IQ4,      /* IQ4_NL codes and scales, std sigma */
	K_Q6K,      /* Q6_K codes and scales, std sigma */
	K_Q8,       /* Q8_0 codes and scales, std sigma */
};

struct plan {
	int kind;
	float sigma;
	int block;
	bool experts;      /* a 3-D expert stack: row / ne[1] is the expert */
	uint64_t block_elems; /* values a block of the type (lib/blockfmt.h) */
	uint64_t row_elems, row_bytes, rows, rows_per_chunk;
	uint64_t first_chunk, n_chunks;
};

struct job {
	x4_gguf_writer *w;
	const x4_config *c;
	const x4_tensor_spec *t;
	struct plan *p;
	int n;
	const x4_synth_opts *o;
	uint64_t n_chunks, total, done;
	pthread_mutex_t mu;
	bool failed;
	x4_err err;
	/* chunk buffers, reused: a fresh 2 MB malloc per chunk costs more in
	 * page faults than drawing the chunk */
	unsigned char **pool; /* [n_pool] buffers of buf_bytes, n_free of them idle */
	int n_pool, n_free;
	size_t buf_bytes;
};

/* ---- the generator: splitmix64 seeds xoshiro256** ---- */

typedef struct rng {
	uint64_t s[4];
} rng;

static void rng_seed(rng *r, uint64_t seed, uint64_t tensor, uint64_t chunk)
{
	uint64_t x = seed;
	x = x4_splitmix64(&x) ^ (tensor * 0xd1342543de82ef95ull);
	x = x4_splitmix64(&x) ^ (chunk * 0xaf251af3b0f025b5ull);
	for (int i = 0; i < 4; i++)
		r->s[i] = x4_splitmix64(&x);
}

static inline uint64_t next(rng *r)
{
	return x4_xoshiro_next(r->s);
}

static inline float uniform(rng *r) /* [0, 1) */
{
	return (float)(next(r) >> 40) * (1.0f / 16777216.0f);
}

/* Sum of four uniforms, rescaled to unit variance: bell-shaped, bounded at
 * +-3.46, and one RNG call instead of a log and a cosine. */
static inline float gauss(rng *r)
{
	uint64_t x = next(r);
	uint32_t s = (uint32_t)(x & 0xffff) + (uint32_t)((x >> 16) & 0xffff) +
		     (uint32_t)((x >> 32) & 0xffff) + (uint32_t)(x >> 48);
	return ((float)s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

/* ---- what each tensor is for ---- */

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* 0, or X4_EINVAL for a tensor of a type x4 has no generator for, or a
 * control tensor (a norm's gain, a gate's bias) that is not F32. */
static int plan_tensor(const x4_config *c, const x4_tensor_spec *t, struct plan *p, x4_err *e)
{
	const char *rest = t->name;
	if (t->block >= 0 && strncmp(rest, "blk.", 4) == 0) {
		rest = strchr(rest + 4, '.');
		rest = rest ? rest + 1 : t->name;
	}
	memset(p, 0, sizeof *p);
	p->block = t->block;
	switch (t->type) {
	case X4_T_F32: p->kind = K_F32; break;
	case X4_T_BF16: p->kind = K_BF16; break;
	case X4_T_IQ4_NL: p->kind = K_IQ4; break;
	case X4_T_Q6_K: p->kind = K_Q6K; break;
	case X4_T_Q8_0: p->kind = K_Q8; break;
	default:
		return x4_err_set(e, X4_EINVAL, "synth: tensor %s is of type %d (%s), which x4 "
				  "has no weight generator for", t->name, t->type,
				  x4_type_name(t->type));
	}
	const int by_type = p->kind;
	p->sigma = 1.0f / sqrtf((float)t->ne[0]);
	if (strcmp(rest, "token_embd.weight") == 0 || strcmp(rest, "nextn.embed_tokens.weight") == 0) {
		p->sigma = 1.0f; /* embedding rows O(1); the streams start from them */
	} else if (strcmp(rest, "output.weight") == 0 ||
		   strcmp(rest, "nextn.shared_head_head.weight") == 0) {
		/* logits with a std of 2: a few units apart, softmax not saturated */
		p->sigma = 2.0f / sqrtf((float)t->ne[0]);
	} else if (strcmp(rest, "attn_k_b.weight") == 0) {
		/* k_nope = W_kb . c_kv sums over the latent (ne1), not ne0 */
		p->sigma = 1.0f / sqrtf((float)t->ne[1]);
	} else if (ends_with(rest, "norm.weight")) {
		p->kind = K_NORM;
	} else if (strncmp(rest, "hc_", 3) == 0 && ends_with(rest, "_base.weight")) {
		p->kind = K_HC_BASE;
	} else if (strncmp(rest, "hc_", 3) == 0 && ends_with(rest, "_scale.weight")) {
		p->kind = K_HC_SCALE;
	} else if (strcmp(rest, "exp_probs_b.bias") == 0) {
		p->kind = K_BIAS;
	}
	/* A kind chosen by the name is a control tensor's, written as F32
	 * values (draw_chunk's default). */
	if (p->kind != by_type && t->type != X4_T_F32)
		return x4_err_set(e, X4_EINVAL, "synth: tensor %s is of type %s, but its values "
				  "are drawn as F32", t->name, x4_type_name(t->type));
	p->experts = t->n_dims == 3 && ends_with(rest, "_exps.weight");
	p->block_elems = (uint64_t)x4b_block_elems(t->type);
	p->row_elems = t->ne[0];
	p->row_bytes = x4b_row_bytes(t->type, t->ne[0]);
	p->rows = t->ne[1] * t->ne[2] * t->ne[3];
	p->rows_per_chunk = X4_MAX(1, CHUNK_BYTES / p->row_bytes);
	p->n_chunks = (p->rows + p->rows_per_chunk - 1) / p->rows_per_chunk;
	(void)c;
	return 0;
}

/* The --loud factor for row `row` of tensor p, 1 if none. */
static float loud_factor(const struct job *j, const struct plan *p, const x4_tensor_spec *t,
			 uint64_t row)
{
	if (!p->experts || (p->kind != K_IQ4 && p->kind != K_Q8))
		return 1.0f;
	float f = 1.0f;
	for (int i = 0; i < j->o->n_loud; i++)
		if (j->o->loud[i].block == p->block && (uint64_t)j->o->loud[i].expert == row / t->ne[1])
			f *= j->o->loud[i].factor;
	return f;
}

static void put_f16(unsigned char *q, float v)
{
	uint16_t h = x4_f32_to_f16(v);
	q[0] = (unsigned char)h;
	q[1] = (unsigned char)(h >> 8);
}

/* Each draw_* writes n_blocks whole blocks of its type, a block's bytes as
 * lib/blockfmt.h lays them out (its table gives the stride). */
static void draw_iq4(rng *r, float sigma, uint64_t n_blocks, unsigned char *q)
{
	const int bb = x4b_block_bytes(X4_T_IQ4_NL); /* fp16 d, 16 bytes of codes */
	for (uint64_t b = 0; b < n_blocks; b++, q += bb) {
		uint64_t x = next(r);
		/* jitter in [0.75, 1.25]; a random sign cancels the codebook's
		 * -5.9 mean, which would otherwise be a shared rank-1 term */
		float d = sigma / IQ4_RMS * (0.75f + 0.5f * (float)(x >> 40) * (1.0f / 16777216.0f));
		put_f16(q, (x & 1) ? -d : d);
		uint64_t a = next(r), c = next(r);
		memcpy(q + 2, &a, 8);
		memcpy(q + 10, &c, 8);
	}
}

static void draw_q8(rng *r, float sigma, uint64_t n_blocks, unsigned char *q)
{
	const int bb = x4b_block_bytes(X4_T_Q8_0), be = x4b_block_elems(X4_T_Q8_0);
	for (uint64_t b = 0; b < n_blocks; b++, q += bb) {
		uint64_t x = next(r);
		/* jitter and sign as draw_iq4's; uniform int8 codes (mean -0.5) */
		float d = sigma / Q8_RMS * (0.75f + 0.5f * (float)(x >> 40) * (1.0f / 16777216.0f));
		put_f16(q, (x & 1) ? -d : d);
		for (int i = 0; i < be; i += 8) { /* fp16 d, then one int8 code a value */
			uint64_t c = next(r);
			memcpy(q + 2 + i, &c, 8);
		}
	}
}

static void draw_q6k(rng *r, float sigma, uint64_t n_blocks, unsigned char *q)
{
	const int bb = x4b_block_bytes(X4_T_Q6_K);
	for (uint64_t b = 0; b < n_blocks; b++, q += bb) {
		for (int i = 0; i < 192; i += 8) { /* ql[128], qh[64]: uniform 6-bit codes */
			uint64_t x = next(r);
			memcpy(q + i, &x, 8);
		}
		uint64_t x = next(r), y = next(r), z = next(r);
		for (int i = 0; i < 16; i++) {
			int v = Q6_SC_LO + (int)((((i < 8 ? x : y) >> (8 * (i & 7))) & 0xff) % Q6_SC_SPAN);
			/* random signs: (q - 32) has mean -0.5, a shared term otherwise */
			int8_t s = (int8_t)((z >> i) & 1 ? -v : v);
			memcpy(q + 192 + i, &s, 1);
		}
		put_f16(q + 208, sigma / (Q6_RMS * Q6_SC_RMS));
	}
}

/* A coarser bell than gauss() (four bytes: 1021 levels, |z| <= 3.45), two
 * values per RNG call: BF16 keeps only 8 significant bits anyway, and the
 * attention matrices are most of what the generator spends its time on. */
static inline float bf16_value(rng *r, uint32_t x, float sigma)
{
	uint32_t s = (x & 0xff) + ((x >> 8) & 0xff) + ((x >> 16) & 0xff) + (x >> 24);
	float w = ((float)s - 510.0f) * (sigma / 147.80f);
	if (fabsf(w) < F16_MIN_NORMAL) /* keep the fp16 cast exact (docs/numerics.md 1.9) */
		w = copysignf(F16_MIN_NORMAL * (1.0f + uniform(r)), s & 1 ? w : -w);
	return w;
}

static inline void put_bf16(unsigned char *q, float v)
{
	uint16_t h = x4_f32_to_bf16(v);
	q[0] = (unsigned char)h;
	q[1] = (unsigned char)(h >> 8);
}

/* One value of a 1-D control tensor whose meaning depends on the index. */
static float draw_control(const struct job *j, const struct plan *p, rng *r, uint64_t i)
{
	int n_hc = j->c->n_hc;
	switch (p->kind) {
	case K_NORM:
		return 1.0f + 0.05f * gauss(r);
	case K_HC_SCALE: /* alpha_pre, alpha_post, alpha_comb */
		return (i < 2 ? 0.5f : 1.0f) * (1.0f + 0.05f * gauss(r));
	case K_HC_BASE:
		if (i < (uint64_t)n_hc) /* pre = sigmoid(0.5 m + b): about (0.25, 0.75) */
			return 0.3f * gauss(r);
		if (i < 2 * (uint64_t)n_hc) /* post = 2 sigmoid(.): centred on 1 */
			return 0.1f * gauss(r);
		/* comb: +2 on the diagonal, so the Sinkhorn output mixes but
		 * does not collapse to a permutation or to uniform */
		i -= 2 * (uint64_t)n_hc;
		return (i / (uint64_t)n_hc == i % (uint64_t)n_hc ? 2.0f : 0.0f) + 0.3f * gauss(r);
	case K_BIAS: {
		float b = 0.01f * gauss(r);
		/* g = sigmoid(.) < 1 and the others' bias is tiny: +2 always wins
		 * a top-k place, so any prompt runs the loud expert */
		for (int k = 0; k < j->o->n_loud; k++)
			if (j->o->loud[k].block == p->block && (uint64_t)j->o->loud[k].expert == i)
				b += 2.0f;
		return b;
	}
	default:
		return gauss(r) * p->sigma;
	}
}

static int draw_chunk(struct job *j, int ti, uint64_t chunk, unsigned char *buf, x4_err *e)
{
	const x4_tensor_spec *t = &j->t[ti];
	const struct plan *p = &j->p[ti];
	uint64_t row0 = chunk * p->rows_per_chunk;
	uint64_t nrows = X4_MIN(p->rows_per_chunk, p->rows - row0);
	rng r;
	rng_seed(&r, j->o->seed, (uint64_t)ti, chunk);
	for (uint64_t k = 0; k < nrows; k++) {
		unsigned char *q = buf + k * p->row_bytes;
		uint64_t row = row0 + k, n = p->row_elems;
		switch (p->kind) {
		case K_IQ4:
			draw_iq4(&r, p->sigma * loud_factor(j, p, t, row), n / p->block_elems, q);
			break;
		case K_Q6K:
			draw_q6k(&r, p->sigma, n / p->block_elems, q);
			break;
		case K_Q8:
			draw_q8(&r, p->sigma * loud_factor(j, p, t, row), n / p->block_elems, q);
			break;
		case K_BF16:
			for (uint64_t i = 0; i < n; i += 2) {
				uint64_t x = next(&r);
				put_bf16(q + 2 * i, bf16_value(&r, (uint32_t)x, p->sigma));
				if (i + 1 < n)
					put_bf16(q + 2 * i + 2, bf16_value(&r, (uint32_t)(x >> 32), p->sigma));
			}
			break;
		default:
			for (uint64_t i = 0; i < n; i++) {
				float v = draw_control(j, p, &r, row * n + i);
				memcpy(q + 4 * i, &v, 4);
			}
		}
	}
	return x4_gguf_writer_pwrite(j->w, ti, row0 * p->row_bytes, buf, nrows * p->row_bytes, e);
}

static void run_chunk(void *arg, int64_t i)
{
	struct job *j = arg;
	if (__atomic_load_n(&j->failed, __ATOMIC_RELAXED))
		return;
	/* the tensor whose chunk range holds i */
	int lo = 0, hi = j->n - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (j->p[mid].first_chunk <= (uint64_t)i)
			lo = mid;
		else
			hi = mid - 1;
	}
	const struct plan *p = &j->p[lo];
	uint64_t chunk = (uint64_t)i - p->first_chunk;
	x4_err e = { 0 };
	unsigned char *buf = NULL; /* [rows_per_chunk][row_bytes] encoded rows */
	pthread_mutex_lock(&j->mu);
	if (j->n_free > 0)
		buf = j->pool[--j->n_free];
	pthread_mutex_unlock(&j->mu);
	if (!buf)
		buf = x4_alloc(j->buf_bytes, "a synthetic weight chunk", &e);
	int rc = buf ? draw_chunk(j, lo, chunk, buf, &e) : X4_ENOMEM;
	pthread_mutex_lock(&j->mu);
	if (buf && j->n_free < j->n_pool)
		j->pool[j->n_free++] = buf;
	else
		free(buf);
	if (rc && !j->failed) {
		j->failed = true;
		j->err = e;
	}
	j->done += X4_MIN(p->rows_per_chunk, p->rows - chunk * p->rows_per_chunk) * p->row_bytes;
	if (!j->failed && j->o->progress)
		j->o->progress(j->o->progress_arg, j->done, j->total);
	pthread_mutex_unlock(&j->mu);
}

int x4_synth_weights(x4_gguf_writer *w, const x4_config *c, const x4_tensor_spec *t,
		     int n, const x4_synth_opts *o, x4_err *e)
{
	for (int i = 0; i < o->n_loud; i++) {
		const x4_synth_loud *l = &o->loud[i];
		/* The NextN block is MoE too, but no trunk runs it: a loud expert
		 * there would show nowhere. */
		if (l->block < c->n_dense || l->block >= c->n_block || l->expert < 0 ||
		    l->expert >= c->n_expert)
			return x4_err_set(e, X4_EINVAL, "loud expert %d:%d is not a routed expert of "
					  "the trunk: its MoE blocks are %d..%d (block %d is NextN), "
					  "experts 0..%d", l->block, l->expert, c->n_dense,
					  c->n_block - 1, c->n_block, c->n_expert - 1);
		if (!(l->factor > 0.0f) || !(l->factor <= 1000.0f))
			return x4_err_set(e, X4_EINVAL, "loud factor %g is outside (0, 1000]",
					  (double)l->factor);
	}
	struct job j = { .w = w, .c = c, .t = t, .n = n, .o = o };
	if (n <= 0)
		return 0;
	j.p = x4_calloc((size_t)n, sizeof *j.p, "the synthesis plan", e);
	if (!j.p)
		return X4_ENOMEM;
	for (int i = 0; i < n; i++) {
		int rc = plan_tensor(c, &t[i], &j.p[i], e);
		if (rc) {
			free(j.p);
			return rc;
		}
		j.p[i].first_chunk = j.n_chunks;
		j.n_chunks += j.p[i].n_chunks;
		j.total += j.p[i].rows * j.p[i].row_bytes;
		j.buf_bytes = X4_MAX(j.buf_bytes, (size_t)(j.p[i].rows_per_chunk * j.p[i].row_bytes));
	}
	j.n_pool = o->threads > 0 ? o->threads : x4_ncpu();
	j.pool = x4_calloc((size_t)j.n_pool, sizeof *j.pool, "the chunk buffers", e);
	if (!j.pool) {
		free(j.p);
		return X4_ENOMEM;
	}
	pthread_mutex_init(&j.mu, NULL);
	x4_parallel_for((int64_t)j.n_chunks, o->threads, run_chunk, &j);
	pthread_mutex_destroy(&j.mu);
	for (int i = 0; i < j.n_free; i++)
		free(j.pool[i]);
	free(j.pool);
	free(j.p);
	if (j.failed) {
		if (e)
			*e = j.err;
		return j.err.code ? j.err.code : X4_EIO;
	}
	return 0;
}
