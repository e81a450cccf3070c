#pragma once
// The qN and s7 kernels' references: every weight exactly as the kernel forms it, so that a
// test's bound holds only the fp32 accumulation and the output's rounding.
//
// The kernels dequantize w = q * s + b with s and b = -z * s stored rounded to the
// activation type (upload_qn_weight) and one fused multiply-add (gemv_qn and gemm_qn: an
// fma2 in the activation type, rounded once from the exact value; dequant_qn: an fp32 fmaf,
// then a rounding to the activation type). q enters exact (qn_decode.cuh's bit moves), a
// pruned s7 element is exactly +0. Emulated here in float64, those weights are the very
// values the kernel multiplies, so a test need not leave room for their roundings, which
// grow with |q s| and |z s| rather than |w| (the old bound did, and with it an error
// confined to one group of a long K passed).
#include <cstdint>

#include "kernels/packed_weight.h"
#include "runtime/dtype.h"

namespace gemlite {

enum class QnFma {
  ActivationType,     // gemv_qn, gemm_qn: fma in fp16 / bf16, one rounding
  Fp32ThenActivation  // dequant_qn: fmaf in fp32, then rounded to fp16 / bf16
};

// Row n of W [N, K] as the kernel prepared for `act` forms it (qN or s7 weights).
RowDecoder qn_kernel_row_decoder(const PackedWeight& w, DType act, QnFma fma = QnFma::ActivationType);

// The bound on |y - ref| of a kernel output y whose exact value (with the kernel's weights)
// is ref, S = Σ_k |x_k w_k|, over a K-long sum:
//   u |ref| + (1 + u) 2 (K / 16 + 32) 2^-23 S + 2^-24,
// u = 2^-11 (fp16) or 2^-8 (bf16) the output's rounding (times 1 + 2^-10 for the fp32
// adds of a bias or a residual before it; 1 + u on the accumulation's error, which the
// output rounds too). The accumulation is fp32 on the tensor cores: at most K / 16 chained
// mma steps (one warp's whole K; warps split it), each a truncating add that errs by <
// 2^-23 of a running sum bounded by S, then the warps' and blocks' partial sums (32 more
// adds bound them all); twice that for the mma's internal alignment of its 16 products.
// That factor 2 is an assumption about the hardware's adder (studies of V100 / A100 tensor
// cores found addends truncated as they are aligned), confirmed only by the GPU runs on
// sm_90 (H100, H200): worst |error| / tolerance 0.71-0.97, most of it the output's rounding. 2^-24: an fp16
// subnormal output's rounding. At K = 4100 the accumulation term is 6.9e-5 S; the bound
// it replaces, 2^-9 S2 with S2 = Σ |x_k| (|w_k| + |q_k s| + |z s|) ~ 2.5 S, was 70 times wider.
double qn_tolerance(DType act, int64_t K, double ref, double magnitude);

}  // namespace gemlite
