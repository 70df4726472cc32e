"""Make a COSMIC initial-conditions file (CMC's InitialCMCTable) for the CMC workflow example.

A King W0 = 6 cluster of N objects with a Kroupa (2001) mass function from 0.08 to 1 Msun (an
old cluster's stars: stellar evolution, which would remove the massive ones, is not implemented
yet), 10 % primordial binaries, a virial radius of 2 pc and a tidal radius of 40 virial radii,
drawn by COSMIC's own sampler (cosmic-popsynth: pip install 'henon-cmc[dev]'):

    python examples/cosmic/make_king_ic.py king.hdf5 [N]

Then, as in docs/cosmic.md:

    cmc convert-ini examples/cosmic/KingProfile.ini > king.ini
    cmc run king.ini -o runs/king_cosmic
    cmc export runs/king_cosmic --format cmc
"""

import sys

from cosmic.sample.initialcmctable import InitialCMCTable


def main(path: str = "king.hdf5", n: int = 5000) -> None:
    singles, binaries = InitialCMCTable.sampler(
        "cmc", binfrac_model=0.1, primary_model="custom", alphas=[-1.3, -2.3],
        mcuts=[0.08, 0.5, 1.0], ecc_model="thermal",
        porb_model="log_uniform", qmin=0.1, cluster_profile="king", w_0=6, met=0.0002,
        size=n, seed=12, virial_radius=2.0, tidal_radius=40.0)
    InitialCMCTable.write(singles, binaries, filename=path)
    print(f"wrote {path}: {n} objects, {len(binaries)} binaries")


if __name__ == "__main__":
    main(*(sys.argv[1:2] or ["king.hdf5"]), *[int(a) for a in sys.argv[2:3]])
