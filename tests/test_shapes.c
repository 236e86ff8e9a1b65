/*
 * test_shapes.c - the CPU trunk, the binding and the replay on checkpoints
 * whose dimensions the presets never take: no dense block, no shared
 * expert or two of them, top-6 of 8 experts, 2 or 3 hyper-connection
 * streams, a 16-wide rope, an odd head count, no NextN block.  The tiny
 * preset shares the release's structural constants (n_hc 4, one shared
 * expert, two dense blocks), so a constant that crept in where a key
 * belongs is only visible here.  Each variant is written by x4_layout +
 * x4_synth_weights with a placeholder vocabulary; the test then checks the
 * F32 trunk against the F64 one, chunked prefill against one chunk and
 * against decode, a context of exactly max_ctx, and the MoE replay.
 */
#include "t.h"
#include "t_trunk.h"
#include "x4.h"

#include <errno.h>
#include <math.h>
#include <unistd.h>

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

static char tmp[256];

struct variant {
	const char *name;
	int n_hc, n_dense, n_block, n_nextn, n_shared, n_expert, n_used, d_rope, n_head;
};

static const struct variant variants[] = {
	{ "no-dense/no-shared/hc2/top6", 2, 0, 3, 0, 0, 8, 6, 16, 3 },
	{ "two-shared/hc3/nextn", 3, 1, 3, 1, 2, 8, 3, 32, 2 },
};

enum { V = 300, CTX = 40 };

static void mk_config(const struct variant *v, x4_config *c)
{
	x4_err e;
	x4_config_preset("tiny", c, &e);
	c->n_hc = v->n_hc;
	c->n_dense = v->n_dense;
	c->n_block = v->n_block;
	c->n_nextn = v->n_nextn;
	c->n_block_file = v->n_block + v->n_nextn;
	c->n_expert_shared = v->n_shared;
	c->n_expert = v->n_expert;
	c->n_expert_used = v->n_used;
	c->d_rope = v->d_rope;
	c->n_head = v->n_head;
	c->d_qk = 64 + v->d_rope;
	c->kv_lora = 96;
	c->d_v = 48;
	c->n_ff_exp = 64;
	c->n_vocab = V;
	c->n_ctx_train = CTX;
	c->d_nope = c->d_qk - c->d_rope;
	c->kq_scale = 0; /* derived again by x4_config_read */
}

static int write_variant(const char *path, const x4_config *c, x4_err *e)
{
	x4_tensor_spec *t;
	int n;
	int rc = x4_layout(c, &t, &n, e);
	if (rc)
		return rc;
	x4_gguf_writer *w;
	if ((rc = x4_gguf_writer_open(&w, path, e))) {
		free(t);
		return rc;
	}
	x4_config_write(w, c);
	char *pieces[V], buf[V][16];
	float scores[V];
	int32_t types[V];
	for (int i = 0; i < V; i++) {
		snprintf(buf[i], sizeof buf[i], i < 3 ? "<c%d>" : "p%d", i);
		pieces[i] = buf[i];
		scores[i] = (float)-i;
		types[i] = i < 3 ? X4_TOK_CONTROL : X4_TOK_NORMAL;
	}
	x4_gguf_writer_kv_str(w, "tokenizer.ggml.model", "llama");
	x4_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)pieces, V);
	x4_gguf_writer_kv_arr_f32(w, "tokenizer.ggml.scores", scores, V);
	x4_gguf_writer_kv_arr_i32(w, "tokenizer.ggml.token_type", types, V);
	for (int i = 0; i < n; i++)
		x4_gguf_writer_tensor(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne);
	x4_synth_opts o = { .seed = 5, .threads = 2 };
	if ((rc = x4_gguf_writer_begin_data(w, e)) || (rc = x4_synth_weights(w, c, t, n, &o, e))) {
		x4_gguf_writer_abort(w);
		free(t);
		return rc;
	}
	free(t);
	return x4_gguf_writer_finish(w, e);
}

