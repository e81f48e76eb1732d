"""Kernel classes, exposed communication and the multi-rank view on synthetic traces."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpulens.analyze.traces.comm import collective_name, communication
from gpulens.analyze.traces.kernels import classify_kernel, kernel_classes
from gpulens.analyze.traces.ranks import analyze_job
from gpulens.app.traces import load_trace_file

from .scenarios import comm_exposed, gpu, launch, rank


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(...)",
            "gemm_tensor_core",
        ),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm_tensor_core"),
        ("volta_h884gemm_64x64_ldg8_nn", "gemm_tensor_core"),
        ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x256_MI16x16x1", "gemm_tensor_core"),
        ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt64x128x32", "gemm_tensor_core"),
        ("volta_sgemm_128x64_nn", "gemm_fp32"),
        ("ampere_sgemm_32x128_tn", "gemm_fp32"),
        ("cudnn_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "gemm_fp32"),
        ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(...)", "gemm_fp32"),
        ("void pytorch_flash::flash_fwd_kernel<...>", "attention"),
        ("fmha_cutlassF_f16_aligned_64x64_rf_sm80", "attention"),
        ("void paged_attention_ll4mi_QKV_mfma16_kernel<0>", "attention"),
        ("attn_fwd", "attention"),
        (
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            "communication",
        ),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "communication"),
        ("void vllm::cross_device_reduce_1stage<half, 8>", "communication"),
        ("triton_poi_fused_add_0", "triton"),
        ("triton__0d1d2d3d", "triton"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
            "elementwise_reduction",
        ),
        (
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>",
            "elementwise_reduction",
        ),
        ("void fbgemm_gpu::permute_2D_data_kernel<false, int, int>", "other"),
        (
            "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>",
            "elementwise_reduction",
        ),
        ("spin_kernel", "other"),
    ],
)
def test_classify_kernel(name: str, expected: str) -> None:
    assert classify_kernel(name) == expected


def test_copies_by_category() -> None:
    assert classify_kernel("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy") == "memcpy_memset"
    assert classify_kernel("Memset (Device)", "gpu_memset") == "memcpy_memset"


def test_kernel_class_shares_and_occupancy(write_trace: Callable[..., Path]) -> None:
    events = [
        launch(0, 1),
        gpu("volta_sgemm_128x64_nn", 10, 30, 1, args={"est. achieved occupancy %": 20}),
        launch(1, 2),
        gpu("volta_sgemm_64x64_nn", 40, 10, 2, args={"est. achieved occupancy %": 60}),
        launch(2, 3),
        gpu("sm80_xmma_gemm_bf16bf16", 50, 40, 3),
        launch(3, 4),
        gpu("Memset (Device)", 90, 20, 4, cat="gpu_memset"),
    ]
    k = kernel_classes(load_trace_file(write_trace(events)))
    assert k.total_ns == 100_000
    fp32 = k.classes["gemm_fp32"]
    assert (fp32.count, fp32.time_ns, fp32.share) == (2, 40_000, 0.4)
    assert fp32.occupancy_pct == pytest.approx((20 * 30 + 60 * 10) / 40)
    assert fp32.top[0] == ("volta_sgemm_128x64_nn", 1, 30_000)
    assert k.classes["gemm_tensor_core"].occupancy_pct is None
    assert k.classes["memcpy_memset"].share == 0.2
    assert k.tensor_core_share_of_gemm == pytest.approx(0.5)
    assert k.occupancy_pct == pytest.approx(30.0)  # copies excluded, unrecorded ignored


def test_exposed_communication(write_trace: Callable[..., Path]) -> None:
    c = communication(load_trace_file(write_trace(comm_exposed())))
    assert (c.comm_ns, c.exposed_ns, c.compute_ns, c.span_ns) == (110_000, 60_000, 100_000, 210_000)
    (allreduce,) = c.collectives
    assert (allreduce.name, allreduce.count, allreduce.total_ns) == ("AllReduce", 2, 110_000)
    assert (allreduce.max_ns, allreduce.exposed_ns) == (100_000, 60_000)
    assert c.overlap_share == pytest.approx(50 / 110)


def test_collective_names() -> None:
    assert collective_name("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)") == "SendRecv"
    assert collective_name("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)") == "Generic"
    assert collective_name("rcclKernel_AllGather_x") == "AllGather"


def test_straggler_across_two_ranks(write_trace: Callable[..., Path]) -> None:
    meta = {"baseTimeNanoseconds": 1}
    paths = [
        write_trace(
            rank(100, 100, 0), "r0.json", distributedInfo={"rank": 0, "world_size": 2}, **meta
        ),
        write_trace(
            rank(190, 10, 1), "r1.json", distributedInfo={"rank": 1, "world_size": 2}, **meta
        ),
    ]
    analyses, cluster = analyze_job([load_trace_file(p) for p in reversed(paths)])
    assert [a.rank for a in analyses] == [0, 1]
    assert cluster.alignment.method == "collective" and cluster.world_size == 2
    assert [r.clock_shift_ns for r in cluster.rows] == [0, 0]
    assert cluster.straggler == 1
    assert cluster.straggler_excess_ns == 90_000
    assert cluster.imbalance == pytest.approx((190 - 145) / 145)
    r0, r1 = cluster.rows
    assert (r0.compute_ns, r0.comm_ns, r1.compute_ns, r1.comm_ns) == (
        100_000,
        100_000,
        190_000,
        10_000,
    )
    assert r0.sync_wait_share == pytest.approx(0.5)


def test_balanced_ranks_have_no_straggler(write_trace: Callable[..., Path]) -> None:
    paths = [write_trace(rank(100, 20, r), f"rank{r}.json") for r in (0, 1)]
    _, cluster = analyze_job([load_trace_file(p) for p in paths])
    assert [r.rank for r in cluster.rows] == [0, 1]  # from the file names
    assert cluster.straggler is None and cluster.imbalance == 0


def _shifted(events: list[dict[str, object]], us: float) -> list[dict[str, object]]:
    return [{**e, "ts": float(str(e["ts"])) + us} if "ts" in e else e for e in events]


def test_ranks_aligned_on_the_first_common_collective(write_trace: Callable[..., Path]) -> None:
    # rank 1's clock runs 5 ms ahead: its all-reduce "ends" at 5200 µs instead of 200 µs
    paths = [
        write_trace(rank(100, 100, 0), "rank0.json"),
        write_trace(_shifted(rank(150, 50, 1), 5000), "rank1.json"),
    ]
    _, cluster = analyze_job([load_trace_file(p) for p in paths])
    assert cluster.alignment.method == "collective" and cluster.alignment.anchor == "AllReduce"
    assert [r.clock_shift_ns for r in cluster.rows] == [0, -5_000_000]
    assert [r.offset_ns for r in cluster.rows] == [0, 0]
    assert cluster.alignment.residual_ns == 0
    doc = cluster.to_dict()
    assert doc["alignment"] == "collective"
    assert [r["clock_shift_us"] for r in doc["per_rank"]] == [0, -5000]
    assert "rank 1 shifted by -5,000.0 µs" in cluster.notes[0]


def test_alignment_without_a_common_collective(write_trace: Callable[..., Path]) -> None:
    compute = [launch(0, 1), gpu("sm80_xmma_gemm_bf16bf16_bf16f32", 0, 100, 1)]
    paths = [
        write_trace(compute, "rank0.json", baseTimeNanoseconds=1),
        write_trace(_shifted(compute, 700), "rank1.json", baseTimeNanoseconds=2),
    ]
    _, cluster = analyze_job([load_trace_file(p) for p in paths])
    assert cluster.alignment.method == "per-rank start"
    assert [r.clock_shift_ns for r in cluster.rows] == [0, -700_000]
    paths[1] = write_trace(_shifted(compute, 700), "rank1.json", baseTimeNanoseconds=1)
    _, cluster = analyze_job([load_trace_file(p) for p in paths])
    assert cluster.alignment.method == "shared clock"
    assert [r.offset_ns for r in cluster.rows] == [0, 700_000]


def test_step_gap_sums_match_the_per_interval_clip() -> None:
    """steps._clipped_sum (prefix sums) equals Σ max(0, min(end, b) − max(start, a)) over
    overlapping intervals (gaps of several devices), at epoch-ns magnitudes too."""
    import numpy as np

    from gpulens.analyze.traces.steps import _clipped_sum

    rng = np.random.default_rng(0)
    for base in (0, 1_700_000_000_000_000_000):
        start = base + rng.integers(0, 10_000, 300)
        end = start + rng.integers(1, 500, 300)
        a = base + rng.integers(-100, 10_100, 200)
        b = a + rng.integers(-50, 3_000, 200)
        want = [
            int(np.clip(np.minimum(end, y) - np.maximum(start, x), 0, None).sum())
            for x, y in zip(a.tolist(), b.tolist(), strict=True)
        ]
        assert _clipped_sum(start, end, a, b).tolist() == want
