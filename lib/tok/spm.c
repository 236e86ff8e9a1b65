/*
 * spm.c - SentencePiece's ModelProto (tokenizer.model): just enough protobuf
 * to read the pieces and the normalizer, and to write the model back with
 * Xing4's pieces; and x4_vocab_xing4, which derives Xing4's vocabulary from
 * the embedded Mistral v3 model.
 *
 * Field numbers (sentencepiece_model.proto): ModelProto: 1 pieces, 2
 * trainer_spec, 3 normalizer_spec; SentencePiece: 1 piece, 2 score, 3 type;
 * TrainerSpec: 3 model_type, 4 vocab_size, 24 treat_whitespace_as_suffix,
 * 30 control_symbols, 35 byte_fallback, 40-42 unk/bos/eos id, 44
 * unk_surface, 45-47 unk/bos/eos piece; NormalizerSpec: 2
 * precompiled_charsmap, 3 add_dummy_prefix, 4 remove_extra_whitespaces, 5
 * escape_whitespaces (the last three default to true when absent).
 */
#include "tok_int.h"

typedef struct pb {
	const unsigned char *p, *end;
	const unsigned char *base; /* for offsets in messages */
} pb;

typedef struct pb_field {
	uint32_t num;
	int wire;
	uint64_t v;                /* varint, fixed32 or fixed64 value */
	const unsigned char *data; /* wire 2: payload */
	size_t len;
	const unsigned char *start; /* the whole field, tag included */
	size_t raw_len;
} pb_field;

static int pb_varint(pb *b, uint64_t *v)
{
	uint64_t r = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		if (b->p >= b->end)
			return -1;
		unsigned c = *b->p++;
		r |= (uint64_t)(c & 0x7f) << shift;
		if (c < 0x80) {
			*v = r;
			return 0;
		}
	}
	return -1;
}

