"""mf-prior-bench's multi-fidelity Hartmann-6, answered line by line (runs in .venv-peers).

    echo '["mfh6_good", 100, [0.2, 0.15, 0.48, 0.28, 0.31, 0.66]]' | .venv-peers/bin/python benchmarks/mfh_oracle.py

Each input line is [benchmark, fidelity z, six coordinates]; each output line the value
mf-prior-bench's own generator gives (to be minimized).  The generators are the ones its
`mfh6_good` / `mfh6_bad` benchmarks build (their bias and noise, 100 fidelities, their default
noise seed), so a point gets the same value here as through `mfpbench.get(...).query`.
"""
from __future__ import annotations

import json
import sys


def generators() -> dict:
    import mfpbench
    return {name: mfpbench.get(name).mfh for name in ("mfh6_good", "mfh6_bad")}


def main() -> None:
    gens = generators()
    for line in sys.stdin:
        name, z, xs = json.loads(line)
        print(repr(float(gens[name](z=int(z), Xs=tuple(float(x) for x in xs)))), flush=True)


if __name__ == "__main__":
    main()
