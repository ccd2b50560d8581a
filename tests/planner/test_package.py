"""The core stays light: no torch, streamlit, altair, pandas or validate on `import planner`."""

import subprocess
import sys

import planner


def test_import_planner_is_light():
    code = ("import sys, planner; from planner import estimate; estimate('llama-2-7b', 'l4'); "
            "print(' '.join(m for m in ('torch', 'streamlit', 'altair', 'pandas', 'validate', 'triton') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


def test_public_surface():
    assert sorted(planner.__all__) == ["Estimate", "PlannerError", "estimate"]
    for name in planner.__all__:
        assert hasattr(planner, name)
