/* emu_prims.h - cp.async, ldmatrix and mma.sync as the PTX ISA defines them,
 * for the emulator: replaces mma_dev.cuh's inline-asm primitives (emu_rt.h
 * defines them). */
uint32_t emu_smem_off(const void *p);
void emu_cp_async16(uint32_t dst, const void *src, int src_bytes);
void emu_cp_async4(uint32_t dst, const void *src);
void emu_cp_commit();
void emu_cp_wait(int n);
void emu_ldsm(uint32_t (&r)[4], uint32_t addr, bool trans);
void emu_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
void emu_mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
void emu_mma_u8s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b, const int (&c)[4]);
uint32_t emu_fma_bf16x2(uint32_t a, uint32_t b, uint32_t c);

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return emu_smem_off(p); }
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes)
{
	emu_cp_async16(dst, src, src_bytes);
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src) { emu_cp_async4(dst, src); }
__device__ __forceinline__ void cp_async_commit() { emu_cp_commit(); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { emu_cp_wait(N); }
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) { emu_ldsm(r, addr, false); }
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) { emu_ldsm(r, addr, true); }
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	emu_mma(d, a, b0, b1);
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	emu_mma_bf16(d, a, b0, b1);
}
__device__ __forceinline__ void mma16816_u8s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b, const int (&c)[4])
{
	emu_mma_u8s8(d, a0, a1, b, c);
}
__device__ __forceinline__ uint32_t fma_bf16x2(uint32_t a, uint32_t b, uint32_t c) { return emu_fma_bf16x2(a, b, c); }
