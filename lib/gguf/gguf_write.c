/*
 * gguf_write.c - the GGUF v3 writer.
 *
 * Keys and tensor infos are kept in memory (a few hundred KB even with a
 * 32768-piece vocabulary); tensor data never is: callers pwrite it straight
 * into the file from any thread, so a 20 GB checkpoint needs little memory.
 * Tensors are placed at the strict padded offsets current llama.cpp checks
 * (each offset is the sum of the padded sizes before it).  The file is
 * sized with ftruncate up front, so every padding byte is a zero hole.
 */
#include "x4_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAME_MAX_BYTES 63

struct wtensor {
	char *name;
	int type, n_dims;
	uint64_t ne[4];
	uint64_t nbytes, offset; /* offset from the data section */
	uint64_t written;        /* bytes given by pwrite (atomic) */
};

struct x4_gguf_writer {
	char *path, *tmp;
	int fd;
	bool created; /* tmp exists and is ours to remove */
	int state;    /* 0 declaring, 1 data, 2 failed */
	x4_err err;   /* the first declaration error, reported by begin_data */
	uint32_t align;
	uint8_t *kv;  /* serialized kv pairs */
	size_t kv_len, kv_cap;
	char **keys;  /* [n_kv], for duplicate checks */
	int64_t n_kv, keys_cap;
	struct wtensor *t; /* [n_t] */
	int n_t, t_cap;
	uint64_t data_start, total;
	int io_failed; /* set by a failed pwrite (atomic) */
};

static int latch(x4_gguf_writer *w, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int latch(x4_gguf_writer *w, int code, const char *fmt, ...)
{
	if (!w->err.code) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(w->err.msg, sizeof w->err.msg, fmt, ap);
		va_end(ap);
		w->err.code = code;
	}
	return code;
}

int x4_gguf_writer_open(x4_gguf_writer **out, const char *path, x4_err *e)
{
	*out = NULL;
	if (!path || !*path)
		return x4_err_set(e, X4_EINVAL, "GGUF writer: empty output path");
	x4_gguf_writer *w = x4_calloc(1, sizeof *w, "a GGUF writer", e);
	if (!w)
		return X4_ENOMEM;
	size_t n = strlen(path) + 32;
	w->path = strdup(path);
	w->tmp = malloc(n);
	if (!w->path || !w->tmp) {
		free(w->path);
		free(w->tmp);
		free(w);
		return x4_err_set(e, X4_ENOMEM, "out of host memory for a GGUF writer");
	}
	snprintf(w->tmp, n, "%s.tmp.%ld", path, (long)getpid());
	w->fd = -1;
	w->align = 32;
	*out = w;
	return 0;
}

static int reserve(x4_gguf_writer *w, size_t n)
{
	if (w->kv_cap - w->kv_len >= n)
		return 0;
	size_t cap = w->kv_cap ? w->kv_cap : 4096;
	while (cap - w->kv_len < n) {
		if (cap > SIZE_MAX / 2)
			return latch(w, X4_ENOMEM, "GGUF writer: metadata too large");
		cap *= 2;
	}
	uint8_t *p = realloc(w->kv, cap);
	if (!p)
		return latch(w, X4_ENOMEM, "out of host memory growing GGUF metadata to %zu bytes", cap);
	w->kv = p;
	w->kv_cap = cap;
	return 0;
}

static void put(x4_gguf_writer *w, const void *p, size_t n)
{
	if (n && !reserve(w, n)) {
		memcpy(w->kv + w->kv_len, p, n);
		w->kv_len += n;
	}
}

