"""Binary-single scattering with the few-body engine: outcomes and cross sections.

Run from the repository root: ``.venv/bin/python examples/scatter.py [N] [v/v_c]``.
Equal-mass hard circular binary (a = 1, m = 1) and a single of mass 1, CMC's pericentre cap
r_p = 2a; prints the outcome counts, the exchange cross section and one outcome in full.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parallel.streams import Streams  # noqa: E402
from physics import fewbody as fb  # noqa: E402


def main(n: int = 200, v_over_vc: float = 0.1) -> None:
    binary = fb.binary((0, 1), (1.0, 1.0), a=1.0, e=0.0)
    single = fb.single(2, 1.0)
    v_inf = v_over_vc * fb.critical_velocity(binary, single)
    states = Streams.create(seed=1, n_streams=1, n_substreams=n).states[0]
    outcomes = [fb.scatter(binary, single, v_inf, 2.0, states, i) for i in range(n)]
    print(Counter(o.kind for o in outcomes))
    b_max = fb.pericentre_impact_parameter(3.0, v_inf, 2.0)
    n_ex = sum(o.kind == "exchange" for o in outcomes)
    print(f"sigma_ex (v/v_c)^2 = {n_ex / n * b_max ** 2 * v_over_vc ** 2:.2f} pi a^2 "
          f"(r_p <= 2a; HHM96 fit 3.9)")
    o = next(o for o in outcomes if o.kind == "exchange")
    print(o.hierarchy, f"dE_internal = {o.de_internal:.4f}, energy error {o.de_rel:.1e}")
    for p in o.products:
        print(f"  ids {p.ids}: m = {p.m}, a = {p.a:.4f}, e = {p.e:.4f}, v_inf = {p.v_inf}")


if __name__ == "__main__":
    main(*(int(sys.argv[1]),) if len(sys.argv) > 1 else (),
         **({"v_over_vc": float(sys.argv[2])} if len(sys.argv) > 2 else {}))
