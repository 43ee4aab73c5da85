"""Which bits each MatMul gets in ``weightonly``: the LM head on its own, 8-bit layers among 4-bit ones.

* ``lm_head=float|int8|int4`` treats the MatMul writing the logits apart (:func:`decoder.lm_head`);
* ``keep8`` (names or patterns), ``sensitive8=N`` (the N MatMuls with the largest 4-bit weight error,
  :func:`decoder.weight_error_ranking`) and ``sensitive8_share=F`` (that share of the MatMuls) put layers at
  8 bits among 4-bit ones: mixed precision per layer;
* a tied embedding table then reads the quantized LM head's blocks (:func:`decoder.share_tied_table`).

The grids a search tries on decoders (graph family ``"decoder"``) are here too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from onnxlite import QuantizeOutcome, UsageError

from .common import expand_node_patterns
from .decoder import lm_head, odd_block_nodes, share_tied_table, tied_table, weight_error_ranking


def plan_bits(proto, model: Path, s: dict[str, Any], algorithm: str, matmuls: list[str]) -> dict[str, int | None]:
    """Bits per MatMul: ``bits`` for all, 8 for ``keep8`` and the ``sensitive8`` worst (weight-error ranking),
    the LM head as ``lm_head`` says (None: left float)."""
    plan: dict[str, int | None] = {n: s["bits"] for n in matmuls}
    eights = set(expand_node_patterns(matmuls, s["keep8"], option="keep8", what="MatMul node")) if s["keep8"] \
        else set()
    head = lm_head(proto, matmuls)
    if s["lm_head"] != "same" and head is None:
        raise UsageError(f"--option lm_head={s['lm_head']}: {model} has no MatMul writing its logits "
                         "(an LM head)")
    share = s.get("sensitive8_share", 0.0)
    if not 0.0 <= share <= 1.0:
        raise UsageError(f"--option sensitive8_share={share}: expected a fraction between 0 and 1")
    if (eights or s["sensitive8"] > 0 or share > 0) and s["bits"] == 8:
        raise UsageError("--option keep8/sensitive8 need bits=4 (every MatMul is 8-bit already)")
    count = max(s["sensitive8"], round(share * len(matmuls)))
    if count > 0:
        ranked = [n for n in weight_error_ranking(proto, matmuls, s["block_size"], s["symmetric"],
                                                  str(Path(model).parent)) if n != head or s["lm_head"] == "same"]
        eights.update(ranked[:count])
        s["sensitive8"] = count
    plan.update({n: 8 for n in eights})
    if head is not None and s["lm_head"] != "same":
        plan[head] = {"float": None, "int8": 8, "int4": 4}[s["lm_head"]]
    s["head"] = head
    tied = tied_table(proto, head)
    s["tied"] = tied.name if tied is not None else None
    if algorithm == "kquant" or (algorithm == "gptq" and not s["symmetric"]):
        odd = odd_block_nodes(proto, [n for n, b in plan.items() if b == 4], s["block_size"])
        if odd:
            raise UsageError(f"--option block_size={s['block_size']} with {algorithm}: {len(odd)} MatMul(s) "
                             f"(e.g. {odd[0]}) have an odd number of blocks along K, which onnxruntime 1.32's "
                             "packer of 4-bit zero points cannot write; use a block size that divides K into an "
                             "even count (32 usually does)" + (" or symmetric=true" if algorithm == "gptq" else ""))
    return plan


def share_tied(proto, s: dict[str, Any], plan: dict[str, int | None]) -> str | None:
    """A tied embedding table (Gather of the LM head's weight transposed) reads the quantized LM head's blocks
    when ``gather`` asks for a quantized table; returns the note to add, or None."""
    table = s.get("tied") if s["gather"] != "float" else None
    if table is None:
        return None
    if plan.get(s["head"]) is None:
        return "the tied embedding table stays float: the LM head it shares is float (lm_head=float)"
    why = share_tied_table(proto, table, s["head"], _hidden(proto, s["head"]))
    if why:
        return f"the tied embedding table stays float: {why}"
    return (f"the tied embedding table reads the LM head's {plan[s['head']]}-bit blocks (GatherBlockQuantized; "
            "one copy of the weights)")


def _hidden(proto, head: str) -> int:
    node = next(n for n in proto.graph.node if n.op_type == "MatMulNBits" and n.name.rsplit("_Q", 1)[0] == head)
    return next(int(a.i) for a in node.attribute if a.name == "K")


def with_plan(outcome: QuantizeOutcome, s: dict[str, Any], plan: dict[str, int | None],
              shared: str | None) -> QuantizeOutcome:
    """The outcome with the plan's notes and details: the 8-bit MatMuls, the LM head, the tied table."""
    eights = sorted(n for n, b in plan.items() if b == 8 and s["bits"] == 4)
    notes = list(outcome.notes)
    if eights:
        why = [w for w, on in (("keep8", s["keep8"]), (f"the {s['sensitive8']} largest 4-bit weight errors",
                                                         s["sensitive8"]), ("lm_head=int8", s["lm_head"] == "int8"))
               if on]
        notes.append(f"{len(eights)} MatMul(s) at 8 bits ({', '.join(why)}): " + ", ".join(eights[:4])
                     + (" ..." if len(eights) > 4 else ""))
    if s.get("head") and s["lm_head"] != "same":
        notes.append(f"LM head {s['head']}: {s['lm_head']}")
    if shared:
        notes.append(shared)
    details = dict(outcome.details, lm_head=s["lm_head"] if s.get("head") else "none",
                   eight_bit=eights, tied_table="shared" if shared and "reads" in shared else "float")
    return QuantizeOutcome(excluded_nodes=outcome.excluded_nodes, notes=notes, details=details)


#: shares of the MatMuls at 8 bits (the largest 4-bit weight errors) that the decoder grid tries: a share, not a
#: count, so the same points fit a 2-layer test model and a 30-layer one
SENSITIVE8_SHARES = (0.5, 0.25)


def _decoder_grid() -> tuple[dict[str, Any], ...]:
    """The weight-only grid a search tries on decoders, the likely winners first (a search cut short by its
    time budget has judged them): 8-bit weights, then mixed 4/8-bit with the most sensitive layers at 8 bits
    and an 8-bit LM head (4-bit heads have caused repetition), then uniform 4-bit points as the LLM tools write
    them (onnxruntime-genai's builder, Olive): rtn symmetric and asymmetric at blocks of 32, 64 and 128, k-quant
    and hqq at 32 (larger k-quant blocks leave an odd block count on K = 576, SmolLM2's, which its packer cannot
    write); accuracy level 4 (int8 compute, the fast path), and level 0 (float compute) at blocks of 32.
    Tables quantized: a tied table shares the LM head's blocks."""
    b32 = {"bits": 4, "block_size": 32, "symmetric": True, "accuracy_level": 4, "gather": "int4"}
    grid: list[dict[str, Any]] = [{"bits": 8, "block_size": 128, "accuracy_level": 4, "gather": "int8"}]
    grid += [b32 | {"lm_head": "int8", "sensitive8_share": share} for share in SENSITIVE8_SHARES]
    grid.append(b32 | {"lm_head": "int8"})
    for block in (32, 64, 128):
        for symmetric in (True, False):
            grid += [{"bits": 4, "block_size": block, "symmetric": symmetric, "accuracy_level": level,
                      "gather": "int4"} for level in ((4, 0) if block == 32 else (4,))]
    grid += [{"bits": 4, "algorithm": "kquant", "block_size": 32, "accuracy_level": 4, "gather": "int4"},
             {"bits": 4, "algorithm": "hqq", "block_size": 32, "accuracy_level": 0, "gather": "int4"}]
    return tuple(grid)


#: what a search tries on a decoder (graph family "decoder") instead of the encoder grid
DECODER_GRID = _decoder_grid()
#: gptq on a decoder (calibrated on token windows): each point quantizes for minutes on a 135M model, so only
#: blocks of 32 (symmetric or not) and of 128, at level 4
GPTQ_DECODER_GRID = ({"block_size": 32, "symmetric": True, "accuracy_level": 4},
                     {"block_size": 32, "symmetric": False, "accuracy_level": 4},
                     {"block_size": 128, "symmetric": True, "accuracy_level": 4})