/* Little-endian, whatever the host: the file's byte order is fixed. */
static void put_le(x4_gguf_writer *w, uint64_t v, int bytes)
{
	uint8_t b[8];
	for (int i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put(w, b, (size_t)bytes);
}

static void put_str(x4_gguf_writer *w, const char *s, size_t n)
{
	put_le(w, n, 8);
	put(w, s, n);
}

/* Checks the key, records it, and writes key and value type.  Nonzero
 * means the pair must not be written (the error is latched). */
static int begin_kv(x4_gguf_writer *w, const char *key, int vtype)
{
	if (w->state != 0)
		return latch(w, X4_EINVAL, "GGUF writer: key '%s' added after begin_data", key ? key : "(null)");
	if (w->err.code)
		return w->err.code;
	if (!key || !*key)
		return latch(w, X4_EINVAL, "GGUF writer: empty key");
	for (int64_t i = 0; i < w->n_kv; i++)
		if (!strcmp(w->keys[i], key))
			return latch(w, X4_EINVAL, "GGUF writer: duplicate key '%s'", key);
	if (!strcmp(key, "general.alignment") && vtype != X4_GV_U32)
		return latch(w, X4_EINVAL, "GGUF writer: general.alignment must be a u32, not a %s",
			     x4_gguf_vtype_name(vtype));
	if (w->n_kv == w->keys_cap) {
		int64_t cap = w->keys_cap ? 2 * w->keys_cap : 64;
		char **k = realloc(w->keys, cap * sizeof *k);
		if (!k)
			return latch(w, X4_ENOMEM, "out of host memory for GGUF keys");
		w->keys = k;
		w->keys_cap = cap;
	}
	if (!(w->keys[w->n_kv] = strdup(key)))
		return latch(w, X4_ENOMEM, "out of host memory for GGUF keys");
	w->n_kv++;
	put_str(w, key, strlen(key));
	put_le(w, (uint32_t)vtype, 4);
	return w->err.code;
}

int x4_gguf_writer_kv_u32(x4_gguf_writer *w, const char *key, uint32_t v)
{
	if (key && !strcmp(key, "general.alignment") && (!v || (v & (v - 1))))
		return latch(w, X4_EINVAL, "GGUF writer: general.alignment %" PRIu32
			     " is not a nonzero power of two", v);
	int rc = begin_kv(w, key, X4_GV_U32);
	if (rc)
		return rc;
	put_le(w, v, 4);
	if (!strcmp(key, "general.alignment"))
		w->align = v;
	return w->err.code;
}

int x4_gguf_writer_kv_i32(x4_gguf_writer *w, const char *key, int32_t v)
{
	int rc = begin_kv(w, key, X4_GV_I32);
	if (!rc)
		put_le(w, (uint32_t)v, 4);
	return rc ? rc : w->err.code;
}

int x4_gguf_writer_kv_u64(x4_gguf_writer *w, const char *key, uint64_t v)
{
	int rc = begin_kv(w, key, X4_GV_U64);
	if (!rc)
		put_le(w, v, 8);
	return rc ? rc : w->err.code;
}

int x4_gguf_writer_kv_f32(x4_gguf_writer *w, const char *key, float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	int rc = begin_kv(w, key, X4_GV_F32);
	if (!rc)
		put_le(w, u, 4);
	return rc ? rc : w->err.code;
}

int x4_gguf_writer_kv_bool(x4_gguf_writer *w, const char *key, bool v)
{
	int rc = begin_kv(w, key, X4_GV_BOOL);
	if (!rc)
		put_le(w, v ? 1 : 0, 1);
	return rc ? rc : w->err.code;
}

int x4_gguf_writer_kv_str(x4_gguf_writer *w, const char *key, const char *v)
{
	if (!v)
		return latch(w, X4_EINVAL, "GGUF writer: NULL string for key '%s'", key ? key : "(null)");
	int rc = begin_kv(w, key, X4_GV_STR);
	if (!rc)
		put_str(w, v, strlen(v));
	return rc ? rc : w->err.code;
}

int x4_gguf_writer_kv_arr_str(x4_gguf_writer *w, const char *key,
			      const char *const *v, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (!v[i])
			return latch(w, X4_EINVAL, "GGUF writer: element %" PRIu64
				     " of string array '%s' is NULL", i, key ? key : "(null)");
	int rc = begin_kv(w, key, X4_GV_ARR);
	if (rc)
		return rc;
	put_le(w, X4_GV_STR, 4);
	put_le(w, n, 8);
	for (uint64_t i = 0; i < n; i++)
		put_str(w, v[i], strlen(v[i]));
	return w->err.code;
}

static int arr32(x4_gguf_writer *w, const char *key, int elem, const void *v, uint64_t n)
{
	if (n && !v)
		return latch(w, X4_EINVAL, "GGUF writer: NULL array for key '%s'", key ? key : "(null)");
	if (n > SIZE_MAX / 4)
		return latch(w, X4_ENOMEM, "GGUF writer: array '%s' is too large", key ? key : "(null)");
	int rc = begin_kv(w, key, X4_GV_ARR);
	if (rc)
		return rc;
	put_le(w, (uint32_t)elem, 4);
	put_le(w, n, 8);
	if (reserve(w, n * 4))
		return w->err.code;
	const uint8_t *p = v;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, p + 4 * i, 4);
		put_le(w, u, 4);
	}
	return w->err.code;
}

