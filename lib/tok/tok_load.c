/*
 * tok_load.c - building a tokenizer from a vocabulary (an x4_vocab, or a
 * GGUF's tokenizer.ggml.* keys): the pieces, their decode surfaces, and the
 * lookup tables the encoder probes.  A vocabulary sentencepiece would refuse
 * (a duplicate piece, a malformed byte piece, no <unk>) is refused here too.
 */
#include "tok_int.h"

static bool is_merge_type(int type)
{
	return type == X4_TOK_NORMAL || type == X4_TOK_USER_DEFINED || type == X4_TOK_UNUSED;
}

/* -1 when the piece is already there (sentencepiece refuses such a model). */
static int table_put(const x4_tokenizer *t, x4_tok_table *tb, int32_t id)
{
	const char *s = t->arena + t->off[id];
	uint32_t h = x4_tok_hash(s, t->len[id]), i = h & tb->mask;
	for (; tb->slot[i].id >= 0; i = (i + 1) & tb->mask) {
		int32_t o = tb->slot[i].id;
		if (t->len[o] == t->len[id] && !memcmp(t->arena + t->off[o], s, t->len[id]))
			return -1;
	}
	tb->slot[i] = (x4_tok_slot){ id, h };
	return 0;
}

const char *x4_token_piece(const x4_tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->n ? t->arena + t->off[id] : NULL;
}

int32_t x4_token_find(const x4_tokenizer *t, const char *piece)
{
	size_t n = strlen(piece);
	int32_t id = x4_tok_table_get(t, &t->reserved, piece, n);
	if (id < 0)
		id = x4_tok_table_get(t, &t->merge, piece, n);
	return id >= 0 ? id : x4_tok_table_get(t, &t->unused, piece, n);
}

int x4_tokenizer_n_vocab(const x4_tokenizer *t) { return t->n; }
int32_t x4_tokenizer_bos(const x4_tokenizer *t) { return t->bos_id; }
int32_t x4_tokenizer_eos(const x4_tokenizer *t) { return t->eos_id; }

int x4_token_type(const x4_tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->n ? t->types[id] : 0;
}

void x4_tokenizer_free(x4_tokenizer *t)
{
	if (!t)
		return;
	free(t->arena);
	free(t->off);
	free(t->len);
	free(t->scores);
	free(t->types);
	free(t->surf);
	free(t->soff);
	free(t->slen);
	free(t->merge.slot);
	free(t->unused.slot);
	free(t->reserved.slot);
	free(t->ud);
	free(t->ctl);
	free(t);
}

/* What a vocabulary source gives the builder. */
typedef struct vsrc {
	int n;
	const char *(*piece)(const void *ctx, int i, size_t *len);
	const void *ctx;
	const float *scores;   /* [n] */
	const int32_t *types;  /* [n] */
	int32_t bos_id, eos_id, unk_id; /* -1: none / find */
	bool add_space_prefix, remove_extra_ws;
} vsrc;

static int table_init(x4_tok_table *tb, int count)
{
	uint32_t cap = 16;
	while (cap < 2u * (uint32_t)count + 16)
		cap *= 2;
	tb->mask = cap - 1;
	tb->slot = malloc(cap * sizeof(*tb->slot));
	if (!tb->slot)
		return -1;
	memset(tb->slot, 0xff, cap * sizeof(*tb->slot));
	return 0;
}

/* Bucket the ids of one type by first byte. */
static int bucket(x4_tokenizer *t, int type, int32_t **list, int *count, uint32_t at[257])
{
	int n = 0;
	for (int i = 0; i < t->n; i++)
		n += t->types[i] == type;
	*count = n;
	memset(at, 0, 257 * sizeof(*at));
	if (!n)
		return 0;
	*list = malloc((size_t)n * sizeof(**list));
	if (!*list)
		return -1;
	for (int i = 0; i < t->n; i++)
		if (t->types[i] == type)
			at[(unsigned char)t->arena[t->off[i]] + 1]++;
	for (int c = 0; c < 256; c++)
		at[c + 1] += at[c];
	uint32_t fill[256];
	memcpy(fill, at, sizeof(fill));
	for (int i = 0; i < t->n; i++)
		if (t->types[i] == type)
			(*list)[fill[(unsigned char)t->arena[t->off[i]]]++] = i;
	return 0;
}

