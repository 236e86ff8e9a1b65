/*
 * tok.c - SentencePiece BPE encoding from a vocabulary alone (pieces,
 * scores, types), reproducing the sentencepiece library's results id for id
 * (tests/oracle_tok.py checks it over a corpus).  The vocabulary is loaded
 * into the tokenizer's tables by tok_load.c; ids become text in
 * tok_decode.c.
 *
 * Encoding, as sentencepiece does it for a BPE model with the identity
 * normalizer:
 *  1. normalize: each invalid UTF-8 byte becomes U+FFFD, ' ' becomes "▁",
 *     a "▁" goes before a non-empty text (add_space_prefix), and with
 *     remove_extra_whitespaces leading, trailing and repeated spaces go;
 *  2. split into characters, a user-defined piece spelled in the text being
 *     one frozen symbol (longest match);
 *  3. repeatedly merge the adjacent pair whose concatenation is a piece of
 *     the highest score, the leftmost on ties (a heap of candidate pairs
 *     over a linked list of symbols; stale candidates are recognised by
 *     their size);
 *  4. a merged UNUSED piece is split back into the two halves it was made
 *     of, and a symbol that is no piece becomes its UTF-8 bytes' <0xXX>
 *     pieces (byte fallback) or <unk>.
 * CONTROL, UNKNOWN and BYTE pieces are looked up before the others, as
 * sentencepiece's PieceToId does, and are never formed by merges.
 */
#include "tok_int.h"

int x4_ids_push(x4_ids *a, int32_t id)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 64;
		int32_t *v = realloc(a->v, cap * sizeof(*v));
		if (!v)
			return -1;
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n++] = id;
	return 0;
}

/* The longest piece of a bucketed list that s[0, n) starts with: its id
 * and length in *mlen, or -1. */
static int32_t match_whole(const x4_tokenizer *t, const int32_t *list, const uint32_t *at,
			   const char *s, size_t n, size_t *mlen)
{
	unsigned c = (unsigned char)s[0];
	int32_t best = -1;
	size_t bl = 0;
	for (uint32_t k = at[c]; k < at[c + 1]; k++) {
		int32_t id = list[k];
		size_t l = t->len[id];
		if (l > bl && l <= n && !memcmp(t->arena + t->off[id], s, l))
			best = id, bl = l;
	}
	*mlen = bl;
	return best;
}

/* ---- encoding ---- */

/* Into out (capacity 3 * n + 3): see step 1 above.  Returns the length. */
static size_t normalize(const x4_tokenizer *t, const char *text, size_t n, bool prefix,
			char *out)
{
	const unsigned char *s = (const unsigned char *)text;
	size_t i = 0, o = 0;
	bool rew = t->remove_extra_ws;
	if (rew)
		while (i < n && s[i] == ' ')
			i++;
	if (i == n)
		return 0;
	if (prefix) {
		memcpy(out, X4_SPM_SPACE, 3);
		o = 3;
	}
	bool prev_space = rew;
	while (i < n) {
		int l = x4_utf8_valid(s + i, n - i);
		if (l == 0) {
			memcpy(out + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i += 1;
			prev_space = false;
		} else if (s[i] == ' ') {
			if (!(rew && prev_space)) {
				memcpy(out + o, X4_SPM_SPACE, 3);
				o += 3;
			}
			prev_space = rew;
			i += 1;
		} else {
			memcpy(out + o, s + i, (size_t)l);
			o += (size_t)l;
			i += (size_t)l;
			prev_space = false;
		}
	}
	if (rew)
		while (o >= 3 && !memcmp(out + o - 3, X4_SPM_SPACE, 3))
			o -= 3;
	return o;
}

typedef struct sym {
	int32_t prev, next;
	uint32_t start, len;
	bool freeze;
} sym;

typedef struct cand {
	float score;
	int32_t left, right;
	uint32_t size;
} cand;

/* An UNUSED piece that a merge formed, and the halves it is split back into. */
typedef struct rev {
	int32_t id;
	uint32_t ls, ll, rs, rl;
} rev;

typedef struct enc {
	const x4_tokenizer *t;
	const char *buf;  /* normalized text */
	sym *s;
	cand *heap;
	size_t nheap, capheap;
	rev *rv;
	size_t nrv, caprv;
	bool oom;
} enc;

/* sentencepiece's agenda order: higher score first, then the leftmost. */
static bool cand_before(const cand *a, const cand *b)
{
	if (a->score != b->score)
		return a->score > b->score;
	return a->left < b->left;
}

static void heap_push(enc *E, cand c)
{
	if (E->nheap == E->capheap) {
		size_t cap = E->capheap ? 2 * E->capheap : 256;
		cand *h = realloc(E->heap, cap * sizeof(*h));
		if (!h) {
			E->oom = true;
			return;
		}
		E->heap = h;
		E->capheap = cap;
	}
	size_t i = E->nheap++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!cand_before(&c, &E->heap[p]))
			break;
		E->heap[i] = E->heap[p];
		i = p;
	}
	E->heap[i] = c;
}