int x4_gguf_writer_kv_arr_f32(x4_gguf_writer *w, const char *key,
			      const float *v, uint64_t n)
{
	return arr32(w, key, X4_GV_F32, v, n);
}

int x4_gguf_writer_kv_arr_i32(x4_gguf_writer *w, const char *key,
			      const int32_t *v, uint64_t n)
{
	return arr32(w, key, X4_GV_I32, v, n);
}

int x4_gguf_writer_tensor(x4_gguf_writer *w, const char *name, int type,
			  int n_dims, const uint64_t *ne)
{
	if (w->state != 0)
		return latch(w, X4_EINVAL, "GGUF writer: tensor '%s' added after begin_data",
			     name ? name : "(null)");
	if (w->err.code)
		return w->err.code;
	if (!name || !*name)
		return latch(w, X4_EINVAL, "GGUF writer: empty tensor name");
	size_t len = strlen(name);
	if (len > NAME_MAX_BYTES)
		return latch(w, X4_EINVAL, "GGUF writer: tensor name '%s' is %zu bytes (at most %d)",
			     name, len, NAME_MAX_BYTES);
	/* Linear, but a checkpoint has about a thousand tensors: ~0.5M compares. */
	for (int i = 0; i < w->n_t; i++)
		if (!strcmp(w->t[i].name, name))
			return latch(w, X4_EINVAL, "GGUF writer: duplicate tensor name '%s'", name);
	if (!x4_type_known(type))
		return latch(w, X4_EINVAL, "GGUF writer: tensor '%s' has type %d (%s), which x4 cannot write",
			     name, type, x4_type_name(type));
	if (n_dims < 1 || n_dims > 4)
		return latch(w, X4_EINVAL, "GGUF writer: tensor '%s' has n_dims %d (must be 1..4)",
			     name, n_dims);
	struct wtensor t = { .type = type, .n_dims = n_dims, .ne = { 1, 1, 1, 1 } };
	uint64_t n = 1;
	for (int d = 0; d < n_dims; d++) {
		t.ne[d] = ne[d];
		if (!ne[d] || __builtin_mul_overflow(n, ne[d], &n) || n > (uint64_t)INT64_MAX)
			return latch(w, X4_EINVAL, "GGUF writer: tensor '%s' dimension %d (%" PRIu64
				     ") is zero or overflows the element count", name, d, ne[d]);
	}
	uint64_t be = (uint64_t)x4_type_block_elems(type);
	if (ne[0] % be)
		return latch(w, X4_EINVAL, "GGUF writer: tensor '%s' (%s) has ne[0] = %" PRIu64
			     ", not a multiple of the type's %" PRIu64 "-element block",
			     name, x4_type_name(type), ne[0], be);
	if (__builtin_mul_overflow(n / be, (uint64_t)x4_type_block_bytes(type), &t.nbytes) ||
	    t.nbytes > UINT64_MAX / 2)
		return latch(w, X4_EINVAL, "GGUF writer: tensor '%s' is too large", name);
	if (w->n_t == w->t_cap) {
		int cap = w->t_cap ? 2 * w->t_cap : 256;
		struct wtensor *p = realloc(w->t, cap * sizeof *p);
		if (!p)
			return latch(w, X4_ENOMEM, "out of host memory for GGUF tensor infos");
		w->t = p;
		w->t_cap = cap;
	}
	if (!(t.name = strdup(name)))
		return latch(w, X4_ENOMEM, "out of host memory for GGUF tensor infos");
	w->t[w->n_t] = t;
	return w->n_t++;
}

