"""`python -m tests.mutations [NAME]`: run the mask tests under each
mutation (or one), in a fresh interpreter each; see the package docstring."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_one(name):
    """Apply one mutation (or control) in this process, then run the suite:
    pytest's exit status (0 passed, 1 some test failed)."""
    from hypothesis import Phase, settings

    from tests.mutations import CONTROLS, MUTATIONS, suite

    # A failing example is enough: no shrinking, which can take minutes.
    settings.register_profile("mutate", phases=[Phase.explicit, Phase.reuse, Phase.generate])
    settings.load_profile("mutate")
    {**CONTROLS, **MUTATIONS}[name]()
    import pytest

    stop_at_first = [] if name in CONTROLS else ["-x"]
    paths, select = suite(name)
    return pytest.main(["-q", "-p", "no:cacheprovider", *(["-k", select] if select else []), *stop_at_first, *paths])


def run_all():
    from tests.mutations import CONTROLS, MUTATIONS

    rows, controls_ok, all_caught = [], True, True
    for name in [*CONTROLS, *MUTATIONS]:
        start = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "tests.mutations", name], cwd=ROOT, capture_output=True,
                                text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        seconds = time.monotonic() - start
        failed = re.findall(r"^FAILED (\S+)", result.stdout, flags=re.M)
        if name in CONTROLS:
            verdict = "passes (as it must)" if result.returncode == 0 else "FAILS: the mask tests fail unbroken code"
            controls_ok &= result.returncode == 0
        elif result.returncode == 1 and failed:
            verdict = f"caught by {failed[0].split('::')[-1].split('[')[0]}"
        else:
            verdict = f"NOT CAUGHT (pytest exit status {result.returncode})"
            all_caught = False
        rows.append((name, verdict))
        print(f"{name:28s} {verdict}  [{seconds:.0f} s]", flush=True)
        if result.returncode not in (0, 1):
            print(result.stdout[-2000:], result.stderr[-2000:], sep="\n")
    caught = sum(verdict.startswith("caught") for _, verdict in rows)
    print(f"\n{caught} of {len(MUTATIONS)} mutations caught; the controls {'pass' if controls_ok else 'FAIL'}.")
    return 0 if controls_ok and all_caught else 1


if __name__ == "__main__":
    sys.exit(run_one(sys.argv[1]) if len(sys.argv) > 1 else run_all())
