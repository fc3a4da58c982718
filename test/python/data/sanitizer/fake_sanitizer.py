#!/usr/bin/env python3
"""A stand-in for compute-sanitizer in test_sanitize_tool.py: prints a fixture of its tool and exits as
the real one would. The bundle's folder (the last argument) may hold fake_outcome.json,
{"TOOL": ["FIXTURE.txt", EXIT STATUS] or ["sleep", SECONDS]}; other tools print TOOL_clean.txt, exit 0."""
import json
import sys
import time
from pathlib import Path

if "--version" in sys.argv:
    print("NVIDIA (R) Compute Sanitizer\nVersion 2099.1.0 (fake)")
    sys.exit(0)
tool = sys.argv[sys.argv.index("--tool") + 1]
outcome = Path(sys.argv[-1]) / "fake_outcome.json"
fixture, value = (json.loads(outcome.read_text()) if outcome.is_file() else {}).get(tool, (f"{tool}_clean.txt", 0))
if fixture == "sleep":
    time.sleep(value)
    sys.exit(0)
sys.stdout.write((Path(__file__).parent / fixture).read_text())
sys.exit(value)
