"""Notebook 00 (your machine's ceilings): its verdicts, its memory-bound check and its sentences."""

from __future__ import annotations

from dataclasses import dataclass

from brrr import counting, essay
from brrr.ceilings import Ceilings, describe_copy, measured_again
from brrr_book.claims import glue_text, judge_matmul_gap, judge_three_regimes, publish
from brrr.roofline import regime, require_memory_bound


@dataclass
class Page:
    """What notebook 00 measured and counted."""

    ceilings: Ceilings  # the roofs, the copy ceiling as the page's sweep left it
    ops: list[tuple[counting.OpCount, str]]  # each counted op and the roof it meets
    ridges: str  # the two ridge points, as the page printed them

    def regimes(self) -> dict[str, str]:
        """Each op's regime against this machine's roof of its kind."""
        return {
            op.name: str(regime(op.flops, op.bytes, self.ceilings.roof(kind)))
            for op, kind in self.ops
        }


def finish(page: Page) -> None:
    """Publish the three-regimes and matmul-gap claims, check that layer norm and softmax are
    memory-bound (a vector roof read low is measured again; a miss fails the build), glue."""
    ceilings, regimes = page.ceilings, page.regimes()
    publish(
        judge_three_regimes(regimes["x * 2, 1 element"], regimes["x * 2"], regimes["matmul 4096^3"])
    )
    best = max(ceilings.matmul_peak, key=ceilings.matmul_peak.get)
    publish(
        judge_matmul_gap(
            ceilings.matmul_peak[best], ceilings.vector_peak, measured=ceilings.setting(best)
        )
    )
    # "far left of the non-matmul ridge point": layer norm and softmax memory-bound by their counts
    normalization = {op.name: op for op, _ in page.ops if op.name in ("layer norm", "softmax")}
    if require_memory_bound(
        normalization, ceilings.roof("vector"), lambda: measured_again(ceilings).roof("vector")
    ):
        print("layer norm and softmax: memory-bound on this machine's roofs")
    glue_text("ridges", page.ridges)
    glue_text(
        "regimes",
        (
            f"Here the one-element x * 2 came out {regimes['x * 2, 1 element']}, the large x * 2 "
            f"{regimes['x * 2']} and the 4096^3 matmul {regimes['matmul 4096^3']}."
        ),
    )
    # For other pages' prose: this machine's copy bandwidth, the A100's lead.
    glue_text(
        "copy-bandwidth",
        describe_copy(ceilings.copy_bandwidth, threads=ceilings.threads, way=ceilings.copy_way),
    )
    glue_text("a100-bandwidth-lead", f"{essay.A100['bandwidth'] / ceilings.copy_bandwidth:,.0f}x")
