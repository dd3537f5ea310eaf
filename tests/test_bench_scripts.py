"""Options of the comparison scripts in ``bench/`` that decide what is measured (each checked
in a subprocess: importing a bench script sets the process's thread limits)."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=os.path.join(ROOT, "bench"),
                          capture_output=True, text=True, timeout=120)


def test_gpt_step_dims_replace_the_sizes_named():
    out = _run("import argparse, gpt_step\n"
               "a = argparse.Namespace(size='small', dims='vocab=5000,heads=6,dim=192')\n"
               "print(gpt_step.sized(a))\n"
               "print(gpt_step.sized(argparse.Namespace(size='tiny', dims=None)))")
    assert out.returncode == 0, out.stderr
    held, tiny = out.stdout.strip().splitlines()
    assert held == ("('custom', {'vocab': 5000, 'dim': 192, 'heads': 6, 'layers': 4, "
                    "'context': 256, 'batch': 8})")
    assert tiny == ("('tiny', {'vocab': 1024, 'dim': 128, 'heads': 4, 'layers': 2, "
                    "'context': 128, 'batch': 8})")


def test_gpt_step_dims_refuse_what_is_not_a_size():
    for dims, says in (("depth=3", "KEY one of vocab"), ("vocab=0", "positive"),
                       ("heads=5", "not a multiple of heads 5")):
        out = _run("import argparse, gpt_step\n"
                   f"gpt_step.sized(argparse.Namespace(size='small', dims={dims!r}))")
        assert out.returncode != 0 and says in out.stderr, (dims, out.stderr)
