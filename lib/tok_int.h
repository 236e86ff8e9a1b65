/*
 * tok_int.h - what lib/tok/spm.c, lib/tok/tok*.c and lib/tok/chat.c share: the embedded
 * Mistral v3 model, the parts of SentencePiece's ModelProto x4 reads, and
 * the tokenizer's tables.
 */
#ifndef X4_TOK_INT_H
#define X4_TOK_INT_H

#include "x4_int.h"

/* lib/tok/tok_data.S */
extern const unsigned char x4_tok_mistral_v3[];
extern const uint64_t x4_tok_mistral_v3_len;

/* The piece string U+2581, SentencePiece's escaped space. */
#define X4_SPM_SPACE "\xE2\x96\x81"
/* trainer_spec.unk_surface's default: what sentencepiece decodes <unk> to. */
#define X4_SPM_UNK_SURFACE " \xE2\x81\x87 "

typedef struct x4_spm_piece {
	const char *s;  /* into the parsed buffer, not NUL-terminated */
	uint32_t len;
	float score;
	int type;       /* enum x4_tok_type */
} x4_spm_piece;

/* A parsed ModelProto: pieces, plus the fields x4 needs to know it can
 * reproduce the model's behaviour (identity normalizer, BPE, no suffix
 * whitespace).  Points into the caller's buffer. */
typedef struct x4_spm {
	int n;
	x4_spm_piece *pieces;          /* [n] */
	const unsigned char *buf;      /* the whole ModelProto */
	size_t len;
	int model_type;                /* trainer_spec.model_type: 2 = BPE */
	bool byte_fallback;
	bool treat_ws_as_suffix;
	bool add_dummy_prefix, remove_extra_ws, escape_ws;
	bool has_charsmap;             /* a non-identity normalization table */
	const char *unk_surface;       /* NUL-terminated: owned copy */
} x4_spm;

int x4_spm_parse(x4_spm *m, const void *buf, size_t len, x4_err *e);
void x4_spm_free(x4_spm *m);

/* Serialize v's pieces with every other top-level field of base copied byte
 * for byte, except trainer_spec, whose vocab_size, unk/bos/eos ids and
 * piece names follow v, and whose control_symbols follow the pieces v
 * renamed (base id i spelled differently in v). */
int x4_spm_write(const x4_spm *base, const x4_vocab *v, unsigned char **out,
		 size_t *out_len, x4_err *e);

/* A growing array of token ids (lib/tok/tok.c). */
typedef struct x4_ids {
	int32_t *v;
	size_t n, cap;
} x4_ids;
int x4_ids_push(x4_ids *a, int32_t id); /* 0, or -1 out of memory */

/* Encode one fragment of plain text (no special pieces but the
 * user-defined ones) as sentencepiece does, with or without the dummy
 * prefix "▁" the normalizer puts before a text.  -1 out of memory. */
int x4_tok_encode_text(const x4_tokenizer *t, const char *s, size_t n,
		       bool dummy_prefix, x4_ids *out);

/* ---- the tokenizer itself: built by lib/tok/tok_load.c, used by the encoder
 * (lib/tok/tok.c) and the decoder (lib/tok/tok_decode.c) ---- */

/* Open addressing; a slot keeps the piece's hash so that a probe rarely
 * touches the piece itself (measured: the lookups are most of encoding). */
typedef struct x4_tok_slot {
	int32_t id; /* -1: empty */
	uint32_t h;
} x4_tok_slot;
typedef struct x4_tok_table {
	uint32_t mask;
	x4_tok_slot *slot; /* [mask + 1] */
} x4_tok_table;

struct x4_tokenizer {
	int n;
	char *arena;         /* every piece, NUL-terminated */
	uint32_t *off, *len; /* [n] into arena */
	float *scores;       /* [n] */
	uint8_t *types;      /* [n] enum x4_tok_type */
	char *surf;          /* decode surfaces: "▁" -> ' ', <0xXX> -> the byte */
	uint32_t *soff, *slen; /* [n] into surf */
	x4_tok_table merge;  /* NORMAL, USER_DEFINED: what BPE may form */
	/* UNUSED pieces may be formed too (and are split back), but Xing4 has
	 * 98,304 of them at the full preset, none reachable: a table of their
	 * own, consulted only for a string whose first byte starts one, keeps
	 * the hot table small (it is most of encoding's cache misses). */
	x4_tok_table unused;
	bool unused_first[256];
	x4_tok_table reserved; /* CONTROL, UNKNOWN, BYTE */
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

static inline uint32_t x4_tok_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 16777619u;
	}
	return h ^ (h >> 15);
}

/* Inline: the encoder's hot path. */
static inline int32_t x4_tok_table_get(const x4_tokenizer *t, const x4_tok_table *tb,
					const char *s, size_t n)
{
	if (!tb->slot)
		return -1;
	uint32_t h = x4_tok_hash(s, n);
	for (uint32_t i = h & tb->mask;; i = (i + 1) & tb->mask) {
		int32_t id = tb->slot[i].id;
		if (id < 0)
			return -1;
		if (tb->slot[i].h == h && t->len[id] == n && !memcmp(t->arena + t->off[id], s, n))
			return id;
	}
}

/* Length of the valid UTF-8 character at s (n > 0 bytes available), or 0 if
 * it is invalid: sentencepiece's rules (no overlong forms, no surrogates,
 * nothing above U+10FFFF, no truncated sequence). */
static inline int x4_utf8_valid(const unsigned char *s, size_t n)
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

#endif
