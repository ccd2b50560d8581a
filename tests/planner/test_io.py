"""planner.io and the CLI's outputs: capped reads, nesting, file modes, output folders, no NaN in sweep output."""

import json
import os
import stat

import pytest

from planner.cli import main
from planner.errors import PlannerError
from planner.io import atomic_write_text, parse_json_text, parse_yaml_text, read_text


def test_read_is_capped_on_an_endless_file():
    # /dev/zero never ends: the read stops one byte past the limit and says so, instead of exhausting memory
    with pytest.raises(PlannerError, match="larger than the 1 MiB read limit"):
        read_text("/dev/zero", "spec", limit=1024 * 1024)


def test_binary_file_is_one_line(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(PlannerError, match="not UTF-8"):
        read_text(p)


def test_deep_nesting_is_one_line():
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(PlannerError, match="nested too deeply|expected a JSON object"):
        parse_json_text(deep, "config.json")
    with pytest.raises(PlannerError):
        parse_yaml_text("a: " + "[" * 100_000, "spec.yaml")


def test_written_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        p = tmp_path / "out.csv"
        atomic_write_text(p, "a,b\n")
        # 0o666 & ~0o022 = 0o644, what open(p, "w") gives; the temp file alone would be 0o600
        assert stat.S_IMODE(p.stat().st_mode) == 0o644
        os.chmod(p, 0o640)
        atomic_write_text(p, "a,b\n1,2\n")  # a replaced file keeps its own mode
        assert stat.S_IMODE(p.stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_out_into_a_missing_folder_is_one_line(tmp_path, capsys):
    target = tmp_path / "no" / "such" / "x.csv"
    code = main(["sweep", "--models", "llama-2-7b", "--hardware", "a100-40gb-sxm", "--out", str(target)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "does not exist" in err
    assert not (tmp_path / "no").exists()  # no folder tree created
    # checked before the work: a context past the model's maximum (a warning once the sweep ran) prints nothing
    # before the error (fuzz seed 3030 found the warnings first, three stderr lines)
    code = main(["sweep", "--models", "llama-2-7b", "--hardware", "a100-40gb-sxm", "--prompt", "131072",
                 "--out", str(target)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: cannot write") and "warning" not in err


@pytest.mark.parametrize("ext", ["md", "json", "csv", None])
def test_sweep_rows_that_do_not_fit_say_so_without_nan(tmp_path, capsys, ext):
    # Llama-2-7B fp16 weights alone are 13.48 GB > an RTX 3060's 12 GB: that row does not fit
    argv = ["sweep", "--models", "llama-2-7b", "--hardware", "a100-40gb-sxm,rtx-3060-12gb", "--batch", "1,64"]
    out = tmp_path / f"grid.{ext}"
    code = main(argv + (["--out", str(out)] if ext else []))
    text = out.read_text() if ext else capsys.readouterr().out
    assert code == 0
    assert "nan" not in text.lower() and "does not fit: needs" in text
    if ext == "json":
        rows = json.loads(text)
        bad = [r for r in rows if not r["fits"]]
        assert bad and all(r["ttft_ms"] is None and r["verdict"].startswith("does not fit") for r in bad)


@pytest.mark.parametrize("flag,value", [("-b", "99999999999"), ("-p", "0"), ("-o", "-5"), ("-b", "4k"), ("--tp", "1e3")])
def test_counts_out_of_range_are_one_line(capsys, flag, value):
    with pytest.raises(SystemExit) as exc:  # argparse's own exit, through the one-line _Parser.error
        main(["estimate", "-m", "llama-2-7b", "-H", "a100-40gb-sxm", flag, value])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "between 1 and 1,000,000,000" in err


def test_api_counts_have_the_cli_bound():
    # the Python API takes the same 1..1e9 range as the flags: a prompt of 1e20 tokens (a sliding-window model's
    # memory stays bounded, so it would otherwise "fit" beyond any search range) is a one-line error
    from planner import estimate
    with pytest.raises(PlannerError, match="between 1 and 1,000,000,000"):
        estimate("phi-3-mini", "a100-40gb-sxm", prompt=10 ** 20)
