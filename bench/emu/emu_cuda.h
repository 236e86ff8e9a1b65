/* emu_cuda.h - host shims for compiling x4's kernel headers with g++ and
 * running their kernels on fibers (scratch emulator, not part of x4). */
#pragma once
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict

struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
inline float2 make_float2(float a, float b) { return float2{ a, b }; }
inline float4 make_float4(float a, float b, float c, float d) { return float4{ a, b, c, d }; }
inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{ a, b }; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{ a, b, c, d }; }
inline int2 make_int2(int a, int b) { return int2{ a, b }; }
inline int4 make_int4(int a, int b, int c, int d) { return int4{ a, b, c, d }; }

struct __half { uint16_t x_; };
struct __half2 { __half x, y; };
inline __half __ushort_as_half(unsigned short u) { __half h; h.x_ = u; return h; }
inline unsigned short __half_as_ushort(__half h) { return h.x_; }
inline __half __float2half_rn(float f) { _Float16 v = (_Float16)f; __half h; memcpy(&h.x_, &v, 2); return h; }
inline float __half2float(__half h) { _Float16 v; memcpy(&v, &h.x_, 2); return (float)v; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
/* byte n of the result: byte s[4n..4n+2] of the 8 bytes y:x (x the low) */
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
	const uint64_t v = (uint64_t)y << 32 | x;
	unsigned r = 0;
	for (int n = 0; n < 4; n++)
		r |= (unsigned)((v >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
	return r;
}
/* the low word of hi:lo shifted right by s mod 32 */
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s)
{
	return (unsigned)((((uint64_t)hi << 32) | lo) >> (s & 31));
}
/* the four signed byte products of a and b added to c */
inline int __dp4a(int a, int b, int c)
{
	for (int i = 0; i < 4; i++)
		c += (int)(int8_t)(a >> 8 * i) * (int)(int8_t)(b >> 8 * i);
	return c;
}
template <class T> inline T __ldg(const T *p) { return *p; }
/* bar.sync id, n: the first n threads to arrive go on together (emu_rt.h) */
void emu_bar_named(int id, int n);
/* the fibers run one at a time: a read-modify-write is atomic */
inline unsigned atomicAdd(unsigned *p, unsigned v) { const unsigned o = *p; *p = o + v; return o; }
inline int atomicExch(int *p, int v) { const int o = *p; *p = v; return o; }
/* one fiber at a time, in program order: every store is already seen */
inline void __threadfence() {}
template <class T> inline T __ldcs(const T *p) { return *p; }
template <class T> inline T __ldcg(const T *p) { return *p; }
/* per-byte a - b, modulo 256 */
inline unsigned __vsub4(unsigned a, unsigned b)
{
	unsigned r = 0;
	for (int i = 0; i < 4; i++)
		r |= ((a >> 8 * i) - (b >> 8 * i) & 0xffu) << 8 * i;
	return r;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

/* the emulator's runtime (emu_rt.h) */
struct emu_fiber;
extern emu_fiber *emu_cur;
extern uint3 blockIdx;
extern dim3 gridDim, blockDim;
uint3 emu_tid();
#define threadIdx (emu_tid())
void __syncthreads();
void __syncwarp(unsigned mask = 0xffffffffu);
float __shfl_xor_sync(unsigned mask, float v, int m);
int __shfl_xor_sync(unsigned mask, int v, int m);
float __shfl_sync(unsigned mask, float v, int src);
int __shfl_sync(unsigned mask, int v, int src);
int __shfl_up_sync(unsigned mask, int v, unsigned delta);
float __shfl_down_sync(unsigned mask, float v, unsigned delta);
unsigned __match_any_sync(unsigned mask, int v);
unsigned __reduce_max_sync(unsigned mask, unsigned v);
unsigned __reduce_min_sync(unsigned mask, unsigned v);
int __reduce_max_sync(unsigned mask, int v);
int __reduce_min_sync(unsigned mask, int v);

/* the runtime API, enough to parse the launchers */
typedef void *cudaStream_t;
typedef void *cudaEvent_t; /* x4_kern.h names it (x4k_side) */
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor, cudaDevAttrComputeCapabilityMinor,
		      cudaDevAttrMaxSharedMemoryPerBlockOptin, cudaDevAttrMultiProcessorCount };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
enum cudaLaunchAttributeID { cudaLaunchAttributeProgrammaticStreamSerialization };
struct cudaLaunchAttributeValue { int programmaticStreamSerializationAllowed; };
struct cudaLaunchAttribute { cudaLaunchAttributeID id; cudaLaunchAttributeValue val; };
struct cudaLaunchConfig_t { dim3 gridDim, blockDim; size_t dynamicSmemBytes; cudaStream_t stream;
			    cudaLaunchAttribute *attrs; unsigned numAttrs; };
struct cudaDeviceProp { char name[256]; int multiProcessorCount, l2CacheSize; };
inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr, int) { *v = 0; return cudaSuccess; }
template <class K> inline cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int) { return cudaSuccess; }
template <class K> inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, K, int, size_t)
{
	*n = 1;
	return cudaSuccess;
}
template <class K, class... A> inline cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *, K, A...) { return cudaSuccess; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char *cudaGetErrorString(cudaError_t) { return "emu"; }
