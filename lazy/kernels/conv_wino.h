/*
 * lazy/kernels/conv_wino.h — the 3x3 stride-1 kernels conv.c dispatches to
 * before im2col + GEMM (dilation 1, one group, f32): Winograd F(2x2,3x3)
 * (conv_wino.c) and the direct single-input-channel conv (conv_direct.c).
 */
#ifndef LT_CONV_WINO_H
#define LT_CONV_WINO_H

#include <stdint.h>
#include "kernel.h"

/* A stride-1 3x3 convolution as the Winograd path sees it: input
 * [N, Ci, H, W], output [N, Co, OH, OW] with OH = H + 2*ph - 2 and
 * OW = W + 2*pw - 2, zero padding ph/pw >= 0 on each side. flip = 0: the
 * weight is [Co, Ci, 3, 3] (conv2d); flip = 1: it is stored [Ci, Co, 3, 3]
 * and applied flipped in both spatial dims (the input gradient of a 3x3
 * stride-1 conv, computed as the forward conv of the output gradient). */
typedef struct lt_wino_conv {
    int64_t N, Ci, H, W, Co, OH, OW, ph, pw;
    int flip;
} lt_wino_conv;

/* 1 when the Winograd path should compute q: LAZYTPU_CONV_ALGO=winograd
 * forces it, =im2col refuses it (read on every call, so tests and benches
 * can switch between calls), unset/auto decides by the measured heuristic
 * (conv_wino.c). Never 1 for a shape the path cannot compute (OH or OW < 1,
 * negative padding). */
int lt_wino_choose(const lt_wino_conv *q);

/* Computes q into out (contiguous f32 [N, Co, OH, OW], overwritten) from
 * the contiguous f32 input x and weight w, using up to nt workers of the
 * core's helper pool (lt_par_for; nt = 1 runs on the caller). Buffers are
 * the caller's; the kernel's scratch is allocated and freed here. Returns
 * LT_OK, or LT_ERR_OOM with the error set when scratch cannot be
 * allocated (out is then undefined). */
lt_status lt_wino_run(const lt_wino_conv *q, const float *x, const float *w, float *out,
                      int nt, const lt_kernel_ctx *ctx);

/* The weight gradient of q (flip must be 0: q is the forward conv):
 * dw [Co, Ci, 3, 3] (contiguous f32, overwritten) = the sum over samples
 * and output pixels of gy [N, Co, OH, OW] times the input x [N, Ci, H, W]
 * it saw, through the same tiles as lt_wino_run (Winograd's adjoint:
 * G^T [(A dy A^T) . (B^T d B)] G summed over tiles). Same threading,
 * ownership and failures as lt_wino_run (LT_ERR_INTERNAL for flip = 1). */
lt_status lt_wino_run_bw(const lt_wino_conv *q, const float *x, const float *gy, float *dw,
                         int nt, const lt_kernel_ctx *ctx);

/* 1 when the direct kernel should compute q: a forward conv (flip 0) with
 * one input channel, unless LAZYTPU_CONV_ALGO names another path
 * (winograd / im2col; read on every call). */
int lt_conv_direct_c1_choose(const lt_wino_conv *q);

/* q (Ci must be 1, flip 0; LT_ERR_INTERNAL otherwise) into out
 * (contiguous f32 [N, Co, OH, OW], overwritten) from x [N, 1, H, W] and w
 * [Co, 1, 3, 3], directly (conv_direct.c), samples on up to nt workers of
 * the core's helper pool. LT_ERR_OOM with the error set when its padded
 * planes cannot be allocated. */
lt_status lt_conv_direct_c1(const lt_wino_conv *q, const float *x, const float *w, float *out,
                            int nt, const lt_kernel_ctx *ctx);

#endif
