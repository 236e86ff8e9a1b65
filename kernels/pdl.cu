/*
 * pdl.cu - the process-wide switch of programmatic dependent launch
 * (pdl.cuh) and the per-device check behind x4p::on().
 */
#include <atomic>

#include "pdl.cuh"

/* `make X4_PDL=1` builds with the lever on from the start (for pricing it
 * end to end); otherwise x4k_pdl_set turns it on. */
#ifndef X4_PDL_DEFAULT
#define X4_PDL_DEFAULT 0
#endif

namespace {
std::atomic<int> pdl_on{ X4_PDL_DEFAULT };
constexpr int MAX_DEV = 64;
std::atomic<int> dev_cc[MAX_DEV]; /* 0: not looked up; else the major version + 1 */
}

extern "C" void x4k_pdl_set(int on) { pdl_on.store(on ? 1 : 0); }

extern "C" int x4k_pdl_get(void) { return pdl_on.load(); }

bool x4p::on()
{
	if (!pdl_on.load())
		return false;
	int dev = 0;
	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MAX_DEV) {
		cudaGetLastError();
		return false;
	}
	int cc = dev_cc[dev].load();
	if (!cc) {
		int major = 0;
		if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
			cudaGetLastError();
			return false;
		}
		cc = major + 1;
		dev_cc[dev].store(cc);
	}
	return cc - 1 >= 9;
}
