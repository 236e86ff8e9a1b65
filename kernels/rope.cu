/*
 * rope.cu - YaRN RoPE (docs/forward.md 6.2) on the query heads' rope parts: adjacent
 * pairs, angle fl32(fl32(p) * omega_i), accurate sincosf.  The position is
 * read on the device (*pos + token), so a captured graph replays each step.
 */
#include "core_dev.cuh"
#include "pdl.cuh"

namespace {

/* One thread a pair; the grid is flat over tokens x vectors x pairs. */
__global__ void rope_kernel(long total, int n_vec, int half, const float *in, long ld_in_tok,
			    int ld_in_vec, float *out, long ld_out_tok, int ld_out_vec,
			    const float *__restrict__ omega, const int *__restrict__ pos)
{
	const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
	x4p::trigger();
	x4p::wait();
	if (idx >= total)
		return;
	const int i = (int)(idx % half);
	const long tv = idx / half;
	const int v = (int)(tv % n_vec);
	const long tok = tv / n_vec;
	const float *z = in + tok * ld_in_tok + (long)v * ld_in_vec;
	float *o = out + tok * ld_out_tok + (long)v * ld_out_vec;
	float2 r = x4c::rope_pair(z[2 * i], z[2 * i + 1], *pos + (int)tok, omega[i]);
	o[2 * i] = r.x;
	o[2 * i + 1] = r.y;
}

} /* namespace */

extern "C" int x4k_rope(int n_tok, int n_vec, int d_rope, const float *in, long ld_in_tok,
			int ld_in_vec, float *out, long ld_out_tok, int ld_out_vec,
			const float *omega, const int *pos, cudaStream_t s, x4_err *e)
{
	if (n_tok < 0 || n_vec < 1 || d_rope < 2 || d_rope % 2 ||
	    (long)n_tok * n_vec * (d_rope / 2) > (1L << 40))
		return x4_err_set(e, X4_EINVAL, "x4k_rope: bad shape (%d tokens, %d vectors of %d)",
				  n_tok, n_vec, d_rope);
	if (n_tok == 0)
		return 0;
	if (!in || !out || !omega || !pos)
		return x4_err_set(e, X4_EINVAL, "x4k_rope: NULL buffer");
	const int half = d_rope / 2;
	const long total = (long)n_tok * n_vec * half;
	x4p::launch(rope_kernel, dim3((unsigned)((total + 127) / 128)), dim3(128), 0, s, total, n_vec, half,
		    in, ld_in_tok, ld_in_vec, out, ld_out_tok, ld_out_vec, omega, pos);
	return x4_cuda_launched("x4k_rope: launch", e);
}
