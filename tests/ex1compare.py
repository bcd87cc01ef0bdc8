#!/usr/bin/env python3
"""tutorials/ex1.py against tutorials/ex1.c: the same problems give the same
summary line, the same KSP iterations and the same error to rounding.

Runs both programs on each problem below (one process each, from the
repository root; tutorials/ex1 must be built) and compares their summary
lines: N and the matrix type equal, iterations equal, and the errors within
2% of each other plus 2e-15 (the programs evaluate the curves' sines and
cosines with NumPy and with the C library, which differ in the last bit;
the errors agree to three or four digits).  Prints one line per problem
without the numbers (they depend on the machine: the FMM sums in its own
order on the GPU), and the numbers to tests/results/ex1compare.txt.
"""

import os
import re
import subprocess
import sys

PROBLEMS = [
    "",
    "-n 1000 -curve ellipse",
    "-n 3000 -star_a 0.3 -star_k 7 -mat_fmm_eps 1e-12 -ksp_rtol 1e-12",
    "-mat_type dense",
    "-problem exterior -bodies 4 -n 200",
    "-problem exterior -bodies 9 -n 128 -mat_fmm_eps 1e-12 -ksp_rtol 1e-11",
]
SUMMARY = re.compile(r"^summary: N=(\d+) type=(\S+) its=(\d+) error=(\S+) setup_s=\S+ solve_s=\S+$", re.M)


# this script may run under mpiexec (bin/runtests): its children start MPI on their own, without the job's variables
KEEP = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMPI_MCA_rmaps_base_oversubscribe")
ENV = {k: v for k, v in os.environ.items() if k in KEEP or not k.startswith(("OMPI_", "PMIX_", "PMI_"))}


def summary(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, env=ENV)
    m = SUMMARY.search(p.stdout)
    if p.returncode or not m:
        raise RuntimeError("%s failed (exit %d):\n%s" % (" ".join(cmd), p.returncode, p.stdout[-2000:]))
    return int(m.group(1)), m.group(2), int(m.group(3)), float(m.group(4)), m.group(0)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    env_py = [sys.executable, "tutorials/ex1.py"]
    failed = 0
    os.makedirs("tests/results", exist_ok=True)
    with open("tests/results/ex1compare.txt", "w") as log:
        for args in PROBLEMS:
            a = args.split()
            c = summary(["./tutorials/ex1"] + a)
            p = summary(env_py + a)
            log.write("%s\n  ex1.c:  %s\n  ex1.py: %s\n" % (args or "(defaults)", c[4], p[4]))
            same = c[:3] == p[:3]
            close = abs(c[3] - p[3]) <= 0.02 * max(c[3], p[3]) + 2e-15
            verdict = "agree" if same and close else "DIFFER"
            failed += verdict != "agree"
            print("%s: %s: N=%d type=%s, iterations %s, errors %s" % (args or "(defaults)", verdict, c[0], c[1],
                  "equal" if c[2] == p[2] else "%d against %d" % (c[2], p[2]), "agree" if close else "%g against %g" % (c[3], p[3])))
    print("ex1.c and ex1.py: %d of %d problems differ" % (failed, len(PROBLEMS)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""
/*TEST
  test:
    timeoutfactor: 2
TEST*/
"""
