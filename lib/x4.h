/*
 * x4.h - the one public header of libx4, the core of the x4 toolkit for the
 * Xing4.0-29B-A4B model (GGUF architecture `xing4_0`).
 *
 * The boundary: everything a tool in cmd/ may call is declared here, and
 * nothing else.  Handles are opaque; option structs are plain C.  Every
 * function that can fail returns 0 or a negative X4_E* code and fills the
 * caller-owned x4_err with one message naming the cause (and, where there is
 * one, the fix).  The library never prints and never exits: only cmd/ does.
 * Kernel launchers live behind lib/x4_kern.h, which only lib/ and tests/ see.
 *
 * Sections (and the files that implement each):
 *   1. errors and version      (lib/util/err.c)
 *   2. block formats           (lib/quant/quant.c)
 *   3. GGUF reader and writer  (lib/gguf/gguf.c, lib/gguf/gguf_get.c, lib/gguf/gguf_write.c)
 *   4. model config, binding   (lib/model/model.c)
 *   5. tokenizer and chat      (lib/tok/tok*.c, lib/tok/spm.c, lib/tok/chat.c)
 *   6. trunk (CPU and CUDA)    (lib/cpu/trunk_cpu.c, lib/cuda/trunk_cuda.c)
 *  6b. the memory plan         (lib/cuda/mem_plan.c)
 *   7. sampling                (lib/run/sample.c)
 *  7b. the generation session  (lib/run/session.c)
 *  7c. the prefix store        (lib/run/prefix.c)
 *   8. utilities               (lib/util/util.c)
 *   9. npy writer, MoE replay  (lib/util/npy.c, lib/model/replay.c)
 *  10. profiling              (lib/prof/prof*.c, lib/prof/trace.c)
 */
#ifndef X4_H
#define X4_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ===================== 1. errors and version ===================== */

enum x4_status {
	X4_OK = 0,
	X4_EIO = -1,       /* open/read/write/rename failed */
	X4_EFORMAT = -2,   /* malformed or foreign file */
	X4_ENOMEM = -3,    /* host or device allocation failed */
	X4_EINVAL = -4,    /* bad argument or option value */
	X4_ESHAPE = -5,    /* tensor missing, extra, mistyped or misshaped */
	X4_ENOTFOUND = -6, /* key, tensor, file or token not found */
	X4_ERANGE = -7,    /* value out of range: a context that does not fit */
	X4_ECUDA = -8,     /* a CUDA call failed, or no CUDA in this build */
	X4_ENUMERIC = -9,  /* a NaN or Inf where a finite value is required */
	X4_EINTR = -10,    /* interrupted at a token boundary */
};

#define X4_ERR_MSG 1024
typedef struct x4_err {
	int code;
	char msg[X4_ERR_MSG];
} x4_err;