uint64_t x4_gguf_writer_tensor_bytes(const x4_gguf_writer *w, int tensor)
{
	return tensor >= 0 && tensor < w->n_t ? w->t[tensor].nbytes : 0;
}

static uint8_t *le(uint8_t *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
	return p + bytes;
}

static uint64_t pad_to(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static int write_all(int fd, const void *p, size_t n, uint64_t at)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t r = pwrite(fd, b, n, (off_t)at);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? errno : EIO;
		b += r;
		n -= (size_t)r;
		at += (uint64_t)r;
	}
	return 0;
}

static void drop_tmp(x4_gguf_writer *w)
{
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
	if (w->created)
		unlink(w->tmp);
	w->created = false;
}

static void writer_free(x4_gguf_writer *w)
{
	for (int64_t i = 0; i < w->n_kv; i++)
		free(w->keys[i]);
	for (int i = 0; i < w->n_t; i++)
		free(w->t[i].name);
	free(w->keys);
	free(w->t);
	free(w->kv);
	free(w->path);
	free(w->tmp);
	free(w);
}

int x4_gguf_writer_begin_data(x4_gguf_writer *w, x4_err *e)
{
	if (w->state != 0)
		return x4_err_set(e, X4_EINVAL, "GGUF writer: begin_data called twice");
	if (w->err.code) {
		w->state = 2;
		return x4_err_set(e, w->err.code, "%s: %s", w->path, w->err.msg);
	}
	/* Offsets first: the infos carry them. */
	uint64_t hdr_len = 24 + w->kv_len, off = 0;
	for (int i = 0; i < w->n_t; i++) {
		struct wtensor *t = &w->t[i];
		hdr_len += 8 + strlen(t->name) + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
		t->offset = off;
		off += pad_to(t->nbytes, w->align);
		if (off > (uint64_t)INT64_MAX / 2) {
			w->state = 2;
			return x4_err_set(e, X4_EINVAL, "%s: tensor data exceeds 2^62 bytes", w->path);
		}
	}
	w->data_start = pad_to(hdr_len, w->align);
	w->total = w->data_start + off;
	uint8_t *hdr = x4_alloc(hdr_len, "the GGUF header", e);
	if (!hdr) {
		w->state = 2;
		return X4_ENOMEM;
	}
	uint8_t *p = hdr;
	memcpy(p, "GGUF", 4);
	p = le(p + 4, 3, 4);
	p = le(p, (uint64_t)w->n_t, 8);
	p = le(p, (uint64_t)w->n_kv, 8);
	if (w->kv_len)
		memcpy(p, w->kv, w->kv_len);
	p += w->kv_len;
	for (int i = 0; i < w->n_t; i++) {
		struct wtensor *t = &w->t[i];
		size_t n = strlen(t->name);
		p = le(p, n, 8);
		memcpy(p, t->name, n);
		p = le(p + n, (uint32_t)t->n_dims, 4);
		for (int d = 0; d < t->n_dims; d++)
			p = le(p, t->ne[d], 8);
		p = le(p, (uint32_t)t->type, 4);
		p = le(p, t->offset, 8);
	}

	w->fd = open(w->tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
	if (w->fd < 0) {
		w->state = 2;
		free(hdr);
		return x4_err_set(e, X4_EIO, "%s: %s", w->tmp, strerror(errno));
	}
	w->created = true;
	int err = 0;
	if (ftruncate(w->fd, (off_t)w->total))
		err = errno;
	else
		err = write_all(w->fd, hdr, hdr_len, 0);
	free(hdr);
	if (err) {
		drop_tmp(w);
		w->state = 2;
		return x4_err_set(e, X4_EIO, "%s: writing the %" PRIu64 "-byte GGUF header of a %"
				  PRIu64 "-byte file: %s", w->tmp, hdr_len, w->total, strerror(err));
	}
	/* The header bytes are on disk; only the layout is needed from here. */
	free(w->kv);
	w->kv = NULL;
	w->kv_len = w->kv_cap = 0;
	w->state = 1;
	return 0;
}

int x4_gguf_writer_pwrite(x4_gguf_writer *w, int tensor, uint64_t at,
			  const void *data, size_t n, x4_err *e)
{
	if (w->state != 1)
		return x4_err_set(e, X4_EINVAL, "GGUF writer: pwrite before begin_data or after a failure");
	if (tensor < 0 || tensor >= w->n_t)
		return x4_err_set(e, X4_EINVAL, "GGUF writer: no tensor %d (there are %d)", tensor, w->n_t);
	struct wtensor *t = &w->t[tensor];
	if (at > t->nbytes || n > t->nbytes - at)
		return x4_err_set(e, X4_EINVAL, "GGUF writer: %zu bytes at %" PRIu64
				  " run past the end of tensor '%s' (%" PRIu64 " bytes)", n, at,
				  t->name, t->nbytes);
	int err = write_all(w->fd, data, n, w->data_start + t->offset + at);
	if (err) {
		__atomic_store_n(&w->io_failed, 1, __ATOMIC_RELAXED);
		return x4_err_set(e, X4_EIO, "%s: writing tensor '%s': %s", w->tmp, t->name,
				  strerror(err));
	}
	__atomic_fetch_add(&t->written, (uint64_t)n, __ATOMIC_RELAXED);
	return 0;
}

static int sync_dir(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
	if (!dir)
		return ENOMEM;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(dir);
	if (fd < 0)
		return errno;
	/* Some file systems cannot sync a directory; the rename still stands. */
	int err = fsync(fd) && errno != EINVAL && errno != EROFS ? errno : 0;
	close(fd);
	return err;
}

int x4_gguf_writer_finish(x4_gguf_writer *w, x4_err *e)
{
	int rc = 0;
	if (w->state != 1 || w->err.code) {
		rc = w->err.code ? x4_err_set(e, w->err.code, "%s: %s", w->path, w->err.msg)
				 : x4_err_set(e, X4_EINVAL, "GGUF writer: finish without a successful begin_data");
		goto fail;
	}
	if (__atomic_load_n(&w->io_failed, __ATOMIC_RELAXED)) {
		rc = x4_err_set(e, X4_EIO, "%s: a tensor write failed earlier", w->tmp);
		goto fail;
	}
	/* A tensor left short would read back as silent zeros: refuse it. */
	for (int i = 0; i < w->n_t; i++) {
		if (w->t[i].written != w->t[i].nbytes) {
			rc = x4_err_set(e, X4_EINVAL, "%s: tensor '%s' got %" PRIu64 " of its %" PRIu64
					" bytes", w->path, w->t[i].name, w->t[i].written, w->t[i].nbytes);
			goto fail;
		}
	}
	if (fsync(w->fd)) {
		rc = x4_err_set(e, X4_EIO, "%s: fsync: %s", w->tmp, strerror(errno));
		goto fail;
	}
	int fd = w->fd;
	w->fd = -1;
	if (close(fd)) {
		rc = x4_err_set(e, X4_EIO, "%s: close: %s", w->tmp, strerror(errno));
		goto fail;
	}
	if (rename(w->tmp, w->path)) {
		rc = x4_err_set(e, X4_EIO, "rename %s to %s: %s", w->tmp, w->path, strerror(errno));
		goto fail;
	}
	w->created = false;
	int err = sync_dir(w->path);
	if (err)
		rc = x4_err_set(e, X4_EIO, "%s: written, but syncing its directory failed: %s",
				w->path, strerror(err));
	writer_free(w);
	return rc;
fail:
	drop_tmp(w);
	writer_free(w);
	return rc;
}

void x4_gguf_writer_abort(x4_gguf_writer *w)
{
	if (!w)
		return;
	drop_tmp(w);
	writer_free(w);
}