struct cap {
	int block;
	float xh[1024];
	double y[1024];
	int D;
	bool got;
};

static void capture(void *ctx, const x4_probe_row *r)
{
	struct cap *c = ctx;
	if (r->block != c->block || r->sublayer != 1)
		return;
	memcpy(c->xh, r->sub_in, sizeof(float) * (size_t)c->D);
	for (int i = 0; i < c->D; i++)
		c->y[i] = r->sub_out[i];
	c->got = true;
}

static void run_variant(const struct variant *v)
{
	char name[160], path[320];
	x4_err e;
	x4_config c;
	mk_config(v, &c);
	snprintf(path, sizeof path, "%s/v.gguf", tmp);
	int rc = write_variant(path, &c, &e);
	snprintf(name, sizeof name, "%s: written", v->name);
	T_OK(rc == 0, name, "%s", e.msg);
	if (rc)
		return;
	x4_paths p;
	x4_model *m;
	rc = x4_paths_resolve(path, NULL, &p, &e);
	rc = rc ? rc : x4_model_open(&m, &p, &e);
	snprintf(name, sizeof name, "%s: binds", v->name);
	T_OK(rc == 0, name, "%s", e.msg);
	if (rc) {
		unlink(path);
		return;
	}
	enum { N = 19 };
	int32_t ids[CTX];
	for (int i = 0; i < CTX; i++)
		ids[i] = 3 + (i * 37) % (V - 3);
	float *a = malloc(sizeof(float) * V * CTX), *b = malloc(sizeof(float) * V * CTX);
	float *d = malloc(sizeof(float) * V * CTX);

	/* F32 (chunk 4, a prompt not a multiple of it) against F64, both
	 * caches exact: the arithmetic alone. */
	x4_trunk *t32 = t_trunk(m, X4_PREC_F32, 2, CTX, 4, X4_KV_EXACT, X4_RESID_F32);
	x4_trunk *t64 = t_trunk(m, X4_PREC_F64, 2, CTX, 4, X4_KV_EXACT, X4_RESID_F32);
	rc = !t32 || !t64 || x4_trunk_forward(t32, ids, N, a, true, &e) ||
	     x4_trunk_forward(t64, ids, N, b, true, &e);
	double r = rc ? 1 : t_rel_err(a, b, (size_t)V * N);
	bool finite = true;
	for (size_t i = 0; i < (size_t)V * N; i++)
		finite = finite && isfinite(a[i]);
	snprintf(name, sizeof name, "%s: f32 vs f64 logits", v->name);
	T_OK(!rc && r < 1e-4 && finite, name, "rc %d rel err %.3g finite %d: %s", rc, r, finite,
	     e.msg);

	/* One chunk of 64, and token by token, against chunks of 4. */
	x4_trunk *t1 = t_trunk(m, X4_PREC_F32, 3, CTX, 0, X4_KV_EXACT, X4_RESID_F32);
	x4_trunk *td = t_trunk(m, X4_PREC_F32, 1, CTX, 0, X4_KV_EXACT, X4_RESID_F32);
	rc = !t1 || !td || x4_trunk_forward(t1, ids, N, b, true, &e);
	for (int i = 0; i < N && !rc; i++)
		rc = x4_trunk_forward(td, ids + i, 1, d + (size_t)i * V, false, &e);
	snprintf(name, sizeof name, "%s: chunked prefill, one chunk, decode agree", v->name);
	T_OK(!rc && t_rel_err(a, b, (size_t)V * N) < 1e-6 && t_rel_err(a, d, (size_t)V * N) < 1e-6,
	     name, "rc %d: %.3g %.3g %s", rc, t_rel_err(a, b, (size_t)V * N),
	     t_rel_err(a, d, (size_t)V * N), e.msg);

	/* The whole context: exactly max_ctx positions fit, one more does not. */
	rc = x4_trunk_forward(td, ids + N, CTX - N, d, false, &e);
	int rc2 = x4_trunk_forward(td, ids, 1, d, false, &e);
	snprintf(name, sizeof name, "%s: a context of exactly max_ctx", v->name);
	T_OK(rc == 0 && rc2 == X4_ERANGE && x4_trunk_pos(td) == CTX, name, "rc %d/%d pos %d: %s",
	     rc, rc2, x4_trunk_pos(td), e.msg);

	/* The replay of the last MoE block on the activation the trunk saw
	 * equals the trunk's own MoE output. */
	struct cap cp = { .block = c.n_block - 1, .D = c.n_embd };
	x4_trunk *tp = t_trunk(m, X4_PREC_F64, 1, CTX, 0, X4_KV_EXACT, X4_RESID_F32);
	x4_trunk_set_probe(tp, capture, &cp);
	rc = !tp || x4_trunk_forward(tp, ids, 3, NULL, false, &e);
	x4_moe_replay rp;
	double y[1024];
	rc = rc || !cp.got ? -100 : x4_moe_replay_block(m, cp.block, cp.xh, NULL, &rp, y, &e);
	double dy = 0, ny = 0;
	for (int i = 0; !rc && i < c.n_embd; i++) {
		dy = fmax(dy, fabs(y[i] - cp.y[i]));
		ny = fmax(ny, fabs(cp.y[i]));
	}
	snprintf(name, sizeof name, "%s: replay equals the trunk's MoE", v->name);
	T_OK(rc == 0 && rp.n_used == c.n_expert_used && dy <= 1e-5 * ny, name,
	     "rc %d used %d max diff %.3g of %.3g: %s", rc, rp.n_used, dy, ny, e.msg);

	x4_trunk *all[] = { t32, t64, t1, td, tp };
	for (size_t i = 0; i < LEN(all); i++)
		x4_trunk_free(all[i]);
	free(a);
	free(b);
	free(d);
	x4_model_close(m);
	unlink(path);
}

