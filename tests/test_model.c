/*
 * test_model.c - where a model's parts are found (x4_paths_resolve) and
 * what binding says about a file that is not what its keys promise: each
 * case is the tiny checkpoint rewritten with one defect, and the message
 * must name the tensor with its expected and found type and shape.
 */
#include "t.h"
#include "x4_int.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#define TINY "build/models/tiny/xing4_0-tiny.gguf"

static char tmp[256];

static void put(const char *name, const char *text)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s", tmp, name);
	FILE *f = fopen(p, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static char *dup_n(const char *s, uint64_t n)
{
	char *p = malloc(n + 1);
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

/* One key from g onto w, for the kinds a xing4_0 file holds. */
static int copy_key(const x4_gguf *g, int64_t i, x4_gguf_writer *w)
{
	const char *key = x4_gguf_kv_key(g, i), *s;
	uint64_t u, len, n;
	int64_t v;
	double d;
	bool b;
	int et;
	const void *data;
	switch (x4_gguf_kv_type(g, i)) {
	case X4_GV_U32: x4_gguf_kv_u64(g, i, &u); return x4_gguf_writer_kv_u32(w, key, (uint32_t)u);
	case X4_GV_I32: x4_gguf_kv_i64(g, i, &v); return x4_gguf_writer_kv_i32(w, key, (int32_t)v);
	case X4_GV_U64: x4_gguf_kv_u64(g, i, &u); return x4_gguf_writer_kv_u64(w, key, u);
	case X4_GV_F32: x4_gguf_kv_f64(g, i, &d); return x4_gguf_writer_kv_f32(w, key, (float)d);
	case X4_GV_BOOL: x4_gguf_get_bool(g, key, &b, NULL); return x4_gguf_writer_kv_bool(w, key, b);
	case X4_GV_STR: {
		x4_gguf_kv_str(g, i, &s, &len);
		char *c = dup_n(s, len);
		int rc = x4_gguf_writer_kv_str(w, key, c);
		free(c);
		return rc;
	}
	case X4_GV_ARR:
		x4_gguf_kv_arr(g, i, &et, &n, &data);
		if (et == X4_GV_STR) {
			char **a = calloc(n + 1, sizeof *a);
			for (uint64_t j = 0; j < n; j++) {
				x4_gguf_kv_arr_str(g, i, j, &s, &len);
				a[j] = dup_n(s, len);
			}
			int rc = x4_gguf_writer_kv_arr_str(w, key, (const char *const *)a, n);
			for (uint64_t j = 0; j < n; j++)
				free(a[j]);
			free(a);
			return rc;
		} else if (et == X4_GV_F32 || et == X4_GV_I32) {
			void *a = malloc(n * 4 + 4);
			memcpy(a, data, n * 4);
			int rc = et == X4_GV_F32 ? x4_gguf_writer_kv_arr_f32(w, key, a, n)
						 : x4_gguf_writer_kv_arr_i32(w, key, a, n);
			free(a);
			return rc;
		}
	}
	return -1;
}

struct defect {
	const char *skip_keys;  /* keys with this prefix are left out */
	const char *drop;       /* a tensor left out */
	const char *drop_prefix; /* every tensor whose name starts so left out */
	const char *retype;     /* a tensor declared with another type */
	int new_type;
	const char *reshape;    /* a tensor declared with ne0 doubled */
	const char *extra;      /* a tensor added (F32 [32]) */
	bool drop_nextn;        /* every blk.<n_block>.* left out */
};

static int rewrite(const char *out, const struct defect *d, x4_err *e)
{
	x4_gguf *g;
	int rc = x4_gguf_open(&g, TINY, e);
	if (rc)
		return rc;
	x4_gguf_writer *w;
	if ((rc = x4_gguf_writer_open(&w, out, e))) {
		x4_gguf_close(g);
		return rc;
	}
	for (int64_t i = 0; i < x4_gguf_kv_count(g); i++) {
		const char *k = x4_gguf_kv_key(g, i);
		if (d->skip_keys && !strncmp(k, d->skip_keys, strlen(d->skip_keys)))
			continue;
		copy_key(g, i, w);
	}
	int64_t nt = x4_gguf_tensor_count(g);
	int idx[nt + 1], src[nt + 1], n = 0;
	for (int64_t i = 0; i < nt; i++) {
		const x4_gguf_tensor *t = x4_gguf_tensor_at(g, i);
		if ((d->drop && !strcmp(t->name, d->drop)) ||
		    (d->drop_prefix && !strncmp(t->name, d->drop_prefix, strlen(d->drop_prefix))) ||
		    (d->drop_nextn && !strncmp(t->name, "blk.4.", 6)))
			continue;
		int type = t->type;
		uint64_t ne[4] = { t->ne[0], t->ne[1], t->ne[2], t->ne[3] };
		if (d->retype && !strcmp(t->name, d->retype))
			type = d->new_type;
		if (d->reshape && !strcmp(t->name, d->reshape))
			ne[0] *= 2;
		src[n] = (int)i;
		idx[n++] = x4_gguf_writer_tensor(w, t->name, type, t->n_dims, ne);
	}
	uint64_t ne_x[4] = { 32, 1, 1, 1 };
	if (d->extra) {
		src[n] = -1;
		idx[n++] = x4_gguf_writer_tensor(w, d->extra, X4_T_F32, 1, ne_x);
	}
	if ((rc = x4_gguf_writer_begin_data(w, e))) {
		x4_gguf_writer_abort(w);
		x4_gguf_close(g);
		return rc;
	}
	for (int j = 0; j < n && rc == 0; j++) {
		uint64_t nb = x4_gguf_writer_tensor_bytes(w, idx[j]);
		const x4_gguf_tensor *t = src[j] >= 0 ? x4_gguf_tensor_at(g, src[j]) : NULL;
		if (t && t->nbytes == nb) {
			rc = x4_gguf_writer_pwrite(w, idx[j], 0, t->data, nb, e);
		} else {
			void *z = calloc(1, nb);
			rc = x4_gguf_writer_pwrite(w, idx[j], 0, z, nb, e);
			free(z);
		}
	}
	rc = rc ? rc : x4_gguf_writer_finish(w, e);
	if (rc)
		x4_gguf_writer_abort(w);
	x4_gguf_close(g);
	return rc;
}

/* Open path as a model; returns the code, the message in e. */
static int try_open(const char *path, x4_err *e)
{
	x4_paths p;
	x4_model *m;
	int rc = x4_paths_resolve(path, NULL, &p, e);
	if (rc == 0 && (rc = x4_model_open(&m, &p, e)) == 0)
		x4_model_close(m);
	return rc;
}

static void test_binding(void)
{
	if (access(TINY, R_OK) != 0) {
		printf("# %s is missing (make tiny writes it): binding tests skipped\n", TINY);
		return;
	}
	x4_err e;
	char f[512];
	snprintf(f, sizeof f, "%s/bad.gguf", tmp);

	int rc = try_open(TINY, &e);
	T_OK(rc == 0, "tiny binds", "%s", e.msg);

	struct defect d1 = { .drop = "blk.1.attn_q_b.weight" };
	rc = rewrite(f, &d1, &e) ? -100 : try_open(f, &e);
	T_OK(rc == X4_ESHAPE && strstr(e.msg, "blk.1.attn_q_b.weight missing") &&
	     strstr(e.msg, "BF16 [96, 384]"), "missing tensor named with its type and shape",
	     "rc %d: %s", rc, e.msg);

	struct defect d2 = { .retype = "blk.2.ffn_gate_inp.weight", .new_type = X4_T_BF16 };
	rc = rewrite(f, &d2, &e) ? -100 : try_open(f, &e);
	T_OK(rc == X4_ESHAPE && strstr(e.msg, "blk.2.ffn_gate_inp.weight: expected F32 [256, 16], "
				       "found BF16 [256, 16]"),
	     "mistyped tensor: expected and found", "rc %d: %s", rc, e.msg);

	/* the routed experts take IQ4_NL or Q8_0 (X4_ROLE_EXPERT), the three
	 * stacks of a block in one type */
	struct defect d2q = { .retype = "blk.2.ffn_up_exps.weight", .new_type = X4_T_Q8_0 };
	rc = rewrite(f, &d2q, &e) ? -100 : try_open(f, &e);
	T_OK(rc == X4_ESHAPE && strstr(e.msg, "blk.2: the expert stacks are IQ4_NL, Q8_0 and "
				       "IQ4_NL (gate, up, down)"),
	     "expert stacks of two types refused", "rc %d: %s", rc, e.msg);
	struct defect d2k = { .retype = "blk.2.ffn_up_exps.weight", .new_type = X4_T_Q6_K };
	rc = rewrite(f, &d2k, &e) ? -100 : try_open(f, &e);
	T_OK(rc == X4_ESHAPE && strstr(e.msg, "blk.2.ffn_up_exps.weight: expected IQ4_NL|Q8_0 "),
	     "expert of a type the kernels do not take: the role's types named", "rc %d: %s", rc,
	     e.msg);

	struct defect d3 = { .reshape = "output_norm.weight" };
	rc = rewrite(f, &d3, &e) ? -100 : try_open(f, &e);
	T_OK(rc == X4_ESHAPE && strstr(e.msg, "output_norm.weight: expected F32 [256], found F32 "
				       "[512]"),
	     "misshaped tensor: expected and found", "rc %d: %s", rc, e.msg);

	struct defect d4 = { .extra = "blk.0.bogus.weight" };
	rc = rewrite(f, &d4, &e) ? -100 : try_open(f, &e);
	T_OK(rc == X4_ESHAPE && strstr(e.msg, "blk.0.bogus.weight (F32 [32]) is extra"),
	     "extra tensor named", "rc %d: %s", rc, e.msg);

	struct defect d5 = { .drop = "blk.3.ffn_down_exps.weight", .retype = "token_embd.weight",
			     .new_type = X4_T_F16 };
	rc = rewrite(f, &d5, &e) ? -100 : try_open(f, &e);
	T_OK(rc == X4_ESHAPE && strstr(e.msg, "2 tensor problems") &&
	     strstr(e.msg, "blk.3.ffn_down_exps.weight") && strstr(e.msg, "token_embd.weight"),
	     "every problem in one message", "rc %d: %s", rc, e.msg);

	/* Too many problems for one message: cut between two of them, and
	 * the count of the rest kept. */
	struct defect d5b = { .drop_prefix = "blk.3." };
	rc = rewrite(f, &d5b, &e) ? -100 : try_open(f, &e);
	int n_prob = 0, n_more = -1, n_shown = 0;
	const char *more = strstr(e.msg, " (and ");
	sscanf(strstr(e.msg, ": ") ? strstr(e.msg, ": ") + 2 : "", "%d", &n_prob);
	if (more)
		sscanf(more, " (and %d more)", &n_more);
	for (const char *q = e.msg; (q = strstr(q, " missing (expected ")); q++)
		n_shown++;
	size_t ml = strlen(e.msg);
	T_OK(rc == X4_ESHAPE && more && n_prob > 20 && n_shown + n_more == n_prob &&
	     ml < sizeof e.msg - 1 && e.msg[ml - 1] == ')' && more[-1] == ')',
	     "a long problem list ends at a problem, with (and N more)",
	     "rc %d, %d problems, %d shown, %d more, %zu bytes: ...%s", rc, n_prob, n_shown,
	     n_more, ml, ml > 120 ? e.msg + ml - 120 : e.msg);

	struct defect d6 = { .drop_nextn = true };
	rc = rewrite(f, &d6, &e) ? -100 : try_open(f, &e);
	T_OK(rc == 0, "NextN block optional (recognised, never bound)", "rc %d: %s", rc, e.msg);

	struct defect d7 = { .skip_keys = "tokenizer.ggml.tokens" };
	rc = rewrite(f, &d7, &e) ? -100 : try_open(f, &e);
	T_OK(rc != 0 && strstr(e.msg, "vocabulary") && strstr(e.msg, "x4-synth"),
	     "a file without a vocabulary is refused naming the fix", "rc %d: %s", rc, e.msg);

	/* Clamp bounds: GGUF keys, else config.json, else +-30. */
	struct defect d8 = { .skip_keys = "xing4_0.hyper_connection.clamp" };
	char dir2[300];
	snprintf(dir2, sizeof dir2, "%s/rel", tmp);
	mkdir(dir2, 0755);
	snprintf(f, sizeof f, "%s/rel/m.gguf", tmp);
	rc = rewrite(f, &d8, &e);
	x4_paths p;
	x4_model *m;
	rc = rc ? rc : x4_paths_resolve(f, NULL, &p, &e);
	rc = rc ? rc : x4_model_open(&m, &p, &e);
	if (rc == 0) {
		T_OK(x4_model_config(m)->clamp_min == -30 && x4_model_config(m)->clamp_max == 30,
		     "clamp defaults to +-30", "%g %g", x4_model_config(m)->clamp_min,
		     x4_model_config(m)->clamp_max);
		x4_model_close(m);
	} else {
		T_OK(0, "clamp defaults to +-30", "rc %d: %s", rc, e.msg);
	}
	put("rel/config.json", "{\"model_type\": \"xing4_0\", \"mhc_h_res_clamp_min\": -7.5,\n"
			       "  \"mhc_h_res_clamp_max\" : 12}");
	rc = x4_paths_resolve(f, NULL, &p, &e);
	rc = rc ? rc : x4_model_open(&m, &p, &e);
	if (rc == 0) {
		T_OK(x4_model_config(m)->clamp_min == -7.5f && x4_model_config(m)->clamp_max == 12,
		     "clamp from config.json when the GGUF has none", "%g %g",
		     x4_model_config(m)->clamp_min, x4_model_config(m)->clamp_max);
		x4_model_close(m);
	} else {
		T_OK(0, "clamp from config.json when the GGUF has none", "rc %d: %s", rc, e.msg);
	}
	unlink(f);
	snprintf(f, sizeof f, "%s/rel/config.json", tmp);
	unlink(f);
	rmdir(dir2);
	snprintf(f, sizeof f, "%s/bad.gguf", tmp);
	unlink(f);
}

static int copy_file(const char *from, const char *to, long max)
{
	FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
	int rc = a && b ? 0 : -1;
	char buf[1 << 16];
	size_t n;
	long done = 0;
	while (rc == 0 && (max < 0 || done < max) &&
	       (n = fread(buf, 1, max < 0 ? sizeof buf : X4_MIN(sizeof buf, (size_t)(max - done)),
			  a)) > 0) {
		rc = fwrite(buf, 1, n, b) == n ? 0 : -1;
		done += (long)n;
	}
	if (a)
		fclose(a);
	if (b && fclose(b))
		rc = -1;
	return rc;
}

/* The tiny folder beside its GGUF, with one of its files replaced. */
static int open_folder(const char *dir, x4_err *e)
{
	x4_paths p;
	x4_model *m;
	int rc = x4_paths_resolve(dir, NULL, &p, e);
	if (rc == 0 && (rc = x4_model_open(&m, &p, e)) == 0)
		x4_model_close(m);
	return rc;
}

static void test_folder(void)
{
	static const char *files[] = { "xing4_0-tiny.gguf", "config.json", "tokenizer.model" };
	char dir[300], from[512], to[512];
	if (access(TINY, R_OK) != 0)
		return;
	snprintf(dir, sizeof dir, "%s/folder", tmp);
	mkdir(dir, 0755);
	for (size_t i = 0; i < X4_ARRAY_LEN(files); i++) {
		snprintf(from, sizeof from, "build/models/tiny/%s", files[i]);
		snprintf(to, sizeof to, "%s/%s", dir, files[i]);
		copy_file(from, to, -1);
	}
	x4_err e = { 0 };
	int rc = open_folder(dir, &e);
	T_OK(rc == 0, "folder: the tiny release folder is checked and passes", "rc %d: %s", rc,
	     e.msg);

	snprintf(to, sizeof to, "%s/tokenizer.model", dir);
	copy_file("build/models/tiny/tokenizer.model", to, 4000);
	rc = open_folder(dir, &e);
	T_OK(rc == X4_EFORMAT && strstr(e.msg, "tokenizer.model") && strstr(e.msg, "--tokenizer"),
	     "folder: a truncated tokenizer.model is refused", "rc %d: %s", rc, e.msg);
	FILE *f = fopen(to, "wb");
	uint64_t x = 7;
	for (int i = 0; f && i < 4096; i++) {
		uint64_t r = x4_splitmix64(&x);
		fwrite(&r, sizeof r, 1, f);
	}
	if (f)
		fclose(f);
	rc = open_folder(dir, &e);
	T_OK(rc == X4_EFORMAT && strstr(e.msg, "tokenizer.model"),
	     "folder: a random tokenizer.model is refused", "rc %d: %s", rc, e.msg);
	copy_file("data/tokenizer/mistral-v3.model", to, -1);
	rc = open_folder(dir, &e);
	T_OK(rc == X4_EFORMAT && strstr(e.msg, "piece 0 is '<unk>'") && strstr(e.msg, "<_unk>"),
	     "folder: another model's tokenizer.model is refused naming the piece",
	     "rc %d: %s", rc, e.msg);
	unlink(to);
	rc = open_folder(dir, &e);
	T_OK(rc == 0, "folder: no tokenizer.model is fine (the GGUF's vocabulary)", "rc %d: %s",
	     rc, e.msg);

	snprintf(to, sizeof to, "%s/config.json", dir);
	put("folder/config.json", "{\"model_type\": \"xing4_0\",\n  \"hidden_size\": 256\n");
	rc = open_folder(dir, &e);
	T_OK(rc == X4_EFORMAT && strstr(e.msg, "config.json is not JSON") &&
	     strstr(e.msg, "ends inside an object"), "folder: a config.json that is not JSON is refused",
	     "rc %d: %s", rc, e.msg);
	put("folder/config.json", "{\"model_type\": \"xing4_0\", \"mhc_h_res_clamp_min\": \"low\"}");
	snprintf(from, sizeof from, "%s/xing4_0-tiny.gguf", dir);
	struct defect d = { .skip_keys = "xing4_0.hyper_connection.clamp" };
	rc = rewrite(from, &d, &e);
	rc = rc ? rc : open_folder(dir, &e);
	T_OK(rc == X4_EFORMAT && strstr(e.msg, "mhc_h_res_clamp_min"),
	     "folder: clamp keys that are not numbers are refused", "rc %d: %s", rc, e.msg);
	unlink(from);
	unlink(to);
	rmdir(dir);

	/* The checker itself. */
	static const struct { const char *s; bool ok; } js[] = {
		{ "{}", true }, { " [1, -2.5e3, \"a\\u00e9\\n\", true, false, null, {}] ", true },
		{ "{\"a\": {\"b\": [0.0]}}", true }, { "", false }, { "{", false },
		{ "{\"a\" 1}", false }, { "{\"a\": 1,}", false }, { "[01]", false },
		{ "[1.]", false }, { "\"\\x\"", false }, { "\"a\nb\"", false }, { "{} {}", false },
		{ "tru", false }, { "[\"\\u12\"]", false }, { "{'a': 1}", false },
	};
	for (size_t i = 0; i < X4_ARRAY_LEN(js); i++) {
		size_t at = 0;
		const char *why = NULL;
		int r = x4_json_check(js[i].s, strlen(js[i].s), &at, &why);
		char name[96];
		snprintf(name, sizeof name, "json: case %zu is %s", i, js[i].ok ? "JSON" : "refused");
		T_OK((r == 0) == js[i].ok && (r == 0 || why), name, "'%s': rc %d at %zu (%s)",
		     js[i].s, r, at, why ? why : "");
	}
}

static void test_paths(void)
{
	x4_err e;
	x4_paths p;
	char want[512], dir[300];
	put("a.gguf", "x");
	snprintf(want, sizeof want, "%s/a.gguf", tmp);
	int rc = x4_paths_resolve(want, NULL, &p, &e);
	T_OK(rc == 0 && !strcmp(p.gguf, want) && !p.tokdir[0], "path: a .gguf file",
	     "rc %d gguf '%s' tokdir '%s'", rc, p.gguf, p.tokdir);
	rc = x4_paths_resolve(tmp, NULL, &p, &e);
	T_OK(rc == 0 && !strcmp(p.gguf, want), "path: a folder with one .gguf", "rc %d '%s' %s", rc,
	     p.gguf, e.msg);
	put("b.gguf", "y");
	rc = x4_paths_resolve(tmp, NULL, &p, &e);
	T_OK(rc == X4_EINVAL && strstr(e.msg, "a.gguf") && strstr(e.msg, "b.gguf"),
	     "path: two .gguf refused, both listed", "rc %d: %s", rc, e.msg);
	snprintf(want, sizeof want, "%s/b.gguf", tmp);
	unlink(want);
	snprintf(want, sizeof want, "%s/nothing-here", tmp);
	rc = x4_paths_resolve(want, NULL, &p, &e);
	T_OK(rc == X4_ENOTFOUND, "path: a missing path", "rc %d: %s", rc, e.msg);

	/* A folder with some other model's config.json is not a tokenizer. */
	put("config.json", "{\"model_type\": \"llama\", \"hidden_size\": 4096}");
	rc = x4_paths_resolve(tmp, NULL, &p, &e);
	T_OK(rc == 0 && !p.tokdir[0], "path: a non-xing config.json is not taken", "rc %d tokdir '%s'",
	     rc, p.tokdir);
	rc = x4_paths_resolve(tmp, tmp, &p, &e);
	T_OK(rc == X4_EINVAL && strstr(e.msg, "config.json") && strstr(e.msg, "tokenization_xing4_0.py"),
	     "path: a named non-xing folder refused with the paths tried", "rc %d: %s", rc, e.msg);
	put("config.json", "{\n  \"architectures\": [\"X\"],\n  \"model_type\" :\"xing4_0\"\n}");
	rc = x4_paths_resolve(tmp, NULL, &p, &e);
	T_OK(rc == 0 && !strcmp(p.tokdir, tmp), "path: config.json model_type xing4_0 found",
	     "rc %d tokdir '%s'", rc, p.tokdir);
	snprintf(want, sizeof want, "%s/config.json", tmp);
	unlink(want);
	snprintf(dir, sizeof dir, "%s/tok", tmp);
	mkdir(dir, 0755);
	put("tok/tokenization_xing4_0.py", "# marker\n");
	snprintf(want, sizeof want, "%s/a.gguf", tmp);
	rc = x4_paths_resolve(want, dir, &p, &e);
	T_OK(rc == 0 && !strcmp(p.tokdir, dir), "path: tokenization_xing4_0.py marks a release",
	     "rc %d tokdir '%s' %s", rc, p.tokdir, e.msg);
	unlink(want);
	snprintf(want, sizeof want, "%s/tok/tokenization_xing4_0.py", tmp);
	unlink(want);
	rmdir(dir);
	rc = x4_paths_resolve(tmp, NULL, &p, &e);
	T_OK(rc == X4_ENOTFOUND && strstr(e.msg, "no .gguf"), "path: a folder without .gguf",
	     "rc %d: %s", rc, e.msg);
}

int main(void)
{
	snprintf(tmp, sizeof tmp, "/tmp/x4-test-model-XXXXXX");
	if (!mkdtemp(tmp)) {
		printf("FAIL setup: mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	test_paths();
	test_binding();
	test_folder();
	rmdir(tmp);
	return t_done();
}
