"""Kernel names that compare across tools and versions.

`nsa_kernel_key` (queries/ncu/_macros.sql) already makes nsys's and ncu's spellings of one
kernel equal: no namespaces, no literal casts, no whitespace. A PyTorch profiler (Kineto) trace
demangles with the C++ ABI's demangler instead, which spells the same kernel differently again:
    nsys:   reduce_kernel<128,4,ReduceOp<...::[lambda(float,float)(instance1)]>,...>(T3)
    Kineto: reduce_kernel<128,4,ReduceOp<...::{lambda(float,float)#1}>,...>(ReduceOp<...>)
    nsys:   GammaBetaBackwardCUDAKernelTemplate<float,float,32,32,...>(long,long,constT1*,...)
    Kineto: GammaBetaBackwardCUDAKernelTemplate<float,float,32u,32u,...>(long,long,floatconst*,...)
so a diff's key also spells lambdas one way (`[lambda#1]`), drops every parenthesised group
(parameter lists: template parameter names in one tool, concrete types in the other, `const T&`
or `T const&`), integer-literal suffixes (`32u`, `2ul`), `const` wherever it stands, and the `void` return type of a function
named as a template argument. Two overloads of one kernel share a key; that is the price.
"""

from __future__ import annotations

import re
from functools import lru_cache

_PARAMS = r"\((?:[^()]|\([^()]*\))*\)"
_NSYS_LAMBDA = re.compile(r"\[lambda" + _PARAMS + r"\(instance(\d+)\)\]")
_ABI_LAMBDA = re.compile(r"\{lambda" + _PARAMS + r"#(\d+)\}")
_GROUP = re.compile(r"\([^()]*\)")
_INT_SUFFIX = re.compile(r"(?<=[<,(])(-?\d+)[uUlL]+(?=[,>)])")
_VOID_ARG = re.compile(r"(?<=[<,])void(?=[A-Za-z_])")
# `const float*` / `float const*` with the spaces gone: `constfloat*` / `floatconst*`
_CONST = re.compile(r"(?<=[<,])const(?=[A-Za-z_])|const(?=[*&,>])")


@lru_cache(maxsize=4096)
def diff_key(kernel_key: str) -> str:
    """A `nsa_kernel_key` made tool-independent (module doc)."""
    key = _NSYS_LAMBDA.sub(r"[lambda#\1]", kernel_key)
    key = _ABI_LAMBDA.sub(r"[lambda#\1]", key)
    key = _INT_SUFFIX.sub(r"\1", key)
    while True:
        shorter = _GROUP.sub("", key)
        if shorter == key:
            break
        key = shorter
    return _CONST.sub("", _VOID_ARG.sub("", key))
