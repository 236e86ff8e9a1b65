/*
 * tok.c - SentencePiece BPE encoding and decoding from a vocabulary alone
 * (pieces, scores, types), reproducing the sentencepiece library's results
 * id for id (tests/oracle_tok.py checks it over a corpus).
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

/* Open addressing; a slot keeps the piece's hash so that a probe rarely
 * touches the piece itself (measured: the lookups are most of encoding). */
typedef struct slot {
	int32_t id; /* -1: empty */
	uint32_t h;
} slot;
typedef struct table {
	uint32_t mask;
	slot *slot; /* [mask + 1] */
} table;

struct x4_tokenizer {
	int n;
	char *arena;         /* every piece, NUL-terminated */
	uint32_t *off, *len; /* [n] into arena */
	float *scores;       /* [n] */
	uint8_t *types;      /* [n] enum x4_tok_type */
	char *surf;          /* decode surfaces: "▁" -> ' ', <0xXX> -> the byte */
	uint32_t *soff, *slen; /* [n] into surf */
	table merge;         /* NORMAL, USER_DEFINED: what BPE may form */
	/* UNUSED pieces may be formed too (and are split back), but Xing4 has
	 * 98,304 of them at the full preset, none reachable: a table of their
	 * own, consulted only for a string whose first byte starts one, keeps
	 * the hot table small (it is most of encoding's cache misses). */
	table unused;
	bool unused_first[256];
	table reserved;      /* CONTROL, UNKNOWN, BYTE */
	int32_t byte_id[256];
	bool byte_fallback;
	int32_t unk_id, bos_id, eos_id;
	bool add_space_prefix, remove_extra_ws;
	/* Pieces matched whole in text, bucketed by first byte: user-defined
	 * ones always, control ones with X4_TOKENIZE_SPECIAL. */
	int32_t *ud, *ctl;   /* ids sorted by first byte */
	int n_ud, n_ctl;
	uint32_t ud_at[257], ctl_at[257]; /* bucket starts */
	/* Merges of two ASCII characters, and of "▁" and one: most pairs of
	 * an English text's first round, looked up without hashing. */
	int32_t ascii2[128][128], space1[128]; /* id or -1 */
};

static uint32_t hash_bytes(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 16777619u;
	}
	return h ^ (h >> 15);
}

static int32_t table_get(const x4_tokenizer *t, const table *tb, const char *s, size_t n)
{
	if (!tb->slot)
		return -1;
	uint32_t h = hash_bytes(s, n);
	for (uint32_t i = h & tb->mask;; i = (i + 1) & tb->mask) {
		int32_t id = tb->slot[i].id;
		if (id < 0)
			return -1;
		if (tb->slot[i].h == h && t->len[id] == n && !memcmp(t->arena + t->off[id], s, n))
			return id;
	}
}

/* -1 when the piece is already there (sentencepiece refuses such a model). */
static int table_put(const x4_tokenizer *t, table *tb, int32_t id)
{
	const char *s = t->arena + t->off[id];
	uint32_t h = hash_bytes(s, t->len[id]), i = h & tb->mask;
	for (; tb->slot[i].id >= 0; i = (i + 1) & tb->mask) {
		int32_t o = tb->slot[i].id;
		if (t->len[o] == t->len[id] && !memcmp(t->arena + t->off[o], s, t->len[id]))
			return -1;
	}
	tb->slot[i] = (slot){ id, h };
	return 0;
}

static bool is_merge_type(int type)
{
	return type == X4_TOK_NORMAL || type == X4_TOK_USER_DEFINED || type == X4_TOK_UNUSED;
}

/* Length of the valid UTF-8 character at s (n > 0 bytes available), or 0 if
 * it is invalid: sentencepiece's rules (no overlong forms, no surrogates,
 * nothing above U+10FFFF, no truncated sequence). */
static int utf8_valid(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	if (c < 0x80)
		return 1;
	int l;
	uint32_t cp, min;
	if ((c & 0xe0) == 0xc0)
		l = 2, cp = c & 0x1f, min = 0x80;
	else if ((c & 0xf0) == 0xe0)
		l = 3, cp = c & 0x0f, min = 0x800;
	else if ((c & 0xf8) == 0xf0)
		l = 4, cp = c & 0x07, min = 0x10000;
	else
		return 0;
	if (n < (size_t)l)
		return 0;
	for (int i = 1; i < l; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp < min || (cp >= 0xd800 && cp < 0xe000) || cp > 0x10ffff)
		return 0;
	return l;
}

/* The byte length a UTF-8 lead byte claims (1 for ASCII and for bytes that
 * lead nothing). */
static int utf8_claim(unsigned c)
{
	if ((c & 0xe0) == 0xc0)
		return 2;
	if ((c & 0xf0) == 0xe0)
		return 3;
	if ((c & 0xf8) == 0xf0)
		return 4;
	return 1;
}

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
		int l = utf8_valid(s + i, n - i);
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
		id = table_get(t, &t->merge, (const char *)a, size);
	if (id < 0 && t->unused_first[a[0]])
		id = table_get(t, &t->unused, (const char *)a, size);
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
	int32_t id = table_get(t, &t->reserved, s, n);
	if (id < 0)
		id = table_get(t, &t->merge, s, n);
	if (id < 0)
		id = table_get(t, &t->unused, s, n);
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

