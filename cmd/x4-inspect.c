/*
 * x4-inspect - what a GGUF file holds: header, metadata, tensor table, type
 * census, fingerprint and, for a xing4_0 file, the architecture and what
 * one decode token reads.  --check validates the tensor set against the
 * layout the file's own keys imply.  See man/x4-inspect.1.
 */
#include "tool.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PROG "x4-inspect"
#define TSV_STR_MAX 120 /* long strings (a chat template) are cut in TSV */
#define ARR_HEAD 8      /* array elements shown */
#define GIB (1024.0 * 1024.0 * 1024.0)

/* The earlier runtime's card (616 GB/s) and the H200's measured read ceiling
 * (docs/record.md 1 and 9). */
static const double bandwidths_gbps[] = { 616.0, 4490.0 };

static bool json;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [--check] [--json] [--full-fingerprint] FILE.gguf\n"
		"       " PROG " [--json] --layout tiny|small|full\n"
		"Print a GGUF file's header, metadata, tensors, type census, fingerprint and,\n"
		"for a xing4_0 file, its architecture and one decode token's bytes.\n"
		"  -c, --check             validate the tensors against the xing4_0 layout\n"
		"                          derived from the file's keys; exit 1 on any problem\n"
		"  -j, --json              one JSON object instead of TSV sections\n"
		"  -f, --full-fingerprint  hash every byte (default: header and 64 samples)\n"
		"      --layout PRESET     no file: the census, architecture and decode bytes\n"
		"                          of an x4-synth preset, from its layout alone\n"
		"  -h, --help              this text\n"
		"      --version           version, commit and CUDA runtime\n");
}

/* ---- text escaping ---- */

static void tsv_str(const char *s, uint64_t len, uint64_t max)
{
	for (uint64_t i = 0; i < len && i < max; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\t')
			fputs("\\t", stdout);
		else if (c == '\n')
			fputs("\\n", stdout);
		else if (c == '\r')
			fputs("\\r", stdout);
		else if (c == '\\')
			fputs("\\\\", stdout);
		else if (c < 0x20 || c == 0x7f)
			printf("\\x%02x", c);
		else
			putchar(c);
	}
	if (len > max)
		fputs("...", stdout);
}

/* A JSON string on stdout; bytes that are not UTF-8 become U+FFFD. */
static void json_str(const char *s, uint64_t len)
{
	x4t_json_str(stdout, s, (size_t)len);
}

static void json_cstr(const char *s)
{
	json_str(s, strlen(s));
}

