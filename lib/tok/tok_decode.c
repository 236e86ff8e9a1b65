/*
 * tok_decode.c - token ids back to text, as sentencepiece decodes them:
 * "▁" is a space, a run of byte pieces becomes the UTF-8 it spells (U+FFFD
 * for each byte that starts no valid character), and the space a word-start
 * piece brings is dropped at the start of the text.  x4_detok_step does it
 * one id at a time for streaming output.
 */
#include "tok_int.h"

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
			int l = x4_utf8_valid(p, (size_t)st->npend);
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
