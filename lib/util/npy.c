/*
 * npy.c - a float32 2-D NumPy .npy writer for logit dumps.
 *
 * The row count is not known until generation stops, so the header is
 * written with room to spare (a fixed 128 bytes, which keeps the data
 * 64-byte aligned as NumPy writes it) and rewritten with the real shape at
 * close.  Everything goes to a temporary name first: an interrupted run
 * leaves no half-written array under the name the user asked for.
 */
#include "x4_int.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_HEADER 128 /* magic .. the header's '\n'; a multiple of 64 */

struct x4_npy {
	FILE *f;
	char *path;
	char *tmp;
	int cols;
	uint64_t rows;
};

/* The whole header for a shape, padded with spaces to NPY_HEADER bytes. */
static int npy_header(char out[NPY_HEADER], uint64_t rows, int cols)
{
	char dict[NPY_HEADER];
	int n = snprintf(dict, sizeof dict,
			 "{'descr': '<f4', 'fortran_order': False, 'shape': (%llu, %d), }",
			 (unsigned long long)rows, cols);
	int hlen = NPY_HEADER - 10; /* after magic (6), version (2), length (2) */
	if (n < 0 || n + 1 > hlen)
		return -1;
	memcpy(out, "\x93NUMPY\x01\x00", 8);
	out[8] = (char)(hlen & 0xff);
	out[9] = (char)(hlen >> 8);
	memset(out + 10, ' ', (size_t)hlen);
	memcpy(out + 10, dict, (size_t)n);
	out[NPY_HEADER - 1] = '\n';
	return 0;
}

static void npy_free(x4_npy *w)
{
	if (!w)
		return;
	if (w->f)
		fclose(w->f);
	free(w->path);
	free(w->tmp);
	free(w);
}

static const char *kind_of(mode_t m)
{
	return S_ISDIR(m) ? "a directory" : S_ISCHR(m) || S_ISBLK(m) ? "a device"
	     : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

/* The rules of a careful Unix writer: a new name is created in a folder
 * that exists and can be written; an existing regular file is replaced;
 * a symbolic link is followed (the file it names is replaced, the link
 * stays); anything else (a folder, a device such as /dev/null, a FIFO) is
 * refused, since renaming over it would destroy it. */
int x4_npy_check_path(const char *path, char *resolved, size_t cap, x4_err *e)
{
	struct stat st;
	if (!*path)
		return x4_err_set(e, X4_EINVAL, "the output path is empty");
	if (stat(path, &st) == 0) {
		if (!S_ISREG(st.st_mode))
			return x4_err_set(e, X4_EINVAL, "%s is %s: the array is written to a regular "
					  "file; give a file's path", path, kind_of(st.st_mode));
		char real[PATH_MAX];
		if (!realpath(path, real))
			return x4_err_set(e, X4_EIO, "cannot resolve %s: %s", path, strerror(errno));
		if (strlen(real) >= cap)
			return x4_err_set(e, X4_EINVAL, "the path %s is too long", real);
		memcpy(resolved, real, strlen(real) + 1);
	} else {
		if (errno != ENOENT || lstat(path, &st) == 0)
			return x4_err_set(e, X4_EIO, "cannot write %s: %s", path,
					  errno == ENOENT ? "it is a symbolic link to a missing file"
							  : strerror(errno));
		if (strlen(path) >= cap)
			return x4_err_set(e, X4_EINVAL, "the path %s is too long", path);
		memcpy(resolved, path, strlen(path) + 1);
	}
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s", resolved);
	const char *d = dirname(dir);
	if (stat(d, &st) != 0 || !S_ISDIR(st.st_mode))
		return x4_err_set(e, X4_EIO, "cannot write %s: the folder %s does not exist", path, d);
	if (access(d, W_OK) != 0)
		return x4_err_set(e, X4_EIO, "cannot write %s: the folder %s is not writable (%s)",
				  path, d, strerror(errno));
	return 0;
}

int x4_npy_open(x4_npy **out, const char *path_in, int cols, x4_err *e)
{
	*out = NULL;
	if (cols <= 0)
		return x4_err_set(e, X4_EINVAL, "npy: %d columns; a row needs at least one", cols);
	char path[PATH_MAX];
	int rc0 = x4_npy_check_path(path_in, path, sizeof path, e);
	if (rc0)
		return rc0;
	x4_npy *w = x4_calloc(1, sizeof *w, "the npy writer", e);
	if (!w)
		return X4_ENOMEM;
	size_t len = strlen(path);
	w->path = x4_alloc(len + 1, "the npy path", e);
	w->tmp = x4_alloc(len + 32, "the npy path", e);
	if (!w->path || !w->tmp) {
		npy_free(w);
		return X4_ENOMEM;
	}
	memcpy(w->path, path, len + 1);
	snprintf(w->tmp, len + 32, "%s.tmp.%ld", path, (long)getpid());
	w->cols = cols;
	int fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0) {
		int rc = x4_err_set(e, X4_EIO, "cannot create %s: %s", w->tmp, strerror(errno));
		npy_free(w);
		return rc;
	}
	w->f = fdopen(fd, "wb");
	char hdr[NPY_HEADER];
	npy_header(hdr, 0, cols);
	if (!w->f || fwrite(hdr, 1, sizeof hdr, w->f) != sizeof hdr) {
		int rc = x4_err_set(e, X4_EIO, "cannot write %s: %s", w->tmp, strerror(errno));
		if (!w->f)
			close(fd);
		x4_npy_abort(w);
		return rc;
	}
	*out = w;
	return 0;
}

int x4_npy_append(x4_npy *w, const float *rows, int n, x4_err *e)
{
	if (n <= 0)
		return 0;
	size_t count = (size_t)n * (size_t)w->cols;
	/* .npy '<f4' is little-endian, which is every host x4 builds for. */
	if (fwrite(rows, sizeof(float), count, w->f) != count)
		return x4_err_set(e, X4_EIO, "cannot write %s: %s", w->tmp, strerror(errno));
	w->rows += (uint64_t)n;
	return 0;
}

int x4_npy_close(x4_npy *w, x4_err *e)
{
	char hdr[NPY_HEADER];
	int rc = 0;
	if (npy_header(hdr, w->rows, w->cols)) {
		rc = x4_err_set(e, X4_EINVAL, "npy: shape (%llu, %d) does not fit the header",
				(unsigned long long)w->rows, w->cols);
	} else if (fflush(w->f) || fseek(w->f, 0, SEEK_SET) ||
		   fwrite(hdr, 1, sizeof hdr, w->f) != sizeof hdr || fflush(w->f) ||
		   fsync(fileno(w->f))) {
		rc = x4_err_set(e, X4_EIO, "cannot write %s: %s", w->tmp, strerror(errno));
	} else {
		FILE *f = w->f;
		w->f = NULL;
		if (fclose(f))
			rc = x4_err_set(e, X4_EIO, "cannot write %s: %s", w->tmp, strerror(errno));
		else if (rename(w->tmp, w->path))
			rc = x4_err_set(e, X4_EIO, "cannot rename %s to %s: %s", w->tmp, w->path,
					strerror(errno));
	}
	if (rc) {
		x4_npy_abort(w);
		return rc;
	}
	npy_free(w);
	return 0;
}

void x4_npy_abort(x4_npy *w)
{
	if (!w)
		return;
	if (w->f) {
		fclose(w->f);
		w->f = NULL;
	}
	unlink(w->tmp);
	npy_free(w);
}