static int byte_of(const char *p, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	if (n != 6 || memcmp(p, "<0x", 3) || p[5] != '>')
		return -1;
	const char *a = strchr(hex, p[3]), *b = strchr(hex, p[4]);
	if (!p[3] || !p[4] || !a || !b)
		return -1;
	return (int)((a - hex) * 16 + (b - hex));
}

static int build(x4_tokenizer **out, const vsrc *v, x4_err *e)
{
	*out = NULL;
	if (v->n <= 0 || v->n > (1 << 26))
		return x4_err_set(e, X4_EFORMAT, "tokenizer: %d pieces (want 1 to %d)", v->n, 1 << 26);
	x4_tokenizer *t = calloc(1, sizeof(*t));
	if (!t)
		return x4_err_set(e, X4_ENOMEM, "tokenizer: out of memory");
	t->n = v->n;
	t->add_space_prefix = v->add_space_prefix;
	t->remove_extra_ws = v->remove_extra_ws;
	size_t total = 0;
	for (int i = 0; i < v->n; i++) {
		size_t l;
		v->piece(v->ctx, i, &l);
		total += l + 1;
	}
	t->arena = malloc(total);
	t->surf = malloc(total);
	t->off = malloc((size_t)v->n * sizeof(*t->off));
	t->len = malloc((size_t)v->n * sizeof(*t->len));
	t->soff = malloc((size_t)v->n * sizeof(*t->soff));
	t->slen = malloc((size_t)v->n * sizeof(*t->slen));
	t->scores = malloc((size_t)v->n * sizeof(*t->scores));
	t->types = malloc((size_t)v->n);
	if (!t->arena || !t->surf || !t->off || !t->len || !t->soff || !t->slen ||
	    !t->scores || !t->types)
		goto oom;
	int n_merge = 0, n_res = 0, n_unused = 0;
	size_t o = 0, so = 0;
	for (int i = 0; i < 256; i++)
		t->byte_id[i] = -1;
	t->unk_id = -1;
	for (int i = 0; i < v->n; i++) {
		size_t l;
		const char *p = v->piece(v->ctx, i, &l);
		int type = v->types[i];
		if (l == 0 || l > 0xffff) {
			x4_tokenizer_free(t);
			return x4_err_set(e, X4_EFORMAT, "tokenizer: piece %d is %s", i,
					  l ? "longer than 65535 bytes" : "empty");
		}
		if (type < X4_TOK_NORMAL || type > X4_TOK_BYTE) {
			x4_tokenizer_free(t);
			return x4_err_set(e, X4_EFORMAT, "tokenizer: piece %d has token type %d (want 1 to 6)",
					  i, type);
		}
		memcpy(t->arena + o, p, l);
		t->arena[o + l] = 0;
		t->off[i] = (uint32_t)o;
		t->len[i] = (uint32_t)l;
		o += l + 1;
		t->scores[i] = v->scores ? v->scores[i] : 0.0f;
		t->types[i] = (uint8_t)type;
		n_merge += is_merge_type(type) && type != X4_TOK_UNUSED;
		n_unused += type == X4_TOK_UNUSED;
		n_res += !is_merge_type(type);
		/* The surface: "▁" -> ' ' everywhere; a byte piece's byte. */
		t->soff[i] = (uint32_t)so;
		size_t sl = 0;
		if (type == X4_TOK_BYTE) {
			int b = byte_of(p, l);
			if (b < 0) {
				x4_tokenizer_free(t);
				return x4_err_set(e, X4_EFORMAT, "tokenizer: byte piece %d is \"%.*s\", not <0xXX>",
						  i, (int)l, p);
			}
			if (t->byte_id[b] < 0)
				t->byte_id[b] = i;
			t->surf[so] = (char)b;
			sl = 1;
		} else if (type != X4_TOK_CONTROL && type != X4_TOK_UNKNOWN) {
			for (size_t k = 0; k < l;) {
				if (k + 3 <= l && !memcmp(p + k, X4_SPM_SPACE, 3)) {
					t->surf[so + sl++] = ' ';
					k += 3;
				} else {
					t->surf[so + sl++] = p[k++];
				}
			}
		}
		if (type == X4_TOK_UNKNOWN && t->unk_id < 0)
			t->unk_id = i;
		t->slen[i] = (uint32_t)sl;
		so += sl;
	}
	/* sentencepiece decodes <unk> as trainer_spec.unk_surface; GGUF has no
	 * key for it, so the default (which Mistral's model keeps) stands. */
	size_t ul = strlen(X4_SPM_UNK_SURFACE);
	if (v->unk_id >= 0 && v->unk_id < v->n)
		t->unk_id = v->unk_id;
	if (t->unk_id < 0) {
		x4_tokenizer_free(t);
		return x4_err_set(e, X4_EFORMAT, "tokenizer: no piece of type UNKNOWN (2) and no unknown_token_id");
	}
	{
		char *ns = realloc(t->surf, so + ul + 1);
		if (!ns)
			goto oom;
		t->surf = ns;
		memcpy(t->surf + so, X4_SPM_UNK_SURFACE, ul);
		for (int i = 0; i < v->n; i++)
			if (t->types[i] == X4_TOK_UNKNOWN)
				t->soff[i] = (uint32_t)so, t->slen[i] = (uint32_t)ul;
	}
	t->byte_fallback = false;
	for (int b = 0; b < 256; b++)
		t->byte_fallback |= t->byte_id[b] >= 0;
	t->bos_id = v->bos_id >= 0 && v->bos_id < v->n ? v->bos_id : -1;
	t->eos_id = v->eos_id >= 0 && v->eos_id < v->n ? v->eos_id : -1;
	if (table_init(&t->merge, n_merge) || table_init(&t->reserved, n_res) ||
	    table_init(&t->unused, n_unused))
		goto oom;
	for (int i = 0; i < v->n; i++) {
		int ty = t->types[i];
		x4_tok_table *tb = ty == X4_TOK_UNUSED ? &t->unused : is_merge_type(ty) ? &t->merge : &t->reserved;
		const char *p = t->arena + t->off[i];
		/* sentencepiece keeps NORMAL, USER_DEFINED and UNUSED in one map. */
		bool dup = is_merge_type(ty) &&
			   x4_tok_table_get(t, ty == X4_TOK_UNUSED ? &t->merge : &t->unused, p, t->len[i]) >= 0;
		if (ty == X4_TOK_UNUSED)
			t->unused_first[(unsigned char)p[0]] = true;
		if (dup || table_put(t, tb, i)) {
			int32_t o2 = x4_token_find(t, t->arena + t->off[i]);
			int rc = x4_err_set(e, X4_EFORMAT, "tokenizer: piece %d \"%s\" is already piece %d",
					    i, t->arena + t->off[i], o2);
			x4_tokenizer_free(t);
			return rc;
		}
	}
	for (int a = 0; a < 128; a++) {
		char p[4] = { X4_SPM_SPACE[0], X4_SPM_SPACE[1], X4_SPM_SPACE[2], (char)a };
		t->space1[a] = x4_tok_table_get(t, &t->merge, p, 4);
		for (int b = 0; b < 128; b++) {
			char q[2] = { (char)a, (char)b };
			t->ascii2[a][b] = x4_tok_table_get(t, &t->merge, q, 2);
		}
	}
	if (bucket(t, X4_TOK_USER_DEFINED, &t->ud, &t->n_ud, t->ud_at) ||
	    bucket(t, X4_TOK_CONTROL, &t->ctl, &t->n_ctl, t->ctl_at))
		goto oom;
	*out = t;
	return 0;
oom:
	x4_tokenizer_free(t);
	return x4_err_set(e, X4_ENOMEM, "tokenizer: out of memory for %d pieces", v->n);
}