static cand heap_pop(enc *E)
{
	cand top = E->heap[0], last = E->heap[--E->nheap];
	size_t i = 0, n = E->nheap;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && cand_before(&E->heap[c + 1], &E->heap[c]))
			c++;
		if (!cand_before(&E->heap[c], &last))
			break;
		E->heap[i] = E->heap[c];
		i = c;
	}
	if (n)
		E->heap[i] = last;
	return top;
}

static void add_pair(enc *E, int32_t l, int32_t r)
{
	if (l < 0 || r < 0 || E->s[l].freeze || E->s[r].freeze)
		return;
	const x4_tokenizer *t = E->t;
	uint32_t size = E->s[l].len + E->s[r].len;
	const unsigned char *a = (const unsigned char *)E->buf + E->s[l].start;
	int32_t id;
	if (size == 2 && a[0] < 128 && a[1] < 128)
		id = t->ascii2[a[0]][a[1]];
	else if (size == 4 && E->s[l].len == 3 && a[3] < 128 && !memcmp(a, X4_SPM_SPACE, 3))
		id = t->space1[a[3]];
	else
		id = x4_tok_table_get(t, &t->merge, (const char *)a, size);
	if (id < 0 && t->unused_first[a[0]])
		id = x4_tok_table_get(t, &t->unused, (const char *)a, size);
	if (id < 0)
		return;
	heap_push(E, (cand){ t->scores[id], l, r, size });
	if (t->types[id] != X4_TOK_UNUSED)
		return;
	/* Like sentencepiece, remember the last split seen for the string. */
	size_t k = 0;
	while (k < E->nrv && E->rv[k].id != id)
		k++;
	if (k == E->nrv) {
		if (E->nrv == E->caprv) {
			size_t cap = E->caprv ? 2 * E->caprv : 8;
			rev *v = realloc(E->rv, cap * sizeof(*v));
			if (!v) {
				E->oom = true;
				return;
			}
			E->rv = v;
			E->caprv = cap;
		}
		E->nrv++;
	}
	E->rv[k] = (rev){ id, E->s[l].start, E->s[l].len, E->s[r].start, E->s[r].len };
}

static int32_t piece_to_id(const x4_tokenizer *t, const char *s, size_t n)
{
	int32_t id = x4_tok_table_get(t, &t->reserved, s, n);
	if (id < 0)
		id = x4_tok_table_get(t, &t->merge, s, n);
	if (id < 0)
		id = x4_tok_table_get(t, &t->unused, s, n);
	return id < 0 ? t->unk_id : id;
}

static int emit(enc *E, uint32_t start, uint32_t len, x4_ids *out, int depth)
{
	const x4_tokenizer *t = E->t;
	const char *w = E->buf + start;
	int32_t id = piece_to_id(t, w, len);
	if (id >= 0 && t->types[id] == X4_TOK_UNUSED && depth < 64) {
		for (size_t k = 0; k < E->nrv; k++)
			if (E->rv[k].id == id)
				return emit(E, E->rv[k].ls, E->rv[k].ll, out, depth + 1) ||
				       emit(E, E->rv[k].rs, E->rv[k].rl, out, depth + 1);
	}
	if ((id < 0 || t->types[id] == X4_TOK_UNKNOWN) && t->byte_fallback) {
		for (uint32_t i = 0; i < len; i++) {
			int32_t b = t->byte_id[(unsigned char)w[i]];
			if (x4_ids_push(out, b >= 0 ? b : t->unk_id))
				return -1;
		}
		return 0;
	}
	return x4_ids_push(out, id);
}

