/*
 * backend/eager_checks.h — eager's argument checks that the device must make
 * too, at trace time.
 *
 * The device computes where eager's CPU kernels refuse: a bool negated, an
 * integer divided by a host zero, an integer softmax, an argmax over an empty
 * dim... Without these checks lazytpu would return a value where eager
 * raises (a silent difference). Each function raises eager's exception
 * (same type, same first line) through TORCH_CHECK* and returns normally
 * when eager would compute. Found by the differential property tests
 * (tests/python/test_property_ops.py); each has a regression case there.
 */
#ifndef LT_EAGER_CHECKS_H
#define LT_EAGER_CHECKS_H

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include "lazytpu.h"

namespace lazytpu {

/* Unary op `op` on self, as eager's CPU kernel would check its dtype. */
void check_unary_like_eager(lt_op op, const at::Tensor &self);
/* Binary op `op` (self, other) / (self, scalar): the dtype of the result
 * type, an integer division by a zero known on the host (a Python number or
 * a 0-dim CPU tensor), an integer to a negative host power. */
void check_binary_like_eager(lt_op op, const at::Tensor &self, const at::Tensor &other);
void check_binary_like_eager(lt_op op, const at::Tensor &self, const c10::Scalar &other);
/* div with rounding_mode: integer division by a host zero. */
void check_div_mode_like_eager(const at::Tensor &self, const at::Tensor &other);
void check_div_mode_like_eager(const at::Tensor &self, const c10::Scalar &other);
/* add/sub with alpha: eager's alpha_check against the result type, which
 * it returns. */
c10::ScalarType check_alpha_like_eager(const at::Tensor &self, const at::Tensor &other,
                                       const c10::Scalar &alpha);
c10::ScalarType check_alpha_like_eager(const at::Tensor &self, const c10::Scalar &other,
                                       const c10::Scalar &alpha);
/* sub / rsub (Tensor and Scalar forms) with a bool operand. */
void check_sub_like_eager(const at::Tensor &self, const at::Tensor &other);
void check_sub_like_eager(const at::Tensor &self, const c10::Scalar &other);
/* A floating-only kernel (lerp, softmax, ...): eager's NotImplementedError
 * `"<kernel>" not implemented for '<dtype>'` for any other dtype of self. */
void check_floating_kernel(const at::Tensor &self, const char *kernel);
/* A max/min-like reduction `name` over an empty input: no dim given
 * (RuntimeError; IndexError if index_error), or a reduced dim of size 0
 * (IndexError naming the dim as given, or wrapped if wrapped_name). */
void check_empty_reduce(const char *name, const at::Tensor &self, at::IntArrayRef dim,
                        bool no_dim, bool index_error, bool wrapped_name);
/* The operands (undefined ones and nullptr skipped) broadcast together, as
 * eager's TensorIterator checks (its message names the mismatching sizes
 * and dim), for ops the shim composes from several table ops (clamp). */
void check_broadcast_like_eager(std::initializer_list<const at::Tensor *> ts);
/* True when a matrix product of these operands is integral (eager computes
 * it on the CPU; the device multiplies floating matrices only, so the shim
 * sends it to the CPU fallback). */
bool integer_matmul(std::initializer_list<const at::Tensor *> ts);

}  // namespace lazytpu

#endif