static const char *vocab_piece(const void *ctx, int i, size_t *len)
{
	const x4_vocab *v = ctx;
	*len = strlen(v->pieces[i]);
	return v->pieces[i];
}

int x4_tokenizer_from_vocab(x4_tokenizer **t, const x4_vocab *v, x4_err *e)
{
	vsrc s = {
		.n = v->n, .piece = vocab_piece, .ctx = v, .scores = v->scores,
		.types = v->types, .bos_id = v->bos_id, .eos_id = v->eos_id,
		.unk_id = v->unk_id, .add_space_prefix = v->add_space_prefix,
		.remove_extra_ws = v->remove_extra_whitespaces,
	};
	return build(t, &s, e);
}

typedef struct gctx {
	const x4_gguf *g;
	int64_t kv;
} gctx;

static const char *gguf_piece(const void *ctx, int i, size_t *len)
{
	const gctx *c = ctx;
	const char *s = NULL;
	uint64_t l = 0;
	if (x4_gguf_kv_arr_str(c->g, c->kv, (uint64_t)i, &s, &l))
		l = 0;
	*len = (size_t)l;
	return s;
}

/* An optional integer key: -1 when absent. */
static int gguf_opt_id(const x4_gguf *g, const char *key, int32_t *id, x4_err *e)
{
	*id = -1;
	if (x4_gguf_find_kv(g, key) < 0)
		return 0;
	int64_t v;
	int rc = x4_gguf_get_i64(g, key, &v, e);
	if (rc)
		return rc;
	if (v >= 0 && v <= INT32_MAX)
		*id = (int32_t)v;
	return 0;
}

