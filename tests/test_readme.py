"""Every command of the README runs, as a new user pastes it: the ```bash and ```python blocks, in order, in one
fresh folder (so a later command can read the file an earlier one wrote). Skipped: the install commands (CI has
just run them), the lock and drift commands (`pip-compile`, `bash .ci/newest`) and `pytest` itself. Nothing in the
README needs a GPU; a command that did would say `# needs a GPU` and be skipped here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP_PREFIXES = ("python3 -m venv", "pip install", "pip-compile", "bash .ci/", "apt-get", "pytest")
BLOCK = re.compile(r"^```(bash|python)\n(.*?)^```", re.M | re.S)


def readme_steps(text: str) -> list[tuple[str, str]]:
    """(kind, code) in README order: one step per bash command (continuation lines joined), one per python block."""
    steps = []
    for kind, body in BLOCK.findall(text):
        if kind == "python":
            steps.append(("python", body))
            continue
        for command in body.replace("\\\n", " ").splitlines():
            command = command.strip()
            if not command or command.startswith("#") or command.startswith(SKIP_PREFIXES):
                continue
            if "# needs a GPU" in command:
                continue
            steps.append(("bash", command))
    return steps


def test_the_readme_has_commands_to_run():
    steps = readme_steps((ROOT / "README.md").read_text())
    assert any(c.startswith("preflight analyze zoo:resnet50") for _, c in steps)  # the quick start's main job
    assert sum(k == "python" for k, _ in steps) >= 2


def test_every_readme_command_runs(tmp_path):
    steps = readme_steps((ROOT / "README.md").read_text())
    for name in ("examples",):  # commands refer to the repository's examples as a clone has them
        (tmp_path / name).symlink_to(ROOT / name)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
    }
    for i, (kind, code) in enumerate(steps):
        if kind == "python":
            script = tmp_path / f"readme_block_{i}.py"
            script.write_text(code)
            args = [sys.executable, str(script)]
        else:
            args = ["bash", "-c", code]
        proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            pytest.fail(f"README {kind} step failed (exit {proc.returncode}): {code[:200]}\n{proc.stderr[-2000:]}")
