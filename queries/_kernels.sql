-- Kernel classes and math precision from kernel names, for every reader that writes kernels (nsys,
-- Kineto, ncu): what a kernel does, and for matrix math which number format and engine it uses.
-- Apply them to kernel_names (one row per distinct name), never per launch. Names are matched
-- case-insensitively on the full (demangled) name as every tool writes it.

-- nsa_kernel_class(name): what the kernel does, by the first rule that matches:
--   'communication'  NCCL / RCCL / NVSHMEM / MSCCL kernels;
--   'attention'      fused attention: flash / fmha / mem-efficient / cuDNN SDPA (and its dO.O
--                    preprocessing) / paged attention;
--   'conv'           convolutions (cuDNN implicit GEMM, fprop / dgrad / wgrad, winograd, the
--                    `scudnn` / `hcudnn` kernels); `convert` is not a convolution;
--   'gemm'           matrix multiplies: cuBLAS / cuBLASLt (xmma, nvjet, *gemm*, gemv, splitK
--                    reduce), CUTLASS, Triton matmul templates (triton_tem_*mm*);
--   'norm'           layer / RMS / batch / group / instance norm, their statistics
--                    (RowwiseMoments) and backward (GammaBetaBackward); not `normal` sampling,
--                    not vector norms (NormTwoOps: a reduction);
--   'softmax'        softmax and log-softmax forward and backward;
--   'optimizer'      optimizer updates (multi_tensor_apply, fused Adam / SGD / LAMB);
--   'copy'           data movement and casts: direct_copy, *_copy_kernel, convert, cat, transpose,
--                    index / gather / scatter, embedding lookups;
--   'reduction'      reductions: reduce_kernel, sums, argmax, losses, pooling, CUB scans / sorts /
--                    histograms, Triton triton_red_ / triton_per_;
--   'elementwise'    pointwise kernels: PyTorch's (vectorized_ / unrolled_) elementwise kernels,
--                    dropout, activations, Triton triton_poi_;
--   'other'          anything else (application kernels: CloverLeaf's, custom CUDA).
CREATE OR REPLACE MACRO nsa_kernel_class_of(nsa_name) AS
    CASE
        WHEN nsa_name IS NULL THEN 'other'
        WHEN regexp_matches(nsa_name, '(?i)nccl|rccl|nvshmem|msccl') THEN 'communication'
        WHEN regexp_matches(nsa_name, '(?i)fmha|flash|attention|attn|sdpa|_mha_|paged_att|dot_do_o') THEN 'attention'
        WHEN regexp_matches(nsa_name, '(?i)conv([^e]|$)|implicit_gemm|fprop|dgrad|wgrad|winograd|scudnn|hcudnn|cask_cudnn')
            THEN 'conv'
        WHEN regexp_matches(nsa_name, '(?i)gemm|gemv|nvjet|xmma|cublas|splitkreduce|triton_tem_.*mm|matmul|_mm_|cutlass.*tensorop|wgmma')
            THEN 'gemm'
        WHEN regexp_matches(nsa_name, '(?i)(layer|rms|batch|group|instance)_?norm|gammabetabackward|gradgammabeta|rowwisemoments|_bn_|bn_fw|bn_bw')
            THEN 'norm'
        WHEN regexp_matches(nsa_name, '(?i)softmax') THEN 'softmax'
        WHEN regexp_matches(nsa_name, '(?i)multi_tensor_apply|adam|_sgd|fused_lamb|lamb_|optimizer') THEN 'optimizer'
        WHEN regexp_matches(nsa_name, '(?i)copy|convert|catarray|_cat_|transpose|permute|nchwtonhwc|nhwctonchw|index|gather|scatter|embedding')
            THEN 'copy'
        WHEN regexp_matches(nsa_name, '(?i)reduce|triton_red_|triton_per_|argmax|argmin|_sum_|nll_loss|cross_entropy|cumsum|topk|sort|pool|devicescan|histogram')
            THEN 'reduction'
        WHEN regexp_matches(nsa_name, '(?i)elementwise|triton_poi_|dropout|gelu|relu|silu|sigmoid|tanh|masked_scale|fill|where')
            THEN 'elementwise'
        ELSE 'other'
    END;

-- nsa_kernel_class(name) applies the rules above to the lower-cased name, with the library name
-- fbgemm taken out first (FBGEMM_GPU's kernels are embeddings, quantisation and permutes).
CREATE OR REPLACE MACRO nsa_kernel_class(nsa_name) AS nsa_kernel_class_of(replace(lower(nsa_name), 'fbgemm', 'fb_lib'));

-- nsa_kernel_math(name): the number format of a matrix-math kernel (class gemm, conv or
-- attention; NULL for other kernels and where the name does not say), the first that matches:
--   'fp8' / 'bf16' / 'fp16'  `e4m3` / `e5m2` / `fp8` / CUTLASS 3 `_f8_f8_`; `bf16` / `bfloat16`;
--           `f16f16`, `h16816`, `h1688`, `hgemm`, `half_t`, `_f16` (cuDNN's generated SDPA kernels write `f16` for
--           both 16-bit formats), `hcudnn`; cuBLASLt nvjet kernels by their first type letter
--           (`nvjet_tst` / `nvjet_tss` bf16 in, `nvjet_hsh` fp16, `nvjet_q*` fp8);
--   'tf32'  FP32 data on TF32 tensor cores: `tf32` (cuBLAS `f32f32_tf32f32`, cuDNN, cuBLASLt
--           `nvjet_sss_tf32`), CUTLASS `s1688` (the m16n8k8 TF32 instruction);
--   'int8'  `imma`, `int8`, `i8i8`, `s8s8`;  'fp64'  `dgemm`, `f64`, `double`;
--   'fp32'  FP32 math that TF32 or 16-bit tensor cores do not run: cuBLAS `..._f32f32_f32f32_f32_
--           ..._ffma`, CUTLASS `simt_sgemm`, `*_sgemm_*`, cuDNN `scudnn` (all on the FFMA pipes),
--           and PyTorch's mem-efficient attention `fmha_cutlass[FB]_f32` (FP32 accuracy through
--           three TF32 MMAs per product on sm80+, FFMA before; the TF32 switches leave it as it
--           is, only 16-bit inputs move attention to the flash kernels).
-- The template arguments of helper kernels (splitKreduce_kernel<..., float, ...>, gemv<float>)
-- state the data type, not the math, and give NULL; so does nvjet_sss without `tf32`.
CREATE OR REPLACE MACRO nsa_kernel_math(nsa_name) AS
    CASE
        WHEN nsa_kernel_class(nsa_name) NOT IN ('gemm', 'conv', 'attention') THEN NULL
        WHEN regexp_matches(nsa_name, '(?i)e4m3|e5m2|fp8|_f8_f8_|nvjet_(sm[0-9]+_)?[qe]') THEN 'fp8'
        WHEN regexp_matches(nsa_name, '(?i)bf16|bfloat16|nvjet_(sm[0-9]+_)?t') THEN 'bf16'
        WHEN regexp_matches(nsa_name, '(?i)f16f16|h16816|h1688|hgemm|half_t|c10::half|_fp16|_f16|hcudnn|nvjet_(sm[0-9]+_)?h')
            THEN 'fp16'
        WHEN regexp_matches(nsa_name, '(?i)tf32|s1688') THEN 'tf32'
        WHEN regexp_matches(nsa_name, '(?i)imma|int8|_i8i8|s8s8') THEN 'int8'
        WHEN regexp_matches(nsa_name, '(?i)dgemm|f64|double') THEN 'fp64'
        WHEN regexp_matches(nsa_name, '(?i)ffma|simt_sgemm|_sgemm|sgemm_|f32f32_f32f32|fmha_cutlass[fb]_f32|scudnn') THEN 'fp32'
    END;

-- nsa_kernel_fused(name): true for kernels a fusing compiler generated, which already run a
-- chain of operations as one kernel: Triton (torch.compile's Inductor: triton_poi_ / triton_red_ /
-- triton_per_ / triton_tem_), nvFuser, XLA fusions (`fusion_12`, `loop_add_fusion`; not cuDNN's
-- `cudnn::fusion::` helpers).
CREATE OR REPLACE MACRO nsa_kernel_fused(nsa_name) AS
    coalesce(regexp_matches(nsa_name, '(?i)triton_|nvfuser|(^|_)fusion'), false);