static void print_double(double v)
{
	if (isfinite(v))
		printf("%.17g", v);
	else
		fputs(json ? "null" : (isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"), stdout);
}

/* The shortest decimal that reads back as the same f32 (1e-06, not
 * 9.99999997e-07). */
static void print_f32(float v)
{
	if (!isfinite(v)) {
		print_double(v);
		return;
	}
	char b[32];
	for (int prec = 6; prec <= 9; prec++) {
		snprintf(b, sizeof b, "%.*g", prec, (double)v);
		if (strtof(b, NULL) == v)
			break;
	}
	fputs(b, stdout);
}

/* ---- metadata ---- */

static void print_scalar(const x4_gguf *g, int64_t i, int type)
{
	uint64_t u;
	int64_t s;
	double d;
	const char *str;
	uint64_t len;
	bool b;
	switch (type) {
	case X4_GV_U8: case X4_GV_U16: case X4_GV_U32: case X4_GV_U64:
		if (x4_gguf_kv_u64(g, i, &u) == 0)
			printf("%llu", (unsigned long long)u);
		break;
	case X4_GV_I8: case X4_GV_I16: case X4_GV_I32: case X4_GV_I64:
		if (x4_gguf_kv_i64(g, i, &s) == 0)
			printf("%lld", (long long)s);
		break;
	case X4_GV_F32:
		if (x4_gguf_kv_f64(g, i, &d) == 0)
			print_f32((float)d);
		break;
	case X4_GV_F64:
		if (x4_gguf_kv_f64(g, i, &d) == 0)
			print_double(d);
		break;
	case X4_GV_BOOL:
		if (x4_gguf_get_bool(g, x4_gguf_kv_key(g, i), &b, NULL) == 0)
			fputs(b ? "true" : "false", stdout);
		break;
	case X4_GV_STR:
		if (x4_gguf_kv_str(g, i, &str, &len) == 0) {
			if (json)
				json_str(str, len);
			else
				tsv_str(str, len, TSV_STR_MAX);
		}
		break;
	}
}

/* One packed numeric element of an array. */
static void print_elem(int et, const unsigned char *p)
{
	union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
		float f32; uint64_t u64; int64_t i64; double f64; } v;
	static const int width[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
	memcpy(&v, p, (size_t)width[et]);
	switch (et) {
	case X4_GV_U8: printf("%u", v.u8); break;
	case X4_GV_I8: printf("%d", v.i8); break;
	case X4_GV_U16: printf("%u", v.u16); break;
	case X4_GV_I16: printf("%d", v.i16); break;
	case X4_GV_U32: printf("%u", v.u32); break;
	case X4_GV_I32: printf("%d", v.i32); break;
	case X4_GV_F32: print_f32(v.f32); break;
	case X4_GV_BOOL: fputs(v.u8 ? "true" : "false", stdout); break;
	case X4_GV_U64: printf("%llu", (unsigned long long)v.u64); break;
	case X4_GV_I64: printf("%lld", (long long)v.i64); break;
	case X4_GV_F64: print_double(v.f64); break;
	}
}

static void print_array_head(const x4_gguf *g, int64_t i, int et, uint64_t n, const void *data)
{
	static const int width[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
	putchar('[');
	for (uint64_t j = 0; j < n && j < ARR_HEAD; j++) {
		if (j)
			fputs(", ", stdout);
		if (et == X4_GV_STR) {
			const char *s;
			uint64_t len;
			if (x4_gguf_kv_arr_str(g, i, j, &s, &len) == 0) {
				if (json) {
					json_str(s, len);
				} else {
					putchar('"');
					tsv_str(s, len, 40);
					putchar('"');
				}
			}
		} else if (et >= 0 && et <= X4_GV_F64 && width[et] && data) {
			print_elem(et, (const unsigned char *)data + j * (uint64_t)width[et]);
		}
	}
	if (!json && n > ARR_HEAD)
		fputs(", ...", stdout);
	putchar(']');
}

static void print_metadata(const x4_gguf *g)
{
	int64_t n = x4_gguf_kv_count(g);
	if (json)
		fputs(",\n\"metadata\": [", stdout);
	else
		puts("# metadata\nkey\ttype\tcount\tvalue");
	for (int64_t i = 0; i < n; i++) {
		int type = x4_gguf_kv_type(g, i);
		const char *key = x4_gguf_kv_key(g, i);
		int et = -1;
		uint64_t cnt = 1;
		const void *data = NULL;
		if (type == X4_GV_ARR && x4_gguf_kv_arr(g, i, &et, &cnt, &data) != 0)
			continue;
		if (json) {
			fputs(i ? ",\n {\"key\": " : "\n {\"key\": ", stdout);
			json_cstr(key);
			printf(", \"type\": \"%s\"", x4_gguf_vtype_name(type));
			if (type == X4_GV_ARR) {
				printf(", \"elem_type\": \"%s\", \"count\": %llu, \"head\": ",
				       x4_gguf_vtype_name(et), (unsigned long long)cnt);
				print_array_head(g, i, et, cnt, data);
			} else {
				fputs(", \"value\": ", stdout);
				print_scalar(g, i, type);
			}
			putchar('}');
		} else {
			tsv_str(key, strlen(key), 256);
			if (type == X4_GV_ARR) {
				printf("\tarray[%s]\t%llu\t", x4_gguf_vtype_name(et),
				       (unsigned long long)cnt);
				print_array_head(g, i, et, cnt, data);
			} else {
				printf("\t%s\t1\t", x4_gguf_vtype_name(type));
				print_scalar(g, i, type);
			}
			putchar('\n');
		}
	}
	fputs(json ? "]" : "\n", stdout);
}

/* ---- tensors and census ---- */

static void print_shape(const x4_gguf_tensor *t)
{
	for (int d = 0; d < t->n_dims; d++)
		printf(json ? "%s%llu" : "%s%llu", d ? (json ? ", " : "x") : "",
		       (unsigned long long)t->ne[d]);
}

static void print_tensors(const x4_gguf *g)
{
	int64_t n = x4_gguf_tensor_count(g);
	if (json)
		fputs(",\n\"tensors\": [", stdout);
	else
		puts("# tensors\nindex\tname\ttype\tshape\tbytes\toffset_bytes");
	for (int64_t i = 0; i < n; i++) {
		const x4_gguf_tensor *t = x4_gguf_tensor_at(g, i);
		if (json) {
			fputs(i ? ",\n {\"name\": " : "\n {\"name\": ", stdout);
			json_cstr(t->name);
			printf(", \"type\": \"%s\", \"shape\": [", x4_type_name(t->type));
			print_shape(t);
			printf("], \"bytes\": %llu, \"offset\": %llu}", (unsigned long long)t->nbytes,
			       (unsigned long long)t->offset);
		} else {
			printf("%lld\t", (long long)i);
			tsv_str(t->name, strlen(t->name), 256);
			printf("\t%s\t", x4_type_name(t->type));
			print_shape(t);
			printf("\t%llu\t%llu\n", (unsigned long long)t->nbytes,
			       (unsigned long long)t->offset);
		}
	}
	fputs(json ? "]" : "\n", stdout);
}

static uint64_t spec_bytes(const x4_tensor_spec *t)
{
	return x4_type_bytes(t->type, t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
}

static void print_census(const x4_tensor_spec *t, int n)
{
	enum { NT = 64 };
	int64_t count[NT] = { 0 };
	uint64_t bytes[NT] = { 0 }, total = 0;
	for (int i = 0; i < n; i++) {
		int ty = t[i].type >= 0 && t[i].type < NT ? t[i].type : NT - 1;
		count[ty]++;
		bytes[ty] += spec_bytes(&t[i]);
		total += spec_bytes(&t[i]);
	}
	if (json)
		fputs(",\n\"census\": [", stdout);
	else
		puts("# census\ntype\tcount\tbytes\tgib\tshare_pct");
	const char *sep = "\n";
	for (int ty = 0; ty < NT; ty++) {
		if (!count[ty])
			continue;
		double share = total ? 100.0 * (double)bytes[ty] / (double)total : 0.0;
		if (json)
			printf("%s {\"type\": \"%s\", \"count\": %lld, \"bytes\": %llu, \"gib\": %.4f, "
			       "\"share_pct\": %.2f}", sep, x4_type_name(ty), (long long)count[ty],
			       (unsigned long long)bytes[ty], (double)bytes[ty] / GIB, share);
		else
			printf("%s\t%lld\t%llu\t%.4f\t%.2f\n", x4_type_name(ty), (long long)count[ty],
			       (unsigned long long)bytes[ty], (double)bytes[ty] / GIB, share);
		sep = ",\n";
	}
	if (json)
		printf("%s {\"type\": \"total\", \"count\": %d, \"bytes\": %llu, \"gib\": %.4f, "
		       "\"share_pct\": 100.00}]", sep, n, (unsigned long long)total,
		       (double)total / GIB);
	else
		printf("total\t%d\t%llu\t%.4f\t100.00\n\n", n, (unsigned long long)total,
		       (double)total / GIB);
}

/* ---- xing4_0: architecture and one decode token's bytes ---- */

static void print_arch(const x4_config *c)
{
	struct { const char *k; double v; bool is_int; } f[] = {
		{ "n_embd", c->n_embd, 1 }, { "n_hc", c->n_hc, 1 },
		{ "n_block", c->n_block, 1 }, { "n_block_file", c->n_block_file, 1 },
		{ "n_nextn", c->n_nextn, 1 }, { "n_dense", c->n_dense, 1 },
		{ "n_head", c->n_head, 1 }, { "q_lora", c->q_lora, 1 },
		{ "kv_lora", c->kv_lora, 1 }, { "d_qk", c->d_qk, 1 }, { "d_v", c->d_v, 1 },
		{ "d_rope", c->d_rope, 1 }, { "d_nope", c->d_nope, 1 },
		{ "n_vocab", c->n_vocab, 1 }, { "n_ff", c->n_ff, 1 },
		{ "n_expert", c->n_expert, 1 }, { "n_expert_used", c->n_expert_used, 1 },
		{ "n_expert_shared", c->n_expert_shared, 1 }, { "n_ff_exp", c->n_ff_exp, 1 },
		{ "n_ctx_train", c->n_ctx_train, 1 }, { "sinkhorn_iters", c->sinkhorn_iters, 1 },
		{ "hc_eps", c->hc_eps, 0 }, { "clamp_min", c->clamp_min, 0 },
		{ "clamp_max", c->clamp_max, 0 }, { "rms_eps", c->rms_eps, 0 },
		{ "rope_base", c->rope_base, 0 }, { "yarn_factor", c->yarn_factor, 0 },
		{ "yarn_orig_ctx", c->yarn_orig_ctx, 1 },
		{ "yarn_beta_fast", c->yarn_beta_fast, 0 },
		{ "yarn_beta_slow", c->yarn_beta_slow, 0 },
		{ "yarn_log_mult", c->yarn_log_mult, 0 },
		{ "expert_scale", c->expert_scale, 0 }, { "expert_norm", c->expert_norm, 1 },
		{ "gating_func", c->gating_func, 1 }, { "bos_id", c->bos_id, 1 },
		{ "eos_id", c->eos_id, 1 }, { "unk_id", c->unk_id, 1 },
		{ "kq_scale", c->kq_scale, 0 },
	};
	if (json)
		fputs(",\n\"architecture\": {", stdout);
	else
		puts("# architecture\nfield\tvalue");
	for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
		if (json)
			printf("%s\"%s\": ", i ? ", " : "", f[i].k);
		else
			printf("%s\t", f[i].k);
		if (f[i].is_int)
			printf("%lld", (long long)f[i].v);
		else
			print_f32((float)f[i].v);
		if (!json)
			putchar('\n');
	}
	fputs(json ? "}" : "\n", stdout);
}

static void print_decode(const x4_config *c, const x4_decode_bytes *d)
{
	char what[9][96];
	snprintf(what[0], 96, "BF16 attention, all %d trunk blocks", c->n_block);
	snprintf(what[1], 96, "routed experts, %d of %d, %d MoE blocks", c->n_expert_used,
		 c->n_expert, c->n_block - c->n_dense);
	snprintf(what[2], 96, "output head (output.weight)");
	snprintf(what[3], 96, "shared expert, %d MoE blocks", c->n_block - c->n_dense);
	snprintf(what[4], 96, "dense FFN, %d blocks", c->n_dense);
	snprintf(what[5], 96, "hc_*, router, norms, embedding row (as the record counts it)");
	snprintf(what[6], 96, "total (as the record counts it)");
	snprintf(what[7], 96, "hc_*, router, norms, embedding row (trunk only)");
	snprintf(what[8], 96, "total (trunk only)");
	struct { const char *row; uint64_t bytes, of; } r[] = {
		{ "attn_bf16", d->attn, d->total_record },
		{ "routed_experts", d->routed, d->total_record },
		{ "output_head", d->output, d->total_record },
		{ "shared_expert", d->shared, d->total_record },
		{ "dense_ffn", d->dense, d->total_record },
		{ "misc_record", d->misc_record, d->total_record },
		{ "total_record", d->total_record, d->total_record },
		{ "misc_trunk", d->misc_trunk, d->total_trunk },
		{ "total_trunk", d->total_trunk, d->total_trunk },
	};
	if (json)
		fputs(",\n\"decode_bytes\": [", stdout);
	else
		puts("# decode_bytes\nrow\twhat\tbytes\tgib\tshare_pct");
	for (int i = 0; i < 9; i++) {
		double share = r[i].of ? 100.0 * (double)r[i].bytes / (double)r[i].of : 0.0;
		if (json) {
			printf("%s\n {\"row\": \"%s\", \"what\": ", i ? "," : "", r[i].row);
			json_cstr(what[i]);
			printf(", \"bytes\": %llu, \"gib\": %.4f, \"share_pct\": %.2f}",
			       (unsigned long long)r[i].bytes, (double)r[i].bytes / GIB, share);
		} else {
			printf("%s\t%s\t%llu\t%.4f\t%.2f\n", r[i].row, what[i],
			       (unsigned long long)r[i].bytes, (double)r[i].bytes / GIB, share);
		}
	}
	if (json)
		fputs("],\n\"decode_time\": [", stdout);
	else
		puts("\n# decode_time\ntotal\tbandwidth_gbps\tms\ttok_s");
	const char *sep = "\n";
	for (int k = 0; k < 2; k++) {
		uint64_t bytes = k ? d->total_trunk : d->total_record;
		for (size_t b = 0; b < sizeof bandwidths_gbps / sizeof *bandwidths_gbps; b++) {
			double ms = (double)bytes / (bandwidths_gbps[b] * 1e9) * 1e3;
			if (json)
				printf("%s {\"total\": \"%s\", \"bandwidth_gbps\": %.0f, \"ms\": %.4f, "
				       "\"tok_s\": %.2f}", sep, k ? "total_trunk" : "total_record",
				       bandwidths_gbps[b], ms, 1e3 / ms);
			else
				printf("%s\t%.0f\t%.4f\t%.2f\n", k ? "total_trunk" : "total_record",
				       bandwidths_gbps[b], ms, 1e3 / ms);
			sep = ",\n";
		}
	}
	fputs(json ? "]" : "\n", stdout);
}

/* ---- --check ---- */

static void shape_str(char *b, size_t cap, int n_dims, const uint64_t *ne)
{
	size_t k = 0;
	b[0] = '\0';
	for (int d = 0; d < n_dims && k < cap; d++)
		k += (size_t)snprintf(b + k, cap - k, "%s%llu", d ? "x" : "", (unsigned long long)ne[d]);
}

static int n_problems;

static void problem(const char *what, const char *name, const x4_tensor_spec *want,
		    const x4_gguf_tensor *got)
{
	char ws[96] = "-", gs[96] = "-";
	if (want)
		shape_str(ws, sizeof ws, want->n_dims, want->ne);
	if (got)
		shape_str(gs, sizeof gs, got->n_dims, got->ne);
	const char *wt = want ? x4_role_types_name(want->role) : "-";
	const char *gt = got ? x4_type_name(got->type) : "-";
	if (json) {
		printf("%s\n {\"problem\": \"%s\", \"name\": ", n_problems ? "," : "", what);
		json_cstr(name);
		printf(", \"expected_type\": \"%s\", \"expected_shape\": \"%s\", "
		       "\"found_type\": \"%s\", \"found_shape\": \"%s\"}", wt, ws, gt, gs);
	} else {
		if (!n_problems)
			puts("problem\tname\texpected_type\texpected_shape\tfound_type\tfound_shape");
		printf("%s\t", what);
		tsv_str(name, strlen(name), 256);
		printf("\t%s\t%s\t%s\t%s\n", wt, ws, gt, gs);
	}
	n_problems++;
}

static bool same_shape(const x4_tensor_spec *w, const x4_gguf_tensor *g)
{
	if (w->n_dims != g->n_dims)
		return false;
	for (int d = 0; d < w->n_dims; d++)
		if (w->ne[d] != g->ne[d])
			return false;
	return true;
}

static int check(const char *path, const x4_gguf *g)
{
	x4_err e = { 0 };
	x4_config c;
	x4_tensor_spec *want = NULL;
	int n_want = 0;
	if (x4_config_read(g, &c, &e) || x4_layout(&c, &want, &n_want, &e)) {
		if (json) {
			fputs("{\"check\": {\"ok\": false, \"error\": ", stdout);
			json_cstr(e.msg);
			puts("}}");
		} else {
			printf("check: failed: %s\n", e.msg);
		}
		x4t_warn("%s: check failed: %s", path, e.msg);
		return 1;
	}
	if (json)
		fputs("{\"check\": {\"problems\": [", stdout);
	for (int i = 0; i < n_want; i++) {
		const x4_gguf_tensor *t = x4_gguf_find_tensor(g, want[i].name);
		if (!t) {
			problem("missing", want[i].name, &want[i], NULL);
			continue;
		}
		/* a type the tensor's role takes (x4_role_types), not only the released one */
		bool ty = t->type >= 0 && t->type < 32 && (x4_role_types(want[i].role) >> t->type & 1);
		bool sh = same_shape(&want[i], t);
		if (!ty || !sh)
			problem(!ty && !sh ? "mistyped_misshaped" : !ty ? "mistyped" : "misshaped",
				want[i].name, &want[i], t);
	}
	int64_t n_file = x4_gguf_tensor_count(g);
	for (int64_t i = 0; i < n_file; i++) {
		const x4_gguf_tensor *t = x4_gguf_tensor_at(g, i);
		bool known = false;
		for (int k = 0; k < n_want && !known; k++)
			known = strcmp(want[k].name, t->name) == 0;
		if (!known)
			problem("extra", t->name, NULL, t);
	}
	free(want);
	if (json)
		printf("], \"ok\": %s, \"expected_tensors\": %d, \"file_tensors\": %lld}}\n",
		       n_problems ? "false" : "true", n_want, (long long)n_file);
	else if (n_problems)
		printf("check: failed, %d problem%s (%d tensors expected, %lld in the file)\n",
		       n_problems, n_problems == 1 ? "" : "s", n_want, (long long)n_file);
	else
		printf("check: ok, %d tensors\n", n_want);
	if (n_problems)
		x4t_warn("%s: check failed: %d problem%s", path, n_problems,
			 n_problems == 1 ? "" : "s");
	return n_problems ? 1 : 0;
}

/* ---- the whole report ---- */

static int report(const char *path, const x4_gguf *g, bool full_fp)
{
	x4_err e = { 0 };
	char fp[17];
	if (x4_fingerprint(path, full_fp, fp, &e)) {
		x4t_warn("%s: fingerprint: %s", path, e.msg);
		return 1;
	}
	if (json) {
		fputs("{\"file\": ", stdout);
		json_cstr(path);
		printf(",\n\"header\": {\"version\": %u, \"tensor_count\": %lld, \"kv_count\": %lld, "
		       "\"alignment\": %u, \"data_offset_bytes\": %llu, \"file_size_bytes\": %llu}",
		       x4_gguf_version(g), (long long)x4_gguf_tensor_count(g),
		       (long long)x4_gguf_kv_count(g), x4_gguf_alignment(g),
		       (unsigned long long)x4_gguf_data_offset(g),
		       (unsigned long long)x4_gguf_file_size(g));
	} else {
		printf("# header\nversion\ttensor_count\tkv_count\talignment\tdata_offset_bytes\t"
		       "file_size_bytes\n%u\t%lld\t%lld\t%u\t%llu\t%llu\n\n", x4_gguf_version(g),
		       (long long)x4_gguf_tensor_count(g), (long long)x4_gguf_kv_count(g),
		       x4_gguf_alignment(g), (unsigned long long)x4_gguf_data_offset(g),
		       (unsigned long long)x4_gguf_file_size(g));
	}
	print_metadata(g);
	print_tensors(g);
	x4_tensor_spec *t = NULL;
	int n = 0;
	if (x4_tensor_specs_from_gguf(g, &t, &n, &e)) {
		x4t_warn("%s: %s", path, e.msg);
		return 1;
	}
	print_census(t, n);
	if (json)
		printf(",\n\"fingerprint\": {\"value\": \"%s\", \"mode\": \"%s\"}", fp,
		       full_fp ? "full" : "fast");
	else
		printf("# fingerprint\nfingerprint\tmode\n%s\t%s\n\n", fp, full_fp ? "full" : "fast");

	const char *arch;
	uint64_t len;
	int rc = 0;
	if (x4_gguf_get_str(g, "general.architecture", &arch, &len, NULL) == 0 && len == 7 &&
	    memcmp(arch, "xing4_0", 7) == 0) {
		x4_config c;
		x4_decode_bytes d;
		if (x4_config_read(g, &c, &e)) {
			x4t_warn("%s: a xing4_0 file whose keys do not hold: %s", path, e.msg);
			rc = 1;
		} else {
			print_arch(&c);
			if (x4_decode_bytes_count(&c, t, n, &d, &e)) {
				x4t_warn("%s: no decode byte table: %s", path, e.msg);
				rc = 1;
			} else {
				print_decode(&c, &d);
			}
		}
	}
	free(t);
	if (json)
		puts("}");
	return rc;
}

/* --layout: the census and byte table of a preset, from x4_layout alone
 * (the full preset's figures without writing its 20 GB). */
static int layout_report(const char *preset)
{
	x4_err e = { 0 };
	x4_config c;
	x4_tensor_spec *t;
	int n;
	x4_decode_bytes d;
	if (x4_config_preset(preset, &c, &e) || x4_layout(&c, &t, &n, &e)) {
		x4t_usage_error("--layout: %s", e.msg);
	}
	if (x4_decode_bytes_count(&c, t, n, &d, &e)) {
		x4t_warn("--layout %s: %s", preset, e.msg);
		free(t);
		return 1;
	}
	if (json) {
		fputs("{\"layout\": ", stdout);
		json_cstr(preset);
	}
	print_census(t, n);
	print_arch(&c);
	print_decode(&c, &d);
	if (json)
		puts("}");
	free(t);
	return 0;
}

int main(int argc, char **argv)
{
	x4t_prog = PROG;
	static const struct option opts[] = {
		{ "check", no_argument, 0, 'c' },
		{ "json", no_argument, 0, 'j' },
		{ "full-fingerprint", no_argument, 0, 'f' },
		{ "layout", required_argument, 0, 'L' },
		{ "help", no_argument, 0, 'h' },
		{ "version", no_argument, 0, 'V' },
		{ 0, 0, 0, 0 },
	};
	bool do_check = false, full_fp = false;
	const char *layout = NULL;
	int opt;
	while ((opt = getopt_long(argc, argv, "cjfh", opts, NULL)) != -1) {
		switch (opt) {
		case 'c': do_check = true; break;
		case 'j': json = true; break;
		case 'f': full_fp = true; break;
		case 'L': layout = optarg; break;
		case 'h':
			usage(stdout);
			return x4t_out_done("the help");
		case 'V':
			printf(PROG " %s (commit %s, CUDA runtime %s)\n", x4_version(), x4_commit(),
			       x4_cuda_runtime());
			return x4t_out_done("the version");
		default:
			usage(stderr);
			return 2;
		}
	}
	if (layout && argc == optind && !do_check) {
		int rc = layout_report(layout);
		return x4t_out_done("the report") ? 1 : rc;
	}
	if (layout)
		x4t_usage_error("--layout PRESET takes no FILE and no --check");
	if (argc - optind != 1)
		x4t_usage_error("give exactly one FILE.gguf");
	const char *path = argv[optind];
	x4_err e = { 0 };
	x4_gguf *g;
	if (x4_gguf_open(&g, path, &e))
		x4t_die("%s", e.msg);
	int rc = do_check ? check(path, g) : report(path, g, full_fp);
	x4_gguf_close(g);
	return x4t_out_done("the report") ? 1 : rc;
}
