/*
 * backend/ops_grouped_mm.cpp — torch._grouped_mm (torch.nn.functional.
 * grouped_mm) on the device: the grouped products of mixture-of-experts
 * layers (transformers' grouped experts run it on every device but the CPU
 * of old PyTorch releases).
 *
 * The groups are data (offs: the cumulative ends of the groups, int32), and
 * a device program has static shapes, so each form computes every group's
 * product densely and keeps, for each row / column / slice, its group's
 * (the way a TPU runs a grouped product without a ragged kernel): E times
 * the arithmetic of the ragged product, exact values. Positions at or past
 * the last end belong to no group and get 0.
 *   (S,K) x (E,K,N), offs over S   -> (S,N)    rows of group g use mat2[g]
 *   (M,K) x (K,N),   offs over K   -> (E,M,N)  slice g sums over group g's K
 *   (E,M,K) x (K,N), offs over N   -> (M,N)    columns of group g use self[g]
 *   (E,M,K) x (E,K,N), no offs     -> (E,M,N)  a batched product
 * bias (E,N) is added per group in the first and last forms. Registered
 * on the autograd key (AutogradXLA too in compatibility mode) as a
 * composite of differentiable ops: functionalization places its views and
 * autograd differentiates it.
 */
#include "lt_aten.h"
#include "lt_register.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/matmul.h>

namespace lazytpu {
namespace {

/* The group of each position 0..L-1: how many group ends lie at or before
 * it (E for a position past the last end). One-hot over the E groups, as
 * `dtype`: (E, L). */
at::Tensor group_mask(const at::Tensor &offs, int64_t L, at::ScalarType dtype) {
  int64_t E = offs.size(0);
  at::Tensor pos = at::arange(L, offs.options().dtype(at::kLong));
  at::Tensor gid = pos.unsqueeze(1).ge(offs.to(at::kLong).unsqueeze(0)).sum(1);
  at::Tensor groups = at::arange(E, offs.options().dtype(at::kLong));
  return gid.unsqueeze(0).eq(groups.unsqueeze(1)).to(dtype);
}

at::Tensor lt_grouped_mm(const at::Tensor &self, const at::Tensor &mat2,
                         const c10::optional<at::Tensor> &offs,
                         const c10::optional<at::Tensor> &bias,
                         c10::optional<at::ScalarType> out_dtype) {
  TORCH_CHECK(self.dim() == 2 || self.dim() == 3, "torch._grouped_mm: self must be 2-d or 3-d, "
              "got shape ", self.sizes());
  TORCH_CHECK(mat2.dim() == 2 || mat2.dim() == 3, "torch._grouped_mm: mat2 must be 2-d or 3-d, "
              "got shape ", mat2.sizes());
  TORCH_CHECK(at::isFloatingType(self.scalar_type()) && self.scalar_type() == mat2.scalar_type(),
              "torch._grouped_mm: expected floating inputs of one dtype, got ",
              self.scalar_type(), " and ", mat2.scalar_type());
  bool a2 = self.dim() == 2, b2 = mat2.dim() == 2;
  TORCH_CHECK(self.size(-1) == mat2.size(-2), "torch._grouped_mm: contraction dims differ: ",
              self.sizes(), " x ", mat2.sizes());
  at::ScalarType dt = self.scalar_type();
  at::Tensor out;
  if (!a2 && !b2) {
    TORCH_CHECK(!offs.has_value(), "torch._grouped_mm: 3-d x 3-d takes no offs");
    TORCH_CHECK(self.size(0) == mat2.size(0), "torch._grouped_mm: group counts differ: ",
                self.sizes(), " x ", mat2.sizes());
    out = at::bmm(self, mat2);
    if (bias.has_value()) out = out.add(bias->unsqueeze(1));
  } else {
    TORCH_CHECK(offs.has_value() && offs->dim() == 1, "torch._grouped_mm: ", self.dim(), "-d x ",
                mat2.dim(), "-d needs offs, the 1-d cumulative ends of the groups");
    int64_t E = offs->size(0);
    if (a2 && !b2) {
      TORCH_CHECK(mat2.size(0) == E, "torch._grouped_mm: mat2 has ", mat2.size(0),
                  " groups, offs ", E);
      at::Tensor m = group_mask(*offs, self.size(0), dt);               /* (E, S) */
      out = at::matmul(self.unsqueeze(0), mat2).mul(m.unsqueeze(2)).sum(0);
      if (bias.has_value()) out = out.add(at::matmul(m.t(), bias->to(dt)));
    } else if (a2 && b2) {
      TORCH_CHECK(!bias.has_value(), "torch._grouped_mm: no bias for 2-d x 2-d");
      at::Tensor m = group_mask(*offs, self.size(1), dt);               /* (E, K) */
      out = at::matmul(self.unsqueeze(0).mul(m.unsqueeze(1)), mat2);
    } else {
      TORCH_CHECK(self.size(0) == E, "torch._grouped_mm: self has ", self.size(0),
                  " groups, offs ", E);
      TORCH_CHECK(!bias.has_value(), "torch._grouped_mm: no bias for 3-d x 2-d");
      at::Tensor m = group_mask(*offs, mat2.size(1), dt);               /* (E, N) */
      out = at::matmul(self, mat2).mul(m.unsqueeze(1)).sum(0);
    }
  }
  if (out_dtype.has_value() && *out_dtype != out.scalar_type()) out = out.to(*out_dtype);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  reg_autograd(m, "_grouped_mm", TORCH_FN(lt_grouped_mm));
}

}  // namespace lazytpu