static int gguf_opt_bool(const x4_gguf *g, const char *key, bool dflt, bool *v, x4_err *e)
{
	*v = dflt;
	return x4_gguf_find_kv(g, key) < 0 ? 0 : x4_gguf_get_bool(g, key, v, e);
}

int x4_tokenizer_from_gguf(x4_tokenizer **t, const x4_gguf *g, x4_err *e)
{
	*t = NULL;
	const char *model;
	uint64_t ml;
	if (x4_gguf_find_kv(g, "tokenizer.ggml.model") >= 0) {
		int rc = x4_gguf_get_str(g, "tokenizer.ggml.model", &model, &ml, e);
		if (rc)
			return rc;
		if (ml != 5 || memcmp(model, "llama", 5))
			return x4_err_set(e, X4_EFORMAT,
					  "tokenizer.ggml.model is \"%.*s\": x4 reads SentencePiece vocabularies (\"llama\") only",
					  (int)X4_MIN(ml, 64), model);
	}
	static const char *const keys[3] = { "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
					     "tokenizer.ggml.token_type" };
	static const int want[3] = { X4_GV_STR, X4_GV_F32, X4_GV_I32 };
	const void *data[3];
	uint64_t cnt[3];
	int64_t kv[3];
	for (int k = 0; k < 3; k++) {
		int et;
		kv[k] = x4_gguf_find_kv(g, keys[k]);
		if (kv[k] < 0)
			return x4_err_set(e, X4_ENOTFOUND, "%s is missing: the GGUF carries no SentencePiece vocabulary",
					  keys[k]);
		if (x4_gguf_kv_type(g, kv[k]) != X4_GV_ARR ||
		    x4_gguf_kv_arr(g, kv[k], &et, &cnt[k], &data[k]) || et != want[k])
			return x4_err_set(e, X4_EFORMAT, "%s is not an array of %s", keys[k],
					  x4_gguf_vtype_name(want[k]));
	}
	if (cnt[1] != cnt[0] || cnt[2] != cnt[0] || cnt[0] > (1u << 26))
		return x4_err_set(e, X4_EFORMAT, "tokenizer.ggml: %llu tokens, %llu scores, %llu token types (want equal counts, at most %d)",
				  (unsigned long long)cnt[0], (unsigned long long)cnt[1],
				  (unsigned long long)cnt[2], 1 << 26);
	int n = (int)cnt[0];
	/* The arrays sit in the mapping at any alignment: copy them. */
	float *scores = malloc((size_t)n * sizeof(float) + 1);
	int32_t *types = malloc((size_t)n * sizeof(int32_t) + 1);
	int rc;
	if (!scores || !types) {
		rc = x4_err_set(e, X4_ENOMEM, "tokenizer: out of memory for %d pieces", n);
		goto out;
	}
	memcpy(scores, data[1], (size_t)n * sizeof(float));
	memcpy(types, data[2], (size_t)n * sizeof(int32_t));
	gctx c = { g, kv[0] };
	vsrc s = { .n = n, .piece = gguf_piece, .ctx = &c, .scores = scores, .types = types };
	if ((rc = gguf_opt_id(g, "tokenizer.ggml.bos_token_id", &s.bos_id, e)) ||
	    (rc = gguf_opt_id(g, "tokenizer.ggml.eos_token_id", &s.eos_id, e)) ||
	    (rc = gguf_opt_id(g, "tokenizer.ggml.unknown_token_id", &s.unk_id, e)) ||
	    (rc = gguf_opt_bool(g, "tokenizer.ggml.add_space_prefix", true, &s.add_space_prefix, e)) ||
	    (rc = gguf_opt_bool(g, "tokenizer.ggml.remove_extra_whitespaces", false,
				&s.remove_extra_ws, e)))
		goto out;
	rc = build(t, &s, e);
out:
	free(scores);
	free(types);
	return rc;
}
