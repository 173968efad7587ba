import json
import subprocess
import sys


def test_info_reports_every_section_as_json():
    out = subprocess.run([sys.executable, "-m", "cupric", "info", "--json"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    info = json.loads(out)
    assert set(info) >= {"driver", "toolchain", "libraries", "cache_dir", "packages"}
    assert isinstance(info["driver"]["available"], bool)
    if not info["driver"]["available"]:
        assert info["driver"]["reason"]
    for name in ("cuBLAS", "cuRAND", "cuDNN", "OptiX"):
        assert name in info["libraries"]


def test_unknown_command_exits_2():
    proc = subprocess.run([sys.executable, "-m", "cupric", "frobnicate"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown command" in proc.stderr