/* 1 with a field, 0 at the end, -1 on a malformed one. */
static int pb_next(pb *b, pb_field *f)
{
	if (b->p >= b->end)
		return 0;
	f->start = b->p;
	uint64_t tag;
	if (pb_varint(b, &tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff)
		return -1;
	f->num = (uint32_t)(tag >> 3);
	f->wire = (int)(tag & 7);
	f->data = NULL;
	f->len = 0;
	f->v = 0;
	switch (f->wire) {
	case 0:
		if (pb_varint(b, &f->v))
			return -1;
		break;
	case 1:
	case 5: {
		size_t n = f->wire == 1 ? 8 : 4;
		if ((size_t)(b->end - b->p) < n)
			return -1;
		for (size_t i = 0; i < n; i++)
			f->v |= (uint64_t)b->p[i] << (8 * i);
		b->p += n;
		break;
	}
	case 2: {
		uint64_t n;
		if (pb_varint(b, &n) || n > (uint64_t)(b->end - b->p))
			return -1;
		f->data = b->p;
		f->len = (size_t)n;
		b->p += n;
		break;
	}
	default: /* groups (3, 4) are not used by sentencepiece */
		return -1;
	}
	f->raw_len = (size_t)(b->p - f->start);
	return 1;
}

static float pb_f32(uint64_t v)
{
	uint32_t u = (uint32_t)v;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static int bad(x4_err *e, const pb *b, const unsigned char *at, const char *what)
{
	return x4_err_set(e, X4_EFORMAT,
			  "tokenizer.model: malformed %s at byte %zu (not a SentencePiece model?)",
			  what, (size_t)(at - b->base));
}

static int parse_piece(x4_spm_piece *sp, const unsigned char *d, size_t n,
		       const pb *outer, x4_err *e)
{
	pb b = { d, d + n, outer->base };
	pb_field f;
	int r;
	sp->s = NULL;
	sp->len = 0;
	sp->score = 0;
	sp->type = X4_TOK_NORMAL;
	while ((r = pb_next(&b, &f)) > 0) {
		if (f.num == 1 && f.wire == 2) {
			sp->s = (const char *)f.data;
			sp->len = (uint32_t)f.len;
		} else if (f.num == 2 && f.wire == 5) {
			sp->score = pb_f32(f.v);
		} else if (f.num == 3 && f.wire == 0) {
			sp->type = (int)f.v;
		}
	}
	if (r < 0)
		return bad(e, &b, b.p, "piece");
	if (!sp->s || sp->len == 0)
		return bad(e, &b, d, "piece (empty string)");
	if (sp->type < X4_TOK_NORMAL || sp->type > X4_TOK_BYTE)
		return bad(e, &b, d, "piece type");
	return 0;
}

int x4_spm_parse(x4_spm *m, const void *buf, size_t len, x4_err *e)
{
	memset(m, 0, sizeof(*m));
	m->buf = buf;
	m->len = len;
	m->model_type = 1; /* proto default: UNIGRAM */
	m->add_dummy_prefix = m->remove_extra_ws = m->escape_ws = true;
	const unsigned char *unk_surface = (const unsigned char *)X4_SPM_UNK_SURFACE;
	size_t unk_surface_len = strlen(X4_SPM_UNK_SURFACE);

	pb b = { buf, (const unsigned char *)buf + len, buf };
	pb_field f;
	int r, cap = 0;
	while ((r = pb_next(&b, &f)) > 0) {
		if (f.num == 1 && f.wire == 2) {
			if (m->n == cap) {
				cap = cap ? 2 * cap : 1024;
				x4_spm_piece *np = realloc(m->pieces, (size_t)cap * sizeof(*np));
				if (!np) {
					x4_spm_free(m);
					return x4_err_set(e, X4_ENOMEM, "tokenizer.model: out of memory");
				}
				m->pieces = np;
			}
			if (parse_piece(&m->pieces[m->n], f.data, f.len, &b, e)) {
				x4_spm_free(m);
				return e->code;
			}
			m->n++;
		} else if ((f.num == 2 || f.num == 3) && f.wire == 2) {
			pb s = { f.data, f.data + f.len, b.base };
			pb_field g;
			int rs;
			while ((rs = pb_next(&s, &g)) > 0) {
				if (f.num == 2) {
					if (g.num == 3 && g.wire == 0)
						m->model_type = (int)g.v;
					else if (g.num == 24 && g.wire == 0)
						m->treat_ws_as_suffix = g.v != 0;
					else if (g.num == 35 && g.wire == 0)
						m->byte_fallback = g.v != 0;
					else if (g.num == 44 && g.wire == 2) {
						unk_surface = g.data;
						unk_surface_len = g.len;
					}
				} else {
					if (g.num == 2 && g.wire == 2)
						m->has_charsmap = g.len > 0;
					else if (g.num == 3 && g.wire == 0)
						m->add_dummy_prefix = g.v != 0;
					else if (g.num == 4 && g.wire == 0)
						m->remove_extra_ws = g.v != 0;
					else if (g.num == 5 && g.wire == 0)
						m->escape_ws = g.v != 0;
				}
			}
			if (rs < 0) {
				x4_spm_free(m);
				return bad(e, &s, s.p, f.num == 2 ? "trainer_spec" : "normalizer_spec");
			}
		}
	}
	if (r < 0) {
		x4_spm_free(m);
		return bad(e, &b, b.p, "field");
	}
	if (m->n == 0) {
		x4_spm_free(m);
		return x4_err_set(e, X4_EFORMAT, "tokenizer.model: no pieces (not a SentencePiece model?)");
	}
	char *us = malloc(unk_surface_len + 1);
	if (!us) {
		x4_spm_free(m);
		return x4_err_set(e, X4_ENOMEM, "tokenizer.model: out of memory");
	}
	memcpy(us, unk_surface, unk_surface_len);
	us[unk_surface_len] = 0;
	m->unk_surface = us;
	return 0;
}

void x4_spm_free(x4_spm *m)
{
	free(m->pieces);
	free((void *)m->unk_surface);
	memset(m, 0, sizeof(*m));
}

/* ---- writing ---- */

typedef struct wbuf {
	unsigned char *p;
	size_t n, cap;
	bool oom;
} wbuf;

static void w_bytes(wbuf *w, const void *d, size_t n)
{
	if (w->oom)
		return;
	if (w->n + n > w->cap) {
		size_t cap = w->cap ? w->cap : 4096;
		while (cap < w->n + n)
			cap *= 2;
		unsigned char *np = realloc(w->p, cap);
		if (!np) {
			w->oom = true;
			return;
		}
		w->p = np;
		w->cap = cap;
	}
	memcpy(w->p + w->n, d, n);
	w->n += n;
}

static void w_varint(wbuf *w, uint64_t v)
{
	unsigned char t[10];
	int n = 0;
	do {
		t[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	w_bytes(w, t, (size_t)n);
}

static void w_tag(wbuf *w, uint32_t num, int wire) { w_varint(w, (uint64_t)num << 3 | (unsigned)wire); }

static void w_str(wbuf *w, uint32_t num, const void *s, size_t n)
{
	w_tag(w, num, 2);
	w_varint(w, n);
	w_bytes(w, s, n);
}

/* int32 fields are sign-extended to 64 bits on the wire. */
static void w_i32(wbuf *w, uint32_t num, int32_t v)
{
	w_tag(w, num, 0);
	w_varint(w, (uint64_t)(int64_t)v);
}

static void w_piece(wbuf *w, const char *s, float score, int type)
{
	size_t n = strlen(s);
	/* Our own piece message is small: encode it into a scratch buffer to
	 * learn its length first. */
	wbuf m = { 0 };
	w_str(&m, 1, s, n);
	uint32_t u;
	memcpy(&u, &score, 4);
	unsigned char f[4] = { (unsigned char)u, (unsigned char)(u >> 8),
			       (unsigned char)(u >> 16), (unsigned char)(u >> 24) };
	w_tag(&m, 2, 5);
	w_bytes(&m, f, 4);
	w_i32(&m, 3, type);
	if (m.oom)
		w->oom = true;
	else
		w_str(w, 1, m.p, m.n);
	free(m.p);
}

/* The renamed piece of a control symbol, or NULL if v spells it as base
 * does.  diff[nd]: the ids whose spelling differs (a handful). */
static const char *renamed(const x4_spm *base, const x4_vocab *v, const int *diff, int nd,
			   const unsigned char *s, size_t n)
{
	for (int k = 0; k < nd; k++) {
		const x4_spm_piece *p = &base->pieces[diff[k]];
		if (p->len == n && !memcmp(p->s, s, n))
			return v->pieces[diff[k]];
	}
	return NULL;
}

static void w_trainer(wbuf *w, const x4_spm *base, const x4_vocab *v, const unsigned char *d, size_t n)
{
	wbuf t = { 0 };
	pb b = { d, d + n, base->buf };
	pb_field f;
	bool seen[64] = { false };
	int diff[16], nd = 0;
	for (int i = 0; i < X4_MIN(base->n, v->n) && nd < (int)X4_ARRAY_LEN(diff); i++) {
		const x4_spm_piece *p = &base->pieces[i];
		if (strlen(v->pieces[i]) != p->len || memcmp(v->pieces[i], p->s, p->len))
			diff[nd++] = i;
	}
	while (pb_next(&b, &f) > 0) {
		if (f.num < 64)
			seen[f.num] = true;
		if (f.num == 4 && f.wire == 0)
			w_i32(&t, 4, v->n);
		else if (f.num == 40 && f.wire == 0)
			w_i32(&t, 40, v->unk_id);
		else if (f.num == 41 && f.wire == 0)
			w_i32(&t, 41, v->bos_id);
		else if (f.num == 42 && f.wire == 0)
			w_i32(&t, 42, v->eos_id);
		else if (f.num >= 45 && f.num <= 47 && f.wire == 2) {
			int id = f.num == 45 ? v->unk_id : f.num == 46 ? v->bos_id : v->eos_id;
			w_str(&t, f.num, v->pieces[id], strlen(v->pieces[id]));
		} else if (f.num == 30 && f.wire == 2) {
			const char *nn = renamed(base, v, diff, nd, f.data, f.len);
			if (nn)
				w_str(&t, 30, nn, strlen(nn));
			else
				w_bytes(&t, f.start, f.raw_len);
		} else {
			w_bytes(&t, f.start, f.raw_len);
		}
	}
	/* sentencepiece's defaults would name <unk>, <s>, </s>: say ours. */
	if (!seen[4])
		w_i32(&t, 4, v->n);
	for (uint32_t num = 45; num <= 47; num++) {
		int id = num == 45 ? v->unk_id : num == 46 ? v->bos_id : v->eos_id;
		if (!seen[num])
			w_str(&t, num, v->pieces[id], strlen(v->pieces[id]));
	}
	if (t.oom)
		w->oom = true;
	else
		w_str(w, 2, t.p, t.n);
	free(t.p);
}

int x4_spm_write(const x4_spm *base, const x4_vocab *v, unsigned char **out,
		 size_t *out_len, x4_err *e)
{
	wbuf w = { 0 };
	for (int i = 0; i < v->n; i++)
		w_piece(&w, v->pieces[i], v->scores[i], v->types[i]);
	pb b = { base->buf, base->buf + base->len, base->buf };
	pb_field f;
	while (pb_next(&b, &f) > 0) {
		if (f.num == 1)
			continue;
		if (f.num == 2 && f.wire == 2)
			w_trainer(&w, base, v, f.data, f.len);
		else
			w_bytes(&w, f.start, f.raw_len);
	}
	if (w.oom) {
		free(w.p);
		return x4_err_set(e, X4_ENOMEM, "tokenizer.model: out of memory writing %d pieces", v->n);
	}
	*out = w.p;
	*out_len = w.n;
	return 0;
}

/* ---- Xing4's vocabulary ---- */

/* The low ids Xing4 renames.  Mistral's ids 0..7 are <unk>, <s>, </s> and
 * five [INST]-style controls; Xing4 keeps their types and gives them its own
 * names.  The chat markers are CONTROL, not USER_DEFINED: sentencepiece
 * matches USER_DEFINED pieces whole wherever plain text spells them and never
 * matches CONTROL ones, so with CONTROL a user who types "<_end>" or
 * "<_user>" gets text, not a turn boundary (no prompt injection through the
 * template), plain encoding agrees with the sentencepiece oracle, and the
 * markers are matched whole only where the caller asks
 * (X4_TOKENIZE_SPECIAL, or x4_chat_tokenize, which emits them as ids). */
static const struct {
	const char *piece;
	int type;
} xing4_low[] = {
	{ "<_unk>", X4_TOK_UNKNOWN },
	{ "<_bos>", X4_TOK_CONTROL },
	{ "<_end>", X4_TOK_CONTROL },
	{ "<_system>", X4_TOK_CONTROL },
	{ "<_user>", X4_TOK_CONTROL },
	{ "<_bot>", X4_TOK_CONTROL },
	{ "<think>", X4_TOK_CONTROL },
	{ "</think>", X4_TOK_CONTROL },
};

void x4_vocab_free(x4_vocab *v)
{
	if (v->pieces)
		for (int i = 0; i < v->n; i++)
			free(v->pieces[i]);
	free(v->pieces);
	free(v->scores);
	free(v->types);
	free(v->model);
	memset(v, 0, sizeof(*v));
}

int x4_vocab_xing4(int n_vocab, x4_vocab *v, x4_err *e)
{
	memset(v, 0, sizeof(*v));
	x4_spm m;
	int rc = x4_spm_parse(&m, x4_tok_mistral_v3, (size_t)x4_tok_mistral_v3_len, e);
	if (rc)
		return rc;
	if (n_vocab < m.n || n_vocab > (1 << 24)) {
		rc = x4_err_set(e, X4_EINVAL,
				"vocabulary size %d: Xing4's vocabulary holds the %d Mistral v3 pieces and is padded with reserved ones, so it needs %d to %d",
				n_vocab, m.n, m.n, 1 << 24);
		goto out;
	}
	/* x4's encoder implements the identity normalizer and BPE only: check
	 * that the embedded model is what it was when that was written. */
	if (m.model_type != 2 || m.has_charsmap || m.treat_ws_as_suffix || !m.escape_ws ||
	    !m.byte_fallback) {
		rc = x4_err_set(e, X4_EFORMAT,
				"embedded tokenizer.model is not a BPE model with byte fallback and the identity normalizer");
		goto out;
	}
	for (size_t i = 0; i < X4_ARRAY_LEN(xing4_low); i++) {
		int want = i == 0 ? X4_TOK_UNKNOWN : X4_TOK_CONTROL;
		if (m.pieces[i].type != want) {
			rc = x4_err_set(e, X4_EFORMAT, "embedded tokenizer.model: piece %zu has type %d, not %d",
					i, m.pieces[i].type, want);
			goto out;
		}
	}
	v->n = n_vocab;
	v->pieces = calloc((size_t)n_vocab, sizeof(*v->pieces));
	v->scores = calloc((size_t)n_vocab, sizeof(*v->scores));
	v->types = calloc((size_t)n_vocab, sizeof(*v->types));
	if (!v->pieces || !v->scores || !v->types)
		goto oom;
	for (int i = 0; i < n_vocab; i++) {
		char *s;
		if (i < (int)X4_ARRAY_LEN(xing4_low)) {
			s = strdup(xing4_low[i].piece);
			v->scores[i] = m.pieces[i].score;
			v->types[i] = xing4_low[i].type;
		} else if (i < m.n) {
			s = malloc(m.pieces[i].len + 1);
			if (s) {
				memcpy(s, m.pieces[i].s, m.pieces[i].len);
				s[m.pieces[i].len] = 0;
			}
			v->scores[i] = m.pieces[i].score;
			v->types[i] = m.pieces[i].type;
		} else {
			char t[32];
			snprintf(t, sizeof(t), "<_reserved_%d>", i);
			s = strdup(t);
			v->scores[i] = 0;
			v->types[i] = X4_TOK_UNUSED;
		}
		if (!s)
			goto oom;
		v->pieces[i] = s;
	}
	/* The new names must not already be Mistral pieces: sentencepiece
	 * refuses a model that defines a piece twice. */
	for (size_t j = 0; j < X4_ARRAY_LEN(xing4_low); j++)
		for (int i = (int)X4_ARRAY_LEN(xing4_low); i < m.n; i++)
			if (!strcmp(v->pieces[i], xing4_low[j].piece)) {
				rc = x4_err_set(e, X4_EFORMAT, "embedded tokenizer.model already has piece %s (id %d)",
						xing4_low[j].piece, i);
				goto out;
			}
	v->unk_id = 0;
	v->bos_id = 1;
	v->eos_id = 2;
	v->add_space_prefix = m.add_dummy_prefix;
	v->remove_extra_whitespaces = m.remove_extra_ws;
	rc = x4_spm_write(&m, v, &v->model, &v->model_len, e);
	goto out;
oom:
	rc = x4_err_set(e, X4_ENOMEM, "out of memory building a %d-piece vocabulary", n_vocab);
out:
	if (rc)
		x4_vocab_free(v);
	x4_spm_free(&m);
	return rc;
}