/* printf-style: sets e->code and e->msg, returns code (for `return x4_err_set(...)`). */
int x4_err_set(x4_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
const char *x4_status_name(int code);

const char *x4_version(void);      /* "0.1.0" */
const char *x4_commit(void);       /* git describe at build time, or "unknown" */
/* CUDA runtime version as "13.0", or "none" in a build without CUDA. */
const char *x4_cuda_runtime(void);

/* ===================== 2. block formats ===================== */

/* ggml type ids, as stored in GGUF. */
enum x4_type {
	X4_T_F32 = 0,
	X4_T_F16 = 1,
	X4_T_Q8_0 = 8,
	X4_T_Q4_K = 12,
	X4_T_Q6_K = 14,
	X4_T_IQ4_NL = 20,
	X4_T_BF16 = 30,
};

/* Name ("IQ4_NL") of any ggml type id; "?" for one x4 does not know. */
const char *x4_type_name(int type);
/* True for the types above (those x4 can dequantize). */
bool x4_type_known(int type);
/* Elements per block and bytes per block; 0 for an unknown type. */
int x4_type_block_elems(int type);
int x4_type_block_bytes(int type);
/* Bytes of n elements (n a multiple of the block size), or 0 if it is not. */
uint64_t x4_type_bytes(int type, uint64_t n);

uint16_t x4_f32_to_f16(float f);
float x4_f16_to_f32(uint16_t h);
uint16_t x4_f32_to_bf16(float f); /* round to nearest even, NaN stays NaN */
float x4_bf16_to_f32(uint16_t h);

/* Dequantize n elements (a multiple of the type's block) of any known type. */
int x4_dequant(int type, const void *src, float *dst, uint64_t n, x4_err *e);
/* Quantize n elements into BF16, F16, F32, Q8_0, Q6_K or IQ4_NL. IQ4_NL and
 * Q6_K search the scale to minimise the squared error, not just max/127;
 * Q8_0 and BF16 give ggml's reference bytes.  Deterministic and
 * single-threaded (callers parallelise over rows).  For the block types a
 * NaN/Inf input is X4_ENUMERIC and |x| > 2e6 X4_ERANGE; Q4_K is read-only
 * (X4_EINVAL). */
int x4_quant(int type, const float *src, void *dst, uint64_t n, x4_err *e);

/* The IQ4_NL codebook (lib/blockfmt.h's), for the quantizer and the tests;
 * the kernels take blockfmt.h's packed copy. */
extern const int8_t x4_iq4nl_values[16];

/* ===================== 3. GGUF reader and writer ===================== */

enum x4_gguf_vtype {
	X4_GV_U8 = 0, X4_GV_I8 = 1, X4_GV_U16 = 2, X4_GV_I16 = 3,
	X4_GV_U32 = 4, X4_GV_I32 = 5, X4_GV_F32 = 6, X4_GV_BOOL = 7,
	X4_GV_STR = 8, X4_GV_ARR = 9, X4_GV_U64 = 10, X4_GV_I64 = 11,
	X4_GV_F64 = 12,
};
const char *x4_gguf_vtype_name(int vtype);

typedef struct x4_gguf x4_gguf;

typedef struct x4_gguf_tensor {
	const char *name;     /* NUL-terminated copy */
	int type;             /* enum x4_type (validated: known to x4) */
	int n_dims;           /* 1..4 */
	uint64_t ne[4];       /* ggml order, ne[0] fastest; unused dims are 1 */
	uint64_t n_elems;
	uint64_t offset;      /* from the start of the data section */
	uint64_t nbytes;
	const void *data;     /* into the mapping */
} x4_gguf_tensor;

/* Map and validate a whole file: every count, length, type, dimension
 * product, offset and overlap is checked against the file's size before any
 * of it is used.  A fault is one error naming the byte offset. */
int x4_gguf_open(x4_gguf **out, const char *path, x4_err *e);
/* The same over a caller's buffer (kept, not copied); for tests and fuzzing. */
int x4_gguf_open_mem(x4_gguf **out, const void *data, size_t size, x4_err *e);
void x4_gguf_close(x4_gguf *g);

uint32_t x4_gguf_version(const x4_gguf *g);
uint64_t x4_gguf_file_size(const x4_gguf *g);
uint32_t x4_gguf_alignment(const x4_gguf *g);
uint64_t x4_gguf_data_offset(const x4_gguf *g); /* absolute file offset */
const void *x4_gguf_base(const x4_gguf *g);     /* the whole mapping */

int64_t x4_gguf_kv_count(const x4_gguf *g);
const char *x4_gguf_kv_key(const x4_gguf *g, int64_t i);
int x4_gguf_kv_type(const x4_gguf *g, int64_t i);
int64_t x4_gguf_find_kv(const x4_gguf *g, const char *key); /* -1 if absent */
/* Scalar getters: convert between integer widths when the value fits, and
 * fail with X4_EFORMAT naming the key when the type does not match. */
int x4_gguf_get_u64(const x4_gguf *g, const char *key, uint64_t *v, x4_err *e);
int x4_gguf_get_i64(const x4_gguf *g, const char *key, int64_t *v, x4_err *e);
int x4_gguf_get_f64(const x4_gguf *g, const char *key, double *v, x4_err *e);
int x4_gguf_get_bool(const x4_gguf *g, const char *key, bool *v, x4_err *e);
/* A string value: pointer into the mapping (not NUL-terminated) and length. */
int x4_gguf_get_str(const x4_gguf *g, const char *key, const char **s,
		    uint64_t *len, x4_err *e);
/* By index, for dumping every key. */
int x4_gguf_kv_u64(const x4_gguf *g, int64_t i, uint64_t *v);
int x4_gguf_kv_i64(const x4_gguf *g, int64_t i, int64_t *v);
int x4_gguf_kv_f64(const x4_gguf *g, int64_t i, double *v);
int x4_gguf_kv_str(const x4_gguf *g, int64_t i, const char **s, uint64_t *len);
/* Arrays: element type and count; numeric elements are packed at *data
 * (little-endian, unaligned); *data is NULL for a string array. */
int x4_gguf_kv_arr(const x4_gguf *g, int64_t i, int *elem_type, uint64_t *n,
		   const void **data);
/* String element j of a string array. */
int x4_gguf_kv_arr_str(const x4_gguf *g, int64_t i, uint64_t j, const char **s,
		       uint64_t *len);

int64_t x4_gguf_tensor_count(const x4_gguf *g);
const x4_gguf_tensor *x4_gguf_tensor_at(const x4_gguf *g, int64_t i);
const x4_gguf_tensor *x4_gguf_find_tensor(const x4_gguf *g, const char *name);

/* Writer.  Declare keys and tensors (directory order = data order), then
 * x4_gguf_writer_begin_data() writes the header; tensor bytes are then given
 * by x4_gguf_writer_pwrite() from any thread in any order (each tensor is
 * placed at the strict padded offset llama.cpp demands); finish() pads,
 * fsyncs and renames the temporary file onto the path.  abort() (or a
 * failed finish) removes the temporary file: nothing half-written remains. */
typedef struct x4_gguf_writer x4_gguf_writer;
int x4_gguf_writer_open(x4_gguf_writer **out, const char *path, x4_err *e);
int x4_gguf_writer_kv_u32(x4_gguf_writer *w, const char *key, uint32_t v);
int x4_gguf_writer_kv_i32(x4_gguf_writer *w, const char *key, int32_t v);
int x4_gguf_writer_kv_u64(x4_gguf_writer *w, const char *key, uint64_t v);
int x4_gguf_writer_kv_f32(x4_gguf_writer *w, const char *key, float v);
int x4_gguf_writer_kv_bool(x4_gguf_writer *w, const char *key, bool v);
int x4_gguf_writer_kv_str(x4_gguf_writer *w, const char *key, const char *v);
int x4_gguf_writer_kv_arr_str(x4_gguf_writer *w, const char *key,
			      const char *const *v, uint64_t n);
int x4_gguf_writer_kv_arr_f32(x4_gguf_writer *w, const char *key,
			      const float *v, uint64_t n);
int x4_gguf_writer_kv_arr_i32(x4_gguf_writer *w, const char *key,
			      const int32_t *v, uint64_t n);
/* Returns the tensor's index (>= 0) or a negative code. */
int x4_gguf_writer_tensor(x4_gguf_writer *w, const char *name, int type,
			  int n_dims, const uint64_t *ne);
int x4_gguf_writer_begin_data(x4_gguf_writer *w, x4_err *e);
uint64_t x4_gguf_writer_tensor_bytes(const x4_gguf_writer *w, int tensor);
/* Thread-safe after begin_data. */
int x4_gguf_writer_pwrite(x4_gguf_writer *w, int tensor, uint64_t at,
			  const void *data, size_t n, x4_err *e);
int x4_gguf_writer_finish(x4_gguf_writer *w, x4_err *e); /* frees w */
void x4_gguf_writer_abort(x4_gguf_writer *w);            /* frees w */
/* Errors met while declaring keys/tensors are kept and reported by
 * begin_data (so the declaration calls need no checks of their own); after a
 * failed begin_data call abort().  finish() fails unless every tensor was
 * given exactly its x4_gguf_writer_tensor_bytes() bytes: a missed chunk would
 * otherwise read back as silent zeros.  general.alignment, when the caller
 * adds it (as a u32), sets the alignment; otherwise it is 32 and unwritten. */

/* ===================== 4. model config and binding ===================== */

/* The dimensions of a xing4_0 checkpoint, read from its own keys (nothing
 * is hard-coded to the released 3584/40).  Field comments name the key,
 * prefixed `xing4_0.`. */
typedef struct x4_config {
	int n_embd;          /* embedding_length: D, one stream (3584) */
	int n_hc;            /* hyper_connection.count (4) */
	int n_block;         /* block_count minus nextn_predict_layers (40) */
	int n_block_file;    /* block_count as stored (41) */
	int n_nextn;         /* nextn_predict_layers (1) */
	int n_dense;         /* leading_dense_block_count (2) */
	int n_head;          /* attention.head_count (32) */
	int q_lora;          /* attention.q_lora_rank (768) */
	int kv_lora;         /* attention.kv_lora_rank (512) */
	int d_qk;            /* attention.key_length_mla (192) */
	int d_v;             /* attention.value_length_mla (128) */
	int d_rope;          /* rope.dimension_count (64) */
	int d_nope;          /* d_qk - d_rope (128) */
	int n_vocab;         /* vocab_size, else the token list's length */
	int n_ff;            /* feed_forward_length: dense FFN width (9216) */
	int n_expert;        /* expert_count (64) */
	int n_expert_used;   /* expert_used_count (4) */
	int n_expert_shared; /* expert_shared_count (1) */
	int n_ff_exp;        /* expert_feed_forward_length (1024) */
	int n_ctx_train;     /* context_length (262144) */
	int sinkhorn_iters;  /* hyper_connection.sinkhorn_iterations (20) */
	float hc_eps;        /* hyper_connection.epsilon (1e-6) */
	float clamp_min, clamp_max; /* hyper_connection.clamp_min/max, else config.json, else -30/30 */
	float rms_eps;       /* attention.layer_norm_rms_epsilon (1e-6) */
	float rope_base;     /* rope.freq_base (10000) */
	float yarn_factor;   /* rope.scaling.factor (64) */
	int yarn_orig_ctx;   /* rope.scaling.original_context_length (4096) */
	float yarn_beta_fast, yarn_beta_slow; /* (32, 1) */
	float yarn_log_mult; /* rope.scaling.yarn_log_multiplier (0.1) */
	float expert_scale;  /* expert_weights_scale (2.0) */
	bool expert_norm;    /* expert_weights_norm (true) */
	int gating_func;     /* expert_gating_func (2 = sigmoid) */
	int bos_id, eos_id, unk_id; /* tokenizer.ggml.*_token_id (1, 2, 0) */
	float kq_scale;      /* derived: mscale^2 / sqrt(d_qk) (0.14467963) */
} x4_config;

/* Read and check every key a xing4_0 file must have (architecture, the
 * dimensions above, consistency between them).  A missing or mistyped key
 * names the key. */
int x4_config_read(const x4_gguf *g, x4_config *c, x4_err *e);

/* The presets x4-synth writes: "tiny", "small", "full" (full = the released
 * dimensions).  Fills every field, derived ones included. */
int x4_config_preset(const char *name, x4_config *c, x4_err *e);

/* What a tensor is for, and so the block formats x4's kernels take for it
 * (x4_role_types).  The released file holds each role's first type. */
enum x4_role {
	X4_ROLE_F32 = 0,    /* norm gains, the router, its bias, the gate's constants: F32 */
	X4_ROLE_BF16 = 1,   /* the embedding, attention and gate projections: BF16 */
	X4_ROLE_FFN = 2,    /* the dense FFN and the shared expert: IQ4_NL */
	X4_ROLE_EXPERT = 3, /* the routed experts: IQ4_NL, or Q8_0 */
	X4_ROLE_HEAD = 4,   /* the output head: Q6_K */
};
/* The types a role takes, a bit (1u << type) each. */
uint32_t x4_role_types(int role);
/* "IQ4_NL|Q8_0": the types of a role, for messages and tables. */
const char *x4_role_types_name(int role);

/* One tensor of the released layout. */
typedef struct x4_tensor_spec {
	char name[64];
	int type;       /* enum x4_type: the released file's */
	int role;       /* enum x4_role: the types a checkpoint may hold instead */
	int n_dims;
	uint64_t ne[4];
	int block;      /* -1 for a global tensor */
} x4_tensor_spec;

/* Every tensor of the released layout for c, in file order (token_embd,
 * output_norm, output, then blk.0 ... blk.<n_block_file-1>, NextN last).
 * *out is malloc'd; *n receives the count (977 for the full preset). */
int x4_layout(const x4_config *c, x4_tensor_spec **out, int *n, x4_err *e);

/* Declare every key x4_config_read reads (general.architecture, the
 * xing4_0.* keys of docs/gguf.md 4 with the clamp extension, and the
 * tokenizer's bos/eos/unknown ids) on a writer; errors surface at
 * x4_gguf_writer_begin_data like any declaration's.  (lib/model/layout.c) */
int x4_config_write(x4_gguf_writer *w, const x4_config *c);

/* One decode token's weight bytes (docs/record.md 1), from a tensor list:
 * the file's own directory or x4_layout's.  Rows as docs/record.md 1
 * counts them; misc_record is every F32 tensor, every hc_*_fn and one
 * embedding row (it includes the NextN block's router and norms), while
 * misc_trunk is strictly what a trunk token reads.  (lib/model/inspect.c) */
typedef struct x4_decode_bytes {
	uint64_t attn;        /* BF16 attention, all trunk blocks */
	uint64_t routed;      /* routed experts, k of E, MoE trunk blocks */
	uint64_t output;      /* output.weight */
	uint64_t shared;      /* shared experts, MoE trunk blocks */
	uint64_t dense;       /* dense FFN blocks */
	uint64_t misc_record; /* hc_*, routers, norms, one embedding row (docs/record.md 1) */
	uint64_t misc_trunk;  /* the same, trunk only */
	uint64_t total_record, total_trunk;
} x4_decode_bytes;
int x4_decode_bytes_count(const x4_config *c, const x4_tensor_spec *t, int n,
			  x4_decode_bytes *out, x4_err *e);
/* A file's tensor directory as specs (block parsed from "blk.N."), in file
 * order, so it compares with x4_layout's; *out is malloc'd.  (lib/model/inspect.c) */
int x4_tensor_specs_from_gguf(const x4_gguf *g, x4_tensor_spec **out, int *n,
			      x4_err *e);

/* Synthetic weights (lib/model/synth.c), drawn directly as codes and scales so
 * that activations behave like a trained model's (O(1) after every norm,
 * unsaturated hyper-connection gates, a router whose choice varies). */
typedef struct x4_synth_loud {
	int block, expert; /* an MoE block and one of its routed experts */
	float factor;      /* multiplies its gate/up/down IQ4_NL block scales */
} x4_synth_loud;
typedef struct x4_synth_opts {
	uint64_t seed;
	int threads;                /* 0 = all CPUs; the bytes do not depend on it */
	const x4_synth_loud *loud;  /* n_loud entries; each is also forced into the top-k */
	int n_loud;
	/* Called after each chunk (serialised, from worker threads) with the
	 * bytes written so far; may be NULL. */
	void (*progress)(void *arg, uint64_t done, uint64_t total);
	void *progress_arg;
} x4_synth_opts;
/* Draw and pwrite every tensor of t[0..n): tensor i must have been declared
 * on w as its tensor i, and begin_data called. */
int x4_synth_weights(x4_gguf_writer *w, const x4_config *c, const x4_tensor_spec *t,
		     int n, const x4_synth_opts *o, x4_err *e);

/* ===================== 5. tokenizer and chat ===================== */

/* GGUF token types (tokenizer.ggml.token_type), SentencePiece's numbering. */
enum x4_tok_type {
	X4_TOK_NORMAL = 1, X4_TOK_UNKNOWN = 2, X4_TOK_CONTROL = 3,
	X4_TOK_USER_DEFINED = 4, X4_TOK_UNUSED = 5, X4_TOK_BYTE = 6,
};

/* The vocabulary x4 ships: Mistral's v3 SentencePiece BPE (32768 pieces,
 * byte fallback; Apache-2.0, data/tokenizer/) with Xing4's special tokens
 * in the low ids (<_unk> 0, bos 1, <_end> 2, <_system>, <_user>, <_bot>,
 * <think>, </think>), padded with reserved pieces to n_vocab.  Gives both
 * the arrays for the GGUF header and the serialized tokenizer.model. */
typedef struct x4_vocab {
	int n;
	char **pieces;        /* n NUL-terminated UTF-8 pieces */
	float *scores;        /* n */
	int32_t *types;       /* n, enum x4_tok_type */
	unsigned char *model; /* tokenizer.model (SentencePiece protobuf) */
	size_t model_len;
	int bos_id, eos_id, unk_id;
	/* The normalizer of the .model, written to the GGUF as
	 * tokenizer.ggml.add_space_prefix (true: a "▁" before the text) and
	 * tokenizer.ggml.remove_extra_whitespaces (false: runs of spaces kept). */
	bool add_space_prefix, remove_extra_whitespaces;
} x4_vocab;
/* n_vocab >= 32768 (the base vocabulary); ids 32768.. are <_reserved_ID>,
 * type UNUSED, score 0.  The chat markers are CONTROL: plain text that spells
 * one is encoded as text, as sentencepiece does (see lib/tok/spm.c). */
int x4_vocab_xing4(int n_vocab, x4_vocab *v, x4_err *e);
void x4_vocab_free(x4_vocab *v);

typedef struct x4_tokenizer x4_tokenizer;
/* From a GGUF header's tokenizer.ggml.{tokens,scores,token_type} (required),
 * bos_token_id, eos_token_id, unknown_token_id (else the first piece of that
 * type), add_space_prefix (default true) and remove_extra_whitespaces
 * (default false); tokenizer.ggml.model, when present, must be "llama". */
int x4_tokenizer_from_gguf(x4_tokenizer **t, const x4_gguf *g, x4_err *e);
/* The same from a vocabulary in memory (x4_vocab_xing4's). */
int x4_tokenizer_from_vocab(x4_tokenizer **t, const x4_vocab *v, x4_err *e);
void x4_tokenizer_free(x4_tokenizer *t);
int x4_tokenizer_n_vocab(const x4_tokenizer *t);
int32_t x4_tokenizer_bos(const x4_tokenizer *t);
int32_t x4_tokenizer_eos(const x4_tokenizer *t);
/* enum x4_tok_type of an id, 0 when out of range. */
int x4_token_type(const x4_tokenizer *t, int32_t id);

enum {
	/* Control pieces spelled in the text match whole (longest first); the
	 * text between them is encoded on its own, and only a text that starts
	 * the input gets the dummy prefix (so the rendered chat prompt encodes
	 * as x4_chat_tokenize does).  Without it, the text is encoded exactly
	 * as the sentencepiece library does (user-defined pieces still match). */
	X4_TOKENIZE_SPECIAL = 1,
	X4_TOKENIZE_BOS = 2,     /* prepend bos */
};
/* Encode UTF-8 text (invalid bytes go through byte fallback).  *ids is
 * malloc'd, *n its length. */
int x4_tokenize(const x4_tokenizer *t, const char *text, size_t len,
		unsigned flags, int32_t **ids, size_t *n, x4_err *e);
/* The piece of one id (as stored), or NULL out of range. */
const char *x4_token_piece(const x4_tokenizer *t, int32_t id);
int32_t x4_token_find(const x4_tokenizer *t, const char *piece); /* -1 if none */

/* Streaming decode: feed ids one at a time; bytes of an incomplete UTF-8
 * sequence made of byte pieces are held back until complete. */
typedef struct x4_detok {
	unsigned char pend[8];
	int npend;
	bool started;
} x4_detok;
/* Appends at most cap bytes to out, returns the count (cap >= 64 suffices
 * for x4's vocabulary: a piece of up to 48 bytes after up to 4 held bytes).
 * Control pieces give nothing, <unk> gives " ⁇ " (U+2047) as sentencepiece does,
 * and a byte that cannot be part of a valid character gives U+FFFD. */
size_t x4_detok_step(const x4_tokenizer *t, x4_detok *st, int32_t id, char *out,
		     size_t cap);
size_t x4_detok_flush(const x4_tokenizer *t, x4_detok *st, char *out, size_t cap);
/* Whole-sequence decode into a malloc'd NUL-terminated string. */
int x4_detokenize(const x4_tokenizer *t, const int32_t *ids, size_t n, char **out,
		  x4_err *e);

/* Chat, rendered as the release's template does (docs/record.md 7). */
typedef struct x4_chat_msg {
	const char *role;    /* "system", "user" or "assistant" */
	const char *content;
} x4_chat_msg;
int x4_chat_render(const x4_chat_msg *msgs, int n, bool add_generation_prompt,
		   char **out, x4_err *e);
/* Render and tokenize in one step (special tokens as ids, never spelled). */
int x4_chat_tokenize(const x4_tokenizer *t, const x4_chat_msg *msgs, int n,
		     bool add_generation_prompt, int32_t **ids, size_t *n_ids,
		     x4_err *e);
/* The same format as a Jinja template (messages with role and content,
 * add_generation_prompt), for the release folder's chat_template.jinja. */
const char *x4_chat_template_jinja(void);

/* ===================== 6. model and trunk ===================== */

/* Where a model's parts are (docs/record.md 7): the weights are a .gguf;
 * the tokenizer folder (config.json with model_type xing4_0, or
 * tokenization_xing4_0.py) holds tokenizer.model, config.json, the chat
 * template.  `model` is a .gguf file or a folder holding exactly one;
 * `tokdir` may be NULL (then the .gguf's own folder is tried).  Ambiguity
 * (two .gguf files, a folder that is not a xing4_0 release) is refused
 * with the paths tried. */
typedef struct x4_paths {
	char gguf[4096];
	char tokdir[4096]; /* "" when none was found (the GGUF vocab is used) */
} x4_paths;
int x4_paths_resolve(const char *model, const char *tokdir, x4_paths *p, x4_err *e);

/* An opened checkpoint: the mapping, its config, every trunk tensor bound
 * by name and checked for type and shape against the config; blk.<n_block>
 * (NextN) recognised and not bound; the tokenizer from the GGUF header.
 * A missing, extra or mistyped tensor is reported with its name, expected
 * and found type and shape.  Of a tokenizer folder only config.json's clamp
 * keys are used (when the GGUF has none), but its config.json must be JSON
 * with model_type xing4_0 and its tokenizer.model, if any, hold the GGUF's
 * pieces: a damaged or foreign folder is refused (X4_EFORMAT). */
typedef struct x4_model x4_model;
int x4_model_open(x4_model **m, const x4_paths *p, x4_err *e);
void x4_model_close(x4_model *m);
const x4_config *x4_model_config(const x4_model *m);
const x4_gguf *x4_model_gguf(const x4_model *m);
const x4_tokenizer *x4_model_tokenizer(const x4_model *m);
const char *x4_model_fingerprint(const x4_model *m); /* fast fingerprint */

/* How wide the four residual streams are stored (docs/numerics.md 1.1
 * and 2).  F32 is right; F16 and BF16 are the failing configurations
 * x4-walk-residual compares against. */
enum x4_resid { X4_RESID_F32 = 0, X4_RESID_F16 = 1, X4_RESID_BF16 = 2 };
/* The precision the sublayers are handed their normed input x-hat in
 * (docs/numerics.md 1.3: it may be narrowed; the earlier runtime handed
 * fp16 on sm_75).  F32 is the default: the kernels read fp32 activations,
 * so narrowing buys no bandwidth yet and is a lever to price, not a given. */
enum x4_sub { X4_SUB_F32 = 0, X4_SUB_BF16 = 1, X4_SUB_F16 = 2 };
/* Arithmetic of the CPU trunk: F32 (what users run), F64 (the oracle). */
enum x4_prec { X4_PREC_F32 = 0, X4_PREC_F64 = 1 };
/* The latent KV cache (docs/forward.md 6.3, docs/numerics.md 1.7).  DEFAULT:
 * fp16 values in F32 (the earlier runtime's cache) and exact doubles in F64;
 * F16 rounds to fp16 in either (F64 + F16 is the model computed exactly, as
 * the numpy oracle's kv='f16'); EXACT keeps the arithmetic's width (F32 +
 * EXACT isolates the arithmetic from the cache's rounding in comparisons). */
enum x4_kv { X4_KV_DEFAULT = 0, X4_KV_F16 = 1, X4_KV_EXACT = 2 };
/* The GPU's attention, a decode step's and a prefill chunk's: FP32 the
 * fp32 kernels, MMA the tensor-core kernels (docs/numerics.md 1.7:
 * fp32-accurate products from split fp16 operands, not the fp32 kernels'
 * bits), AUTO (the default) MMA where the card and the checkpoint take it,
 * FP32 elsewhere.  MMA needs sm_80 or newer and the model's attention shape
 * (heads a multiple of 16, kv_lora 512, rope 64): asked for by name, a
 * trunk refuses it elsewhere (X4_EINVAL); AUTO falls back.  The CPU trunk
 * has one attention and ignores it, as it does hc_eager.
 * x4_trunk_stats.attn says which kernels run. */
enum x4_attn { X4_ATTN_FP32 = 0, X4_ATTN_MMA = 1, X4_ATTN_AUTO = 2 };
/* The GPU's products: MMA the tensor cores where the device (sm_80 and
 * later) and the shape take them, the CUDA-core kernels elsewhere (the
 * default): the prefill's x4k_gemm and the routed experts' tiles of 64
 * routes (docs/numerics.md 1.10), and the decode step's IQ4_NL
 * matrix-vector products, the routed and shared experts' and the dense
 * FFN's (1.9); fp32-accurate, not the CUDA-core kernels' bits.  FMA the
 * CUDA-core kernels everywhere, the arm MMA is priced against.  The BF16
 * and Q6_K matrix-vector products are the same either way; the CPU trunk
 * ignores it. */
enum x4_gemm { X4_GEMM_MMA = 0, X4_GEMM_FMA = 1 };

/* Every field but the progress callback is something a trunk is built for:
 * a new one also goes in the session's test for a rebuild (opts_differ,
 * lib/run/session.c), or a session serves it from a trunk built without it
 * (bench/RESULTS.md 32 priced one arm against itself that way). */
typedef struct x4_trunk_opts {
	int device;        /* -1 CPU, >= 0 the CUDA ordinal */
	int max_ctx;       /* positions the KV cache holds (0: min(ctx_train, 4096)) */
	int resid;         /* enum x4_resid */
	int prec;          /* enum x4_prec (CPU only) */
	int threads;       /* CPU threads, 0 = all */
	int prefill_chunk; /* tokens per prefill chunk, 0 = automatic */
	bool hc_eager;     /* GPU: the multi-kernel hyper-connection path */
	int kv;            /* enum x4_kv: the latent cache's values */
	uint64_t mem_limit; /* GPU: bytes of device memory x4 may hold (0 = what is free) */
	int sublayer;      /* enum x4_sub: the width x-hat is handed to attention and FFN in */
	bool no_graph;     /* GPU: run decode steps eagerly instead of replaying a captured graph */
	bool pdl;          /* GPU, sm_90 and later: programmatic dependent launch (each kernel
	                      issues its weight loads before it waits for its input);
	                      on by default */
	int attn;          /* GPU: enum x4_attn, the decode attention's kernel (auto by default) */
	int gemm;          /* GPU: enum x4_gemm, the prefill products' core (mma by default) */
	bool warp_copy;    /* GPU: the decode step's IQ4_NL tensor-core products copy their
	                      weights a warp's slice at a time (the arm the default, a block's
	                      rows as one contiguous span, is priced against; the same bits) */
	bool no_reserve;   /* GPU, a load option: plan to the last byte, keeping none of
	                      X4_MEM_RESERVE_BYTES free (x4-ceiling's hardware edge; never
	                      for serving: the context's own growth then lands in a request) */
	/* Called (if set) as the weights load onto the GPU, after each staged
	 * piece: bytes done of total.  The library never prints; a tool may. */
	void (*progress)(void *ctx, uint64_t done, uint64_t total);
	void *progress_ctx;
} x4_trunk_opts;
void x4_trunk_opts_default(x4_trunk_opts *o);

typedef struct x4_trunk x4_trunk;
int x4_trunk_create(x4_trunk **t, const x4_model *m, const x4_trunk_opts *o, x4_err *e);
void x4_trunk_free(x4_trunk *t);
/* Apply new request options (resid, prec, threads, prefill_chunk, hc_eager,
 * kv, sublayer, no_graph, pdl, attn, gemm, warp_copy, max_ctx) to a trunk without loading the weights
 * again: the cache and the workspaces are made anew for them and the
 * context is reset.  The load options (device, mem_limit, no_reserve) cannot change:
 * X4_EINVAL names the option and says that it needs the weights reloaded.
 * On failure the trunk is left as it was when that is possible, else
 * unusable until a configure succeeds (every call then fails, named). */
int x4_trunk_configure(x4_trunk *t, const x4_trunk_opts *o, x4_err *e);
/* The options the trunk runs with now (max_ctx and prefill_chunk as given,
 * 0 for automatic; x4_trunk_get_stats has what they resolved to). */
const x4_trunk_opts *x4_trunk_get_opts(const x4_trunk *t);
/* Forget the context (the cache's length drops to 0; the shared-cache bug
 * of docs/record.md 7): the next forward starts at position 0. */
void x4_trunk_reset(x4_trunk *t);
int x4_trunk_pos(const x4_trunk *t);
/* Run n tokens at positions pos..pos+n-1 and append them to the cache.
 * logits: [n][n_vocab] fp32 when all_logits, else [1][n_vocab] for the last
 * token; may be NULL.  A context overflow is X4_ERANGE before any work. */
int x4_trunk_forward(x4_trunk *t, const int32_t *ids, int n, float *logits,
		     bool all_logits, x4_err *e);

/* Observation of the residual for x4-walk-residual: called (if set) after
 * every sublayer of every block, for the LAST token of each forward. */
typedef struct x4_probe_row {
	int block;
	int sublayer;             /* 0 attention (A1-A4), 1 FFN (F1-F4) */
	const float *streams;     /* [n_hc][n_embd]: the state after the update */
	const float *sub_out;     /* [n_embd]: the sublayer output y */
	const float *sub_in;      /* [n_embd]: the normed input x-hat */
	const float *post;        /* [n_hc] */
	const float *comb;        /* [n_hc][n_hc], [dst][src] */
	const int *experts;       /* [n_expert_used] selected (MoE sublayer) or NULL */
	const float *expert_w;    /* [n_expert_used] their weights, or NULL */
} x4_probe_row;
typedef void (*x4_probe_fn)(void *ctx, const x4_probe_row *row);
void x4_trunk_set_probe(x4_trunk *t, x4_probe_fn fn, void *ctx);

/* What a trunk holds, so that a tool can print "loaded N GiB in S s (G GB/s)"
 * (the library itself never prints).  Filled by lib/cuda/trunk_cuda.c on a GPU and
 * by lib/run/trunk.c on the CPU: the CPU reads the mapping, so its load_s and
 * resident_bytes are 0. */
typedef struct x4_trunk_stats {
	double load_s;           /* seconds create spent uploading the weights */
	uint64_t resident_bytes; /* weight bytes held on the device */
	uint64_t cache_bytes;    /* the latent KV cache */
	uint64_t work_bytes;     /* workspaces (activations of one prefill chunk) */
	int max_ctx;             /* positions the cache holds */
	int prefill_chunk;       /* tokens per prefill chunk */
	int attn;                /* enum x4_attn: the decode attention's kernel, FP32 or MMA
	                            (AUTO resolved; FP32 on the CPU, which has one) */
	char device[128];        /* "cpu" or the GPU's name */
} x4_trunk_stats;
int x4_trunk_get_stats(const x4_trunk *t, x4_trunk_stats *s);

/* ===================== 6b. the memory plan (lib/cuda/mem_plan.c) ===================== */

/* What the CUDA trunk places on a card, computed from the model's shapes
 * and the options alone, with no device (docs/record.md 5): the weights as
 * the upload places them, the fp16 latent cache for max_ctx, the
 * workspaces of one prefill chunk, and a reserve kept free beyond them for
 * what the arithmetic does not know (the CUDA context's growth: kernel
 * images loaded at first launch, a captured graph, the allocator's
 * granularity).  The CUDA trunk sizes its allocations, picks its chunk and
 * makes its refusals with these functions; x4-ceiling predicts a card with
 * them.  "usable" is what x4 may hold: the card's free bytes, capped by
 * --gpu-memory (opts.mem_limit). */
#define X4_MEM_RESERVE_BYTES ((uint64_t)256 << 20)
#define X4_MEM_MAX_CHUNK 4096   /* the automatic chunk's ceiling (bench/RESULTS.md 28) */
#define X4_MEM_NARROW_CHUNK 128 /* the narrowest chunk a load promises to fit */

/* The trunk's tensors as the upload places them: every tensor the model
 * binds (the NextN block is not bound), each at a 256-byte boundary. */
uint64_t x4_mem_weight_bytes(const x4_model *m);
/* The same from a tensor list (a file's directory by
 * x4_tensor_specs_from_gguf, or x4_layout's for a preset): every global
 * tensor and every tensor of a block below n_block. */
uint64_t x4_mem_weight_bytes_specs(const x4_config *c, const x4_tensor_spec *t, int n);
/* The fp16 latent cache: n_block * max_ctx * (kv_lora + d_rope) * 2 bytes. */
uint64_t x4_mem_cache_bytes(const x4_config *c, int max_ctx);
/* The workspaces of chunks of up to `chunk` tokens beside a cache of max_ctx
 * positions (the activations, the gate's, the MoE's and the decode
 * attention's): the layout the CUDA trunk carves them by. */
uint64_t x4_mem_ws_bytes(const x4_config *c, int max_ctx, int chunk);
/* min(X4_MEM_NARROW_CHUNK, max_ctx). */
int x4_mem_narrow_chunk(int max_ctx);
/* Bytes a context needs beside the weights for a load to accept it: the
 * cache, the narrowest chunk's workspace and the reserve. */
uint64_t x4_mem_ctx_need(const x4_config *c, int max_ctx, uint64_t reserve);
/* The prefill chunk for `room` bytes free beside the weights and the cache:
 * prefill_chunk (capped at max_ctx) when its workspace fits in room less
 * the reserve, else 0; with prefill_chunk 0, the largest power of two up
 * to X4_MEM_MAX_CHUNK (capped at max_ctx) that fits, down to the narrowest
 * chunk, else 0. */
int x4_mem_chunk(const x4_config *c, int max_ctx, int prefill_chunk, uint64_t room,
		 uint64_t reserve);

enum x4_mem_verdict {
	X4_MEM_FITS = 0,       /* the load accepts it: a chunk was picked */
	X4_MEM_NO_WEIGHTS = 1, /* the weights alone do not fit */
	X4_MEM_NO_CONTEXT = 2, /* the cache and the narrowest chunk do not fit beside them */
	X4_MEM_NO_CHUNK = 3,   /* the chunk asked for does not fit */
};
/* "fits", "weights", "context", "chunk". */
const char *x4_mem_verdict_name(int verdict);

typedef struct x4_mem_plan {
	int max_ctx;              /* positions the cache holds */
	int narrow_chunk;         /* x4_mem_narrow_chunk(max_ctx) */
	int chunk;                /* the chunk picked, 0 when the verdict is not FITS */
	int verdict;              /* enum x4_mem_verdict */
	uint64_t usable, reserve; /* as given */
	uint64_t weight_bytes, cache_bytes;
	uint64_t narrow_ws_bytes; /* the narrowest chunk's workspace */
	uint64_t ws_bytes;        /* the picked chunk's (the asked chunk's for NO_CHUNK) */
	int64_t room;             /* usable - weights - cache (negative: they do not fit) */
	int64_t free_after;       /* room - ws_bytes of the picked (or narrowest) chunk:
				   * what is left when the chunk runs */
} x4_mem_plan;
/* The whole plan for a card of `usable` bytes, as a load decides it:
 * p->verdict says whether it is accepted and why not. */
void x4_mem_plan_solve(const x4_config *c, uint64_t weight_bytes, int max_ctx,
		       int prefill_chunk, uint64_t usable, uint64_t reserve, x4_mem_plan *p);
/* The longest context a card of `usable` bytes accepts: the largest
 * max_ctx in [1, n_ctx_train] with weights < usable and x4_mem_ctx_need <=
 * usable - weights; 0 when none.  With the reserve X4_MEM_RESERVE_BYTES it
 * is the runtime's promise; with 0, where the plan meets the card's edge. */
int x4_mem_max_ctx(const x4_config *c, uint64_t weight_bytes, uint64_t usable,
		   uint64_t reserve);

/* A CUDA device's free and total bytes as cudaMemGetInfo reports them
 * (this makes the device's context on a first call), and its name;
 * X4_ECUDA in a build without CUDA or without the device. */
int x4_device_mem(int device, uint64_t *free_bytes, uint64_t *total_bytes, char *name,
		  size_t name_cap, x4_err *e);

/* ===================== 7. sampling ===================== */
/* (x4_trunk_forward_next, which picks the next token where the logits are,
 * is declared after the sampler below.) */

typedef struct x4_sampler_opts {
	float temperature;  /* 0 = greedy */
	int top_k;          /* 0 = off */
	float top_p;        /* 1 = off */
	uint64_t seed;
} x4_sampler_opts;
/* A host sampler: the device sampler's rule (kernels/sample.cu) with its own
 * step counter, so that the same seed and logits pick the same ids on the
 * CPU and the GPU.  Greedy (temperature 0 or top-k 1) is the argmax: NaN
 * skipped, the lowest id on ties.  Otherwise keep the top-k by logit, then
 * the fewest of those, highest first, whose softmax(logit / temperature)
 * mass reaches top-p (ties with the last kept are kept), with weights in
 * 2^-40 fixed point so every sum is exact; draw in id order with u from a
 * counter-based hash of (seed, draws so far).  A near-tie between two
 * candidates' cumulative mass and u can differ between devices whose logits
 * differ in the last bits: the rule is the same, the input is not. */
typedef struct x4_sampler x4_sampler;
int x4_sampler_create(x4_sampler **s, const x4_sampler_opts *o, x4_err *e);
void x4_sampler_free(x4_sampler *s);
/* Pick a token from one row of logits [n_vocab]; a draw advances the step. */
int32_t x4_sample(x4_sampler *s, const float *logits, int n_vocab);

/* Run n tokens as x4_trunk_forward does and pick the next token from the
 * last position's logits where they are: on the GPU the pick runs on the
 * device (its step counter restarts at x4_trunk_reset) and one token id is
 * all that crosses back; on the CPU it is x4_sample with `smp` (create it
 * per request, as the device counter restarts).  logits: NULL, or
 * [n][n_vocab] that receives every position's logits as well (the pick is
 * the same either way).  Logits that are not finite at the pick are
 * X4_ENUMERIC. */
int x4_trunk_forward_next(x4_trunk *t, const int32_t *ids, int n, x4_sampler *smp,
			  const x4_sampler_opts *so, int32_t *next, float *logits, x4_err *e);
/* The message and code (X4_ENUMERIC) for logits that are not finite at a
 * position: the residual stream overflowed (docs/numerics.md 2) or a weight
 * is not finite; names x4-walk-residual as the way to find the block. */
int x4_err_nonfinite_logits(x4_err *e, int pos);

/* ===================== 7b. the generation session (lib/run/session.c) ===================== */

/* A model opened once on the CPU or a GPU, then any number of requests run
 * on it, one at a time.  Each request starts from a reset cache (two
 * requests never share context: the shared-cache bug of docs/serving.md;
 * a prefix store puts back only rows made for the request's own first ids),
 * may change the request options of x4_trunk_configure without the weights
 * being loaded again, streams its tokens through a callback that can stop
 * it at a token (or, in the prefill, a chunk) boundary, and returns its
 * statistics.  x4-run, x4-walk-residual and x4-bench-abab are thin tools
 * over it. */
typedef struct x4_session x4_session;
/* Open the checkpoint (mapped and bound; nothing is loaded on a device yet). */
int x4_session_open(x4_session **s, const x4_paths *p, x4_err *e);
/* Make the trunk: o holds the load options (device, mem_limit, progress)
 * and the first request options; NULL for the defaults (the CPU).  On a
 * GPU this uploads the weights.  A request on a session not loaded loads
 * it with the request's options. */
int x4_session_load(x4_session *s, const x4_trunk_opts *o, x4_err *e);
void x4_session_close(x4_session *s);
const x4_model *x4_session_model(const x4_session *s);
/* The trunk (NULL before the load), for what a request does not cover (a probe). */
x4_trunk *x4_session_trunk(x4_session *s);
/* The positions a cache made with o holds: o->max_ctx, or by default
 * min(the model's context, 4096). */
int x4_session_ctx(const x4_session *s, const x4_trunk_opts *o);
/* X4_ERANGE, with the numbers and the fix, when a prompt of n tokens does
 * not fit a cache made with o (NULL: the loaded trunk's options). */
int x4_session_check_prompt(const x4_session *s, size_t n, const x4_trunk_opts *o, x4_err *e);

enum x4_stop {
	X4_STOP_COUNT = 0,   /* the token budget was spent */
	X4_STOP_EOS = 1,     /* the model ended its turn (<_end>) */
	X4_STOP_CONTEXT = 2, /* the cache is full */
	X4_STOP_CANCEL = 3,  /* a callback asked to stop */
};
const char *x4_stop_name(int stop); /* "count", "eos", "context", "cancel" */

struct x4_gen_stats;
typedef struct x4_request {
	/* The prompt, one of: raw ids (n_ids > 0); chat turns (n_chat > 0),
	 * rendered with the generation prompt; else text (tokenize_flags:
	 * X4_TOKENIZE_*).  An empty prompt is X4_EINVAL. */
	const int32_t *ids;
	size_t n_ids;
	const x4_chat_msg *chat;
	int n_chat;
	const char *text;
	size_t text_len;
	unsigned tokenize_flags;
	long max_tokens;        /* tokens to generate (0: prefill only) */
	x4_sampler_opts sampler;
	bool ignore_eos;        /* do not stop at <_end> */
	/* Request options (NULL: as the session stands); see x4_trunk_configure. */
	const x4_trunk_opts *opts;
	/* Callbacks, each optional.  token: a generated id and its text piece
	 * (bytes of an unfinished UTF-8 character are held back to the next
	 * piece); nonzero stops the request after it (X4_STOP_CANCEL).
	 * prefill: after each prefill chunk, prompt positions done of total
	 * (total the whole prompt; restored positions count as done, so with
	 * a prefix the first call says n_reused + the first chunk); nonzero
	 * stops before the next chunk.  logits: every forwarded position's
	 * logits [n][n_vocab] as they are made, the prompt's rows and then one
	 * per generated token (the last generated token is fed too, so that it
	 * has its row, unless the cache is full or the request was stopped:
	 * then the last token has none); a nonzero return is an error that
	 * ends the request with the callback's message in e.  The prefill runs
	 * in the trunk's chunks either way, so the logits and the picks are the
	 * same with and without this callback.  Restored positions have no
	 * logits (they are not computed): with a prefix the first row is
	 * position n_reused, which the statistics hold before the first
	 * callback; a caller that needs every prompt position's row (a
	 * perplexity) passes no prefix store. */
	int (*on_token)(void *ctx, int32_t id, const char *piece, size_t len);
	int (*on_prefill)(void *ctx, size_t done, size_t total);
	int (*on_logits)(void *ctx, const float *rows, int n, x4_err *e);
	/* Called once when a request that succeeded has given its last token,
	 * with its statistics (offer_s not yet known), before the offer to the
	 * prefix store: a server ends its response here, so that a client does
	 * not wait for the copy of the cache rows.  Not called on failure. */
	void (*on_end)(void *ctx, const struct x4_gen_stats *st);
	void *ctx;
	/* A prefix store (section 7c) or NULL.  When set, the request restores
	 * the longest prefix of its prompt that the store holds for the
	 * trunk's options (always leaving at least the last prompt token to
	 * forward), forwards only the rest at its absolute positions, and
	 * afterwards offers its cache rows (the prompt and the generated tokens
	 * fed back) to the store.  The cache is reset before anything is
	 * restored.  A request that fails offers nothing; a cancelled one
	 * offers the positions it forwarded.  On the CPU the result is the
	 * same, bit for bit, as without the store (a token is computed the
	 * same in any chunk); on a GPU restored rows are those an earlier
	 * chunking made, as close as two chunkings are (docs/serving.md). */
	struct x4_prefix_store *prefix;
} x4_request;

/* A request's statistics.  Arrays belong to the session and hold until its
 * next request or its close. */
typedef struct x4_gen_stats {
	size_t n_prompt, n_gen;
	size_t n_prefilled;      /* prompt positions forwarded: n_prompt - n_reused, less when
	                            stopped */
	double prefill_s;        /* the prompt's forward, wall clock (not the restore) */
	double prefill_tok_s;    /* n_prefilled / prefill_s: the forwarded positions only;
	                            NAN when no time was spent */
	double first_step_s;     /* the first decode step after the prefill, NAN if none */
	double median_step_s;    /* the median step after the first (steady), NAN if none */
	size_t n_steady;         /* steps after the first */
	const double *step_s;    /* [n_steps] every decode step's seconds */
	size_t n_steps;
	const int32_t *tokens;   /* [n_gen] the generated ids */
	int stop;                /* enum x4_stop */
	size_t n_reused;         /* prompt positions restored from the prefix store (set
	                            before the first callback) */
	double restore_s;        /* the restore from the store, wall clock (0 without one) */
	double offer_s;          /* the offer of the rows to the store at the end */
} x4_gen_stats;
/* Tokenize the request's prompt as the session would (for --tokenize and
 * for a length check); *ids is malloc'd. */
int x4_session_tokenize(x4_session *s, const x4_request *r, int32_t **ids, size_t *n,
			x4_err *e);
/* Run one request.  The prompt is checked against the cache before any
 * work (X4_ERANGE with the numbers and the fix).  A non-finite pick is
 * X4_ENUMERIC; what was generated before it is in st. */
int x4_session_generate(x4_session *s, const x4_request *r, x4_gen_stats *st, x4_err *e);

/* ===================== 7c. the prefix store (lib/run/prefix.c) ===================== */

/* Cache rows of requests already served, kept under an LRU byte budget so
 * that a request sharing a prefix with one of them forwards only the rest
 * (docs/serving.md, "The prefix store").  An entry is keyed by its token
 * ids and by the trunk options that change the rows' values or layout (the
 * checkpoint, the device, resid, sublayer, prec, the cache's rounding, the
 * GPU's hc_eager and attn; not max_ctx, threads, the chunk, the graph or pdl: see
 * lib/run/trunk.c); rows are held in host memory.  An entry costs n positions
 * * (x4_trunk_cache_row_bytes + 4) bytes; one larger than the budget is not
 * kept; an entry whose ids begin another's replaces it.  Not thread-safe:
 * one session uses it at a time. */
typedef struct x4_prefix_store x4_prefix_store;
/* budget: bytes of rows it may hold (0: a store that holds nothing). */
int x4_prefix_store_create(x4_prefix_store **ps, uint64_t budget, x4_err *e);
void x4_prefix_store_free(x4_prefix_store *ps);
/* Forget every entry (the counters stay). */
void x4_prefix_store_clear(x4_prefix_store *ps);
typedef struct x4_prefix_stats {
	uint64_t hits;          /* requests that restored at least one position */
	uint64_t misses;        /* requests that restored none */
	uint64_t reused_tokens; /* positions restored, over all requests */
	uint64_t entries;       /* entries held now */
	uint64_t bytes;         /* bytes held now */
	uint64_t budget;        /* the byte budget */
	uint64_t evictions;     /* entries dropped to stay in the budget */
} x4_prefix_stats;
void x4_prefix_store_stats(const x4_prefix_store *ps, x4_prefix_stats *st);

/* The trunk's cache as rows, for the prefix store: bytes of one position's
 * rows over every layer; copy positions [0, n) out to host memory
 * ([n][n_block][kv_lora + d_rope] in the cache's values: fp32, or fp64 with
 * prec F64, on the CPU, fp16 bits on a GPU), n at most x4_trunk_pos
 * (X4_ERANGE beyond, X4_EINVAL below 0); reset the trunk (the device
 * sampler's counter restarts), then write n positions back and set the
 * length to n (at most the cache's positions: X4_ERANGE).  The cache and
 * its length are all the state a position leaves in a trunk, so a restore
 * continues exactly where the saved trunk stood.  A restore that fails
 * leaves the length 0. */
uint64_t x4_trunk_cache_row_bytes(const x4_trunk *t);
int x4_trunk_cache_read(x4_trunk *t, int n, void *rows, x4_err *e);
int x4_trunk_cache_restore(x4_trunk *t, int n, const void *rows, x4_err *e);

/* ===================== 8. utilities ===================== */

/* Monotonic seconds. */
double x4_now(void);
/* Number of online CPUs (at least 1). */
int x4_ncpu(void);
/* Run fn(arg, i) for i in [0, n) on up to nthreads threads (0 = all CPUs). */
void x4_parallel_for(int64_t n, int nthreads, void (*fn)(void *arg, int64_t i),
		     void *arg);

/* The name of a residual width ("f32", "f16", "bf16"). */
const char *x4_resid_name(int resid);

/* File fingerprint: "fast" hashes the size, the header and directory, and
 * 64 KiB samples spread over the data; "full" hashes every byte.  16 hex
 * digits, NUL-terminated, into out[17]. */
int x4_fingerprint(const char *path, bool full, char out[17], x4_err *e);

/* ===================== 9. npy writer and MoE replay ===================== */
/* (lib/util/npy.c, lib/model/replay.c: for x4-run --dump-logits and x4-walk-residual) */

/* A float32 2-D NumPy array [rows][cols] written a row batch at a time to
 * a temporary file beside path; close() writes the final row count into the
 * header, fsyncs and renames onto path; abort() (or a failed close) removes
 * the temporary file.  Any reader of the .npy format reads the result. */
typedef struct x4_npy x4_npy;
/* Whether path can take the array, checked before any work: a new name
 * in a writable folder, or an existing regular file (a symbolic link is
 * followed: resolved receives the file that is replaced).  A folder, a
 * device, a FIFO or a socket is refused (X4_EINVAL), as is a dangling
 * link.  x4_npy_open applies the same check. */
int x4_npy_check_path(const char *path, char *resolved, size_t cap, x4_err *e);
int x4_npy_open(x4_npy **out, const char *path, int cols, x4_err *e);
/* Append n rows of cols floats each. */
int x4_npy_append(x4_npy *w, const float *rows, int n, x4_err *e);
int x4_npy_close(x4_npy *w, x4_err *e); /* frees w */
void x4_npy_abort(x4_npy *w);           /* frees w */

/* One MoE block recomputed in float64 from the dequantized weights of the
 * file (docs/numerics.md 2: the magnitude is in the weights): the router, every
 * selected expert and the shared expert, on a captured normed input x-hat. */
#define X4_REPLAY_MAX_USED 16
typedef struct x4_moe_replay {
	int n_used;
	int experts[X4_REPLAY_MAX_USED];  /* in ascending id */
	double weight[X4_REPLAY_MAX_USED];/* w_e, from the float64 router */
	double out_max[X4_REPLAY_MAX_USED];/* max |Expert_e(x)|, before w_e */
	double out_rms[X4_REPLAY_MAX_USED];
	double shared_max, shared_rms;    /* Shared(x) */
	double y_max, y_rms;              /* y = sum w_e Expert_e(x) + Shared(x) */
	bool routed_here;                 /* experts chosen by the float64 router */
} x4_moe_replay;
/* x_hat: [n_embd].  force: NULL to route in float64, else n_expert_used
 * expert ids to evaluate instead (e.g. the trunk's own choice; weights are
 * still the float64 router's for those ids).  y: [n_embd] out, may be NULL.
 * A block that is not an MoE block is X4_EINVAL. */
int x4_moe_replay_block(const x4_model *m, int block, const float *x_hat,
			const int *force, x4_moe_replay *r, double *y, x4_err *e);

/* ===================== 10. profiling ===================== */
/* (lib/prof/prof.c, lib/prof/prof_hook.c, lib/prof/prof_cupti.c, lib/prof/prof_ceiling.c,
 * lib/prof/trace.c: for x4-profile)
 *
 * Where a step's time goes, kernel by kernel.  On the GPU every kernel's
 * device start and end comes from CUPTI's activity records, which work
 * under graph replay and add no synchronisation; the trunk names each
 * operation as it enqueues it (its class and the bytes it must read), and
 * CUPTI's launch callbacks tie every kernel to the operation that launched
 * it.  On the CPU the trunk's operations are timed with the wall clock.  A
 * profiled run is never a speed: the profiler's own work is in every step
 * it times, and the unprofiled step is measured apart to say by how much. */

/* The sublayer classes a step's time is attributed to. */
enum x4_prof_class {
	X4_PC_HC = 0,      /* hyper-connection gate and stream update (docs/forward.md 5) */
	X4_PC_NORM,        /* the sublayer input x-hat: its RMSNorm and narrowing */
	X4_PC_ATTN,        /* attention: projections, norms, rope, cache, MLA (docs/forward.md 6) */
	X4_PC_ROUTER,      /* MoE router and route table (6.7) */
	X4_PC_EXPERTS,     /* routed experts and their weighted sum */
	X4_PC_SHARED,      /* the shared expert */
	X4_PC_DENSE,       /* dense FFN blocks (6.6) */
	X4_PC_HEAD,        /* head norm, logits, the pick (6.8) */
	X4_PC_EMBED,       /* the embedding (6.2) */
	X4_PC_OTHER,       /* what no operation claimed */
	X4_PC_COUNT
};
/* "hc_gate", "sublayer_norm", "attention", "moe_router", "routed_experts",
 * "shared_expert", "dense_ffn", "head_pick", "embed", "other". */
const char *x4_prof_class_name(int cls);

/* True when this build can profile a GPU trunk (CUDA and CUPTI were found
 * at build time), and when it can write a gzip trace (zlib was). */
bool x4_prof_have_cupti(void);
bool x4_prof_have_zlib(void);

/* The machine's streaming-read ceiling in GB/s (1e9 bytes a second): on a
 * GPU (device >= 0) a kernel of 16-byte streaming loads over a buffer far
 * larger than L2, on the CPU (device -1) a read of 256 MiB on `threads`
 * threads (0 = all); the median of several repetitions after a warm-up.
 * desc (may be NULL) receives what was read, to report beside the figure. */
int x4_prof_ceiling(int device, int threads, double *gbps, char *desc, size_t desc_cap,
		    x4_err *e);

typedef struct x4_prof x4_prof;
/* Attach a profiler to a trunk.  GPU: CUPTI's activity records and launch
 * callbacks start here (one profiler a process: CUPTI is process-wide), and
 * the next graphed decode step is captured again, so that the trunk names
 * its operations as they are captured; X4_ECUDA in a build without CUPTI.
 * CPU: the trunk's operations are timed from here.  The trunk must outlive
 * the profiler. */
int x4_prof_attach(x4_prof **p, x4_trunk *t, x4_err *e);
/* Bracket one step (a decode step, or a whole prefill).  Only counted steps
 * are tabulated; an uncounted one (a warm-up, the graph's capture) is still
 * bracketed so that the operations it marks know their position. */
void x4_prof_step_begin(x4_prof *p, bool counted);
void x4_prof_step_end(x4_prof *p);

/* A row of the tables: one kernel (GPU: CUPTI's name without its return
 * type and parameters; CPU: the trunk's operation) in one class, or one
 * class.  Figures are a step's: totals over the counted steps / steps. */
typedef struct x4_prof_row {
	const char *name;
	int cls;               /* enum x4_prof_class */
	double launches;       /* a step */
	double us;             /* device time a step (CPU: wall time) */
	double exposed_us;     /* of us, what runs past every earlier-started kernel's end */
	double share;          /* of all kernel time, 0..1 */
	double min_us, max_us; /* one launch */
	double bytes;          /* read a step: the weights and latent cache the
				* library knows each operation must read at least
				* once; -1 where some are not known on the host
				* (the routed experts of a prefill chunk) */
} x4_prof_row;

/* The step as a whole: means over the counted steps (so that the parts add
 * up to the wall time), with the extremes and the wall time's median. */
typedef struct x4_prof_summary {
	int steps;               /* counted */
	int tokens;              /* a step: 1 for decode, the prompt for prefill */
	int pos;                 /* the first counted step's starting position */
	double kernels;          /* kernels a step (GPU: CUPTI's records) */
	int64_t kernels_total;   /* over the counted steps */
	int64_t enqueued_total;  /* what the trunk enqueued in them: the graph's
				  * kernel nodes a replay, else the launches */
	int mismatched_steps;    /* steps whose two counts differ */
	int graphed_steps;       /* of them, replays of a captured graph, whose
				  * dependencies between kernel nodes are counted: */
	int64_t pdl_edges_total; /* programmatic ones (a kernel may start before
				  * the one it depends on ends: pdl.cuh) */
	int64_t full_edges_total; /* full ones (it starts once that one has ended) */
	int64_t unattributed;    /* kernels no marked operation launched */
	int64_t outside;         /* kernels starting before or ending after their
				  * step on the host's clock */
	double kernel_us;        /* sum of kernel times a step */
	double busy_us;          /* time some kernel ran a step (union: the sum of exposed_us) */
	double gaps;             /* gaps between consecutive kernels a step */
	double gap_us;           /* their total a step */
	double gap_max_us;       /* the largest in any step */
	double wall_us, wall_median_us, wall_min_us, wall_max_us; /* host, bracket to bracket */
	double submit_us, submit_min_us, submit_max_us; /* host, the bracket's start
				  * to the end of its last submission; -1 on the CPU */
	double bytes;            /* known bytes a step; -1 when some are not known */
	uint64_t dropped;        /* activity records CUPTI dropped */
	int64_t graph_kernels;   /* replayed graphs' kernels (every step, counted or not) */
	int64_t by_node;         /* of them, matched to their capture by graph node (the
				  * rest by start order) */
	bool gpu;
} x4_prof_summary;

typedef struct x4_prof_result {
	const x4_prof_row *kernels; /* by time, longest first */
	int n_kernels;
	const x4_prof_row *classes; /* the classes that ran, by time */
	int n_classes;
	x4_prof_summary s;
} x4_prof_result;
/* Stop collecting, detach from the trunk, and tabulate.  r points into p. */
int x4_prof_finish(x4_prof *p, x4_prof_result *r, x4_err *e);
void x4_prof_free(x4_prof *p); /* detaches first if finish was not called */

/* The counted steps as Chrome trace-event JSON (ui.perfetto.dev,
 * chrome://tracing): the host's step ranges, submissions and
 * synchronisations on a CPU track, kernels and copies on a GPU track (the
 * CPU trunk's operations on a track of their own), a track of each step's
 * first kernel start to last kernel end, every event's class, operation,
 * step and bytes in its args, and otherData {"profiled": true, "note":
 * "profiled run: not a speed", "run": run_json} (run_json: a JSON object,
 * the caller's record of the run, or NULL).  gzip when path ends in ".gz"
 * (X4_EINVAL in a build without zlib).  Written to <path>.tmp.<pid> and
 * renamed; stop (may be NULL) is polled as it writes, and a true answer
 * removes the temporary file and returns X4_EINTR.  After x4_prof_finish. */
int x4_prof_write_trace(const x4_prof *p, const char *path, const char *run_json,
			bool (*stop)(void *ctx), void *ctx, x4_err *e);

#ifdef __cplusplus
}
#endif
#endif /* X4_H */
