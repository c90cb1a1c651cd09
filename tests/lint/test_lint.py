#!/usr/bin/python3
"""scripts/lint.sh, the house rules' gate, on trees made for it (not on the checkout:
that is scripts/test.sh's lint stage). Each test would pass if the gate let through
what it must stop, or stopped what it must let through:

- format: a misformatted file fails the check and is listed, a formatted one is not;
  with it fixed the check passes; tests/fuzz/corpus/ is not looked at;
- format after `clang-format -i` of every C file of the checkout's src/, include/ and
  tests/ (what the house does to fix drift): the gate passes, so .clang-format and
  the gate agree (headers included) and formatting is stable;
- tidy: a seeded use after free, and a seeded unchecked conversion (cert-err34-c),
  each fail with the check's name and the line; a clean file passes; the same
  conversion in tests/ passes (tests/.clang-tidy leaves cert-err34-c out).
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

GOOD = """int f(int a)
{
    return a + 1;
}
"""
BAD = "int f(int a){return a+1;}\n"
UAF = """#include <stdlib.h>

int g(void)
{
    char *p = malloc(4);
    if (!p)
        return 0;
    p[0] = 1;
    free(p);
    return p[0];
}
"""
ATOI = """#include <stdlib.h>

int h(const char *s)
{
    return atoi(s);
}
"""


class LintGate(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="pcrfs-lint-")
        os.makedirs(os.path.join(self.tmp, "scripts"))
        for f in (".clang-format", ".clang-tidy", "tests/.clang-tidy", "scripts/lint.sh"):
            os.makedirs(os.path.dirname(os.path.join(self.tmp, f)), exist_ok=True)
            shutil.copy(os.path.join(ROOT, f), os.path.join(self.tmp, f))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def put(self, rel, text):
        p = os.path.join(self.tmp, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
        return p

    def lint(self, *args):
        return subprocess.run(["bash", os.path.join(self.tmp, "scripts", "lint.sh")] +
                              list(args), capture_output=True, text=True, timeout=600)

    def test_format(self):
        self.put("src/good.c", GOOD)
        self.put("include/pcrfs/good.h", "#ifndef G_H\n#define G_H\nint f(int a);\n#endif\n")
        bad = self.put("src/lib/bad.c", BAD)
        self.put("tests/fuzz/corpus/x/seed.c", BAD)  # data, not code
        r = self.lint("format")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        listed = [ln.strip() for ln in r.stdout.splitlines() if ln.startswith("  ")]
        self.assertEqual(listed, ["src/lib/bad.c"], r.stdout)
        with open(bad, "w") as f:
            f.write(GOOD)
        r = self.lint("format")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("3 files", r.stdout)

    def test_format_after_reformat(self):
        # every C file and header of the checkout, reformatted as the house fixes drift
        n = 0
        for top in ("src", "include", "tests"):
            for d, _, files in os.walk(os.path.join(ROOT, top)):
                rel = os.path.relpath(d, ROOT)
                if rel.startswith(os.path.join("tests", "fuzz", "corpus")):
                    continue
                for name in files:
                    if name.endswith((".c", ".h")):
                        os.makedirs(os.path.join(self.tmp, rel), exist_ok=True)
                        shutil.copy(os.path.join(d, name), os.path.join(self.tmp, rel, name))
                        n += 1
        self.assertGreater(n, 50)
        files = [os.path.join(d, f) for d, _, fs in os.walk(self.tmp) for f in fs
                 if f.endswith((".c", ".h")) and "/scripts/" not in d]
        subprocess.run(["clang-format-14" if shutil.which("clang-format-14") else
                        "clang-format", "-i", "--style=file"] + files, check=True,
                       cwd=self.tmp, timeout=600)
        r = self.lint("format")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def tidy(self, sources):
        build = os.path.join(self.tmp, "build")
        os.makedirs(build, exist_ok=True)
        with open(os.path.join(build, "compile_commands.json"), "w") as f:
            json.dump([{"directory": build, "file": os.path.join("..", s),
                        "command": "cc -std=gnu11 -Wall -c ../%s -o x.o" % s}
                       for s in sources], f)
        return self.lint("tidy", build)

    def test_tidy(self):
        self.put("src/ok.c", GOOD)
        self.put("src/uaf.c", UAF)
        self.put("src/conv.c", ATOI)
        r = self.tidy(["src/ok.c", "src/uaf.c", "src/conv.c"])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        summary = r.stdout[r.stdout.rindex("lint tidy:"):]
        self.assertIn("src/uaf.c:10:", summary)
        self.assertIn("clang-analyzer-unix.Malloc", summary)
        self.assertIn("src/conv.c:5:", summary)
        self.assertIn("cert-err34-c", summary)
        self.assertNotIn("src/ok.c", summary)
        # clean files pass; the conversion is allowed in tests/
        self.put("tests/unit/conv.c", ATOI)
        r = self.tidy(["src/ok.c", "tests/unit/conv.c"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("2 files, no finding", r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