/* ---- decoding ---- */

static size_t put(char *out, size_t w, size_t cap, const char *s, size_t n)
{
	size_t k = X4_MIN(n, cap - w);
	memcpy(out + w, s, k);
	return w + k;
}

/* Emit what the pending bytes of a run of byte pieces decode to: whole
 * characters, and U+FFFD for each byte that cannot start one, exactly as
 * sentencepiece decodes the run.  Holds back a sequence that may still be
 * completed unless final (the run has ended). */
static size_t drain(x4_detok *st, char *out, size_t w, size_t cap, bool final)
{
	while (st->npend > 0) {
		const unsigned char *p = st->pend;
		int claim = utf8_claim(p[0]), take = 1;
		bool ok = false;
		if (p[0] < 0x80) {
			ok = true;
		} else if (claim > 1) {
			int l = utf8_valid(p, (size_t)st->npend);
			if (l > 0) {
				ok = true;
				take = l;
			} else if (st->npend < claim && !final) {
				bool trails = true;
				for (int i = 1; i < st->npend; i++)
					trails &= (p[i] & 0xc0) == 0x80;
				if (trails)
					break; /* may still complete */
			}
		}
		if (ok)
			w = put(out, w, cap, (const char *)p, (size_t)take);
		else
			w = put(out, w, cap, "\xEF\xBF\xBD", 3);
		memmove(st->pend, st->pend + take, (size_t)(st->npend - take));
		st->npend -= take;
	}
	return w;
}

size_t x4_detok_step(const x4_tokenizer *t, x4_detok *st, int32_t id, char *out, size_t cap)
{
	if (id < 0 || id >= t->n)
		return 0;
	int type = t->types[id];
	const char *s = t->surf + t->soff[id];
	size_t n = t->slen[id];
	if (type == X4_TOK_BYTE) {
		st->started = true;
		if (st->npend >= (int)sizeof(st->pend))
			return 0; /* cannot happen: drain leaves at most 3 */
		st->pend[st->npend++] = (unsigned char)s[0];
		return drain(st, out, 0, cap, false);
	}
	size_t w = drain(st, out, 0, cap, true);
	if (type == X4_TOK_CONTROL)
		return w;
	/* The space a word-start piece brings is dropped at the start of
	 * the text, as sentencepiece does when the encoder adds one. */
	if (!st->started && type != X4_TOK_UNKNOWN && n && s[0] == ' ' &&
	    !memcmp(t->arena + t->off[id], X4_SPM_SPACE, 3) &&
	    (t->add_space_prefix || t->remove_extra_ws))
		s++, n--;
	st->started = true;
	return put(out, w, cap, s, n);
}

size_t x4_detok_flush(const x4_tokenizer *t, x4_detok *st, char *out, size_t cap)
{
	return drain(st, out, 0, cap, true);
}

int x4_detokenize(const x4_tokenizer *t, const int32_t *ids, size_t n, char **out, x4_err *e)
{
	x4_detok st = { 0 };
	size_t maxs = 16;
	for (int i = 0; i < t->n; i++)
		maxs = X4_MAX(maxs, (size_t)t->slen[i] + 16);
	size_t cap = 4 * n + maxs + 1, w = 0;
	char *buf = malloc(cap);
	if (!buf)
		return x4_err_set(e, X4_ENOMEM, "detokenize: out of memory");
	for (size_t i = 0; i <= n; i++) {
		if (cap - w < maxs + 1) {
			cap *= 2;
			char *nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				return x4_err_set(e, X4_ENOMEM, "detokenize: out of memory");
			}
			buf = nb;
		}
		if (i == n) {
			w += x4_detok_flush(t, &st, buf + w, cap - w);
			break;
		}
		if (ids[i] < 0 || ids[i] >= t->n) {
			free(buf);
			return x4_err_set(e, X4_EINVAL, "detokenize: token id %d at position %zu is out of range (vocabulary of %d)",
					  ids[i], i, t->n);
		}
		w += x4_detok_step(t, &st, ids[i], buf + w, cap - w);
	}
	buf[w] = 0;
	*out = buf;
	return 0;
}

/* ---- building ---- */

const char *x4_token_piece(const x4_tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->n ? t->arena + t->off[id] : NULL;
}

int32_t x4_token_find(const x4_tokenizer *t, const char *piece)
{
	size_t n = strlen(piece);
	int32_t id = table_get(t, &t->reserved, piece, n);
	if (id < 0)
		id = table_get(t, &t->merge, piece, n);
	return id >= 0 ? id : table_get(t, &t->unused, piece, n);
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

static int table_init(table *tb, int count)
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
		table *tb = ty == X4_TOK_UNUSED ? &t->unused : is_merge_type(ty) ? &t->merge : &t->reserved;
		const char *p = t->arena + t->off[i];
		/* sentencepiece keeps NORMAL, USER_DEFINED and UNUSED in one map. */
		bool dup = is_merge_type(ty) &&
			   table_get(t, ty == X4_TOK_UNUSED ? &t->merge : &t->unused, p, t->len[i]) >= 0;
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
		t->space1[a] = table_get(t, &t->merge, p, 4);
		for (int b = 0; b < 128; b++) {
			char q[2] = { (char)a, (char)b };
			t->ascii2[a][b] = table_get(t, &t->merge, q, 2);
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