/* A trunk of dense blocks only still has an MoE NextN block (docs/gguf.md 5.6):
 * expert_count 0 must be refused naming the key, not reported later as a
 * tensor shape that "is not a multiple" of a block. */
static void test_zero_experts(void)
{
	x4_err e = { 0 };
	x4_config c;
	mk_config(&variants[0], &c);
	c.n_dense = c.n_block;
	c.n_nextn = 1;
	c.n_block_file = c.n_block + 1;
	c.n_expert = 0;
	c.n_expert_used = 0;
	char path[320];
	snprintf(path, sizeof path, "%s/z.gguf", tmp);
	x4_gguf_writer *w;
	int rc = x4_gguf_writer_open(&w, path, &e);
	if (rc == 0) {
		x4_config_write(w, &c);
		rc = x4_gguf_writer_begin_data(w, &e);
		rc = rc ? rc : x4_gguf_writer_finish(w, &e);
	}
	x4_gguf *g = NULL;
	x4_config got;
	rc = rc ? rc : x4_gguf_open(&g, path, &e);
	rc = rc ? -100 : x4_config_read(g, &got, &e);
	T_OK(rc == X4_EFORMAT && strstr(e.msg, "expert_count") && strstr(e.msg, "NextN"),
	     "expert_count 0 with a NextN block refused naming the key", "rc %d: %s", rc, e.msg);
	x4_gguf_close(g);
	unlink(path);
	x4_tensor_spec *t = NULL;
	int n;
	rc = x4_layout(&c, &t, &n, &e);
	T_OK(rc != 0 && strstr(e.msg, "zero") && !strstr(e.msg, "multiple"),
	     "layout: a zero dimension is called one", "rc %d: %s", rc, e.msg);
	free(t);
}

int main(void)
{
	snprintf(tmp, sizeof tmp, "/tmp/x4-test-shapes-XXXXXX");
	if (!mkdtemp(tmp)) {
		printf("FAIL setup: mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	for (size_t i = 0; i < LEN(variants); i++)
		run_variant(&variants[i]);
	test_zero_experts();
	rmdir(tmp);
	return t_done();
}
