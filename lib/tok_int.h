/*
 * tok_int.h - what lib/spm.c, lib/tok.c and lib/chat.c share: the embedded
 * Mistral v3 model and the parts of SentencePiece's ModelProto x4 reads.
 */
#ifndef X4_TOK_INT_H
#define X4_TOK_INT_H

#include "x4_int.h"

/* lib/tok_data.S */
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



/* A growing array of token ids (lib/tok.c). */
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
#endif
