"""What jik876/hifi-gan's generator (and the copies of it in openvpi/SingingVocoders, DiffSinger, so-vits-svc)
can build from a ``config.json``: the contract an export in their layout must meet, read from their layout.

Their ``ResBlock1`` builds ``convs1`` as three convolutions with ``dilation[0]``, ``dilation[1]`` and
``dilation[2]`` and ``convs2`` as three plain ones; ``ResBlock2`` builds two with ``dilation[0]`` and
``dilation[1]``. A block list of another length stops their constructor (``IndexError`` at ``dilation[2]``)
or, longer, leaves our extra convolutions without a place in their state dict. Their ``Generator`` zips
``resblock_kernel_sizes`` with ``resblock_dilation_sizes`` and ``upsample_rates`` with
``upsample_kernel_sizes``, and chooses ``ResBlock1`` for ``resblock == "1"``, else ``ResBlock2``.
"""

from __future__ import annotations

from collections.abc import Sequence

#: dilations per residual block their classes index, by ``resblock``
DILATIONS_PER_BLOCK = {"1": 3, "2": 2}
#: what a recipe writes so their ResBlock can hold it (the published V1 / V3 blocks)
PUBLISHED_DILATIONS = {"1": [1, 3, 5], "2": [1, 3]}


def resblock_problems(
    resblock: str,
    kernel_sizes: Sequence[int],
    dilation_sizes: Sequence[Sequence[int]],
    upsample_rates: Sequence[int],
    upsample_kernel_sizes: Sequence[int],
) -> list[str]:
    """Why their generator cannot hold a generator of this shape (empty: it can), each with the recipe change."""
    resblock = str(resblock)
    if resblock not in DILATIONS_PER_BLOCK:
        return [f"model.resblock={resblock!r}: their generator has ResBlock1 ('1') and ResBlock2 ('2') only"]
    want = DILATIONS_PER_BLOCK[resblock]
    problems = []
    wrong = [(i, list(d)) for i, d in enumerate(dilation_sizes) if len(d) != want]
    if wrong:
        i, d = wrong[0]
        fix = str([list(PUBLISHED_DILATIONS[resblock]) for _ in kernel_sizes]).replace(" ", "")
        problems.append(
            f"model.resblock_dilation_sizes[{i}]={d}: their ResBlock{resblock} reads exactly {want} dilations per "
            f"block (dilation[0..{want - 1}]; {len(wrong)} of {len(dilation_sizes)} block(s) differ); train with "
            f"model.resblock_dilation_sizes={fix}"
        )
    if len(kernel_sizes) != len(dilation_sizes):
        problems.append(
            f"model.resblock_kernel_sizes has {len(kernel_sizes)} entries, model.resblock_dilation_sizes "
            f"{len(dilation_sizes)}: their generator zips them; give one dilation list per kernel size"
        )
    if len(upsample_rates) != len(upsample_kernel_sizes):
        problems.append(
            f"model.upsample_rates has {len(upsample_rates)} entries, model.upsample_kernel_sizes "
            f"{len(upsample_kernel_sizes)}: their generator zips them; give one kernel size per rate"
        )
    return problems