static const uint8_t one_char_len[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };

int x4_tok_encode_text(const x4_tokenizer *t, const char *text, size_t n, bool prefix,
		       x4_ids *out)
{
	if (n == 0)
		return 0;
	char *buf = malloc(3 * n + 3);
	sym *s = malloc((3 * n + 3) * sizeof(*s));
	enc E = { .t = t, .buf = buf, .s = s };
	int rc = -1;
	if (!buf || !s)
		goto out;
	size_t L = normalize(t, text, n, prefix, buf);
	int32_t ns = 0;
	for (size_t p = 0; p < L;) {
		size_t l = 0;
		bool fr = false;
		if (t->n_ud)
			fr = match_whole(t, t->ud, t->ud_at, buf + p, L - p, &l) >= 0;
		if (!fr)
			l = X4_MIN(L - p, one_char_len[(unsigned char)buf[p] >> 4]);
		s[ns] = (sym){ ns - 1, -1, (uint32_t)p, (uint32_t)l, fr };
		if (ns > 0)
			s[ns - 1].next = ns;
		ns++;
		p += l;
	}
	for (int32_t i = 1; i < ns; i++)
		add_pair(&E, i - 1, i);
	while (E.nheap && !E.oom) {
		cand c = heap_pop(&E);
		sym *a = &s[c.left], *b = &s[c.right];
		if (a->len == 0 || b->len == 0 || a->len + b->len != c.size)
			continue; /* stale: one side has changed since */
		a->len += b->len;
		a->next = b->next;
		if (b->next >= 0)
			s[b->next].prev = c.left;
		b->len = 0;
		add_pair(&E, a->prev, c.left);
		add_pair(&E, c.left, a->next);
	}
	if (E.oom)
		goto out;
	for (int32_t i = ns ? 0 : -1; i >= 0; i = s[i].next)
		if (emit(&E, s[i].start, s[i].len, out, 0))
			goto out;
	rc = 0;
out:
	free(buf);
	free(s);
	free(E.heap);
	free(E.rv);
	return rc;
}

int x4_tokenize(const x4_tokenizer *t, const char *text, size_t len, unsigned flags,
		int32_t **ids, size_t *n, x4_err *e)
{
	x4_ids out = { 0 };
	*ids = NULL;
	*n = 0;
	if ((flags & X4_TOKENIZE_BOS) && t->bos_id >= 0 && x4_ids_push(&out, t->bos_id))
		goto oom;
	if (!(flags & X4_TOKENIZE_SPECIAL) || !t->n_ctl) {
		if (x4_tok_encode_text(t, text, len, t->add_space_prefix, &out))
			goto oom;
	} else {
		/* Fragments between control pieces are encoded apart; only a
		 * text that starts the input gets the dummy prefix, so that the
		 * chat prompt rendered as text encodes as x4_chat_tokenize does. */
		size_t from = 0;
		for (size_t p = 0; p <= len; p++) {
			size_t ml = 0;
			int32_t id = -1;
			if (p < len)
				id = match_whole(t, t->ctl, t->ctl_at, text + p, len - p, &ml);
			if (id < 0 && p < len)
				continue;
			if (x4_tok_encode_text(t, text + from, p - from,
					       from == 0 && t->add_space_prefix, &out))
				goto oom;
			if (id >= 0 && x4_ids_push(&out, id))
				goto oom;
			from = p + ml;
			if (ml)
				p += ml - 1;
		}
	}
	*ids = out.v;
	*n = out.n;
	return 0;
oom:
	free(out.v);
	return x4_err_set(e, X4_ENOMEM, "tokenize: out of memory for %zu bytes of text", len);
}
