"""Other libraries' output during a stage lands in its log file, never on the terminal; nothing is lost."""

from __future__ import annotations

import io
import logging
import sys
import threading
import warnings
from pathlib import Path

import pytest
from tqdm import tqdm

from edgekit.backends.child import run_logged
from edgekit.errors import StageError
from edgekit.observe import stagelog
from edgekit.observe.notices import NOTABLE, notable

MISTRAL = (
    "The tokenizer you are loading from '/m' with an incorrect regex pattern: https://huggingface.co/x. This will "
    "lead to incorrect tokenization. You should set the `fix_mistral_regex=True` flag when loading this tokenizer"
)


def test_warnings_records_prints_and_bars_go_to_the_log_and_everything_is_put_back(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    library = logging.getLogger("a_library")
    own_handler = logging.StreamHandler(sys.stderr)  # prints to the terminal itself, as huggingface_hub does
    library.addHandler(own_handler)
    streams = (sys.stdout, sys.stderr)
    with stagelog.capture(tmp_path / "stage.log"), warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a library warning", UserWarning, stacklevel=1)
        library.warning("a library record")
        print("a stray print")
        for _ in tqdm(range(3), desc="a progress bar"):
            pass
        sys.stderr.write("Writing: 100%\n")
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    text = (tmp_path / "stage.log").read_text()
    for line in ("a library warning", "WARNING a_library: a library record", "a stray print", "a progress bar",
                 "Writing: 100%"):  # fmt: skip
        assert line in text, text
    assert (sys.stdout, sys.stderr) == streams and library.handlers == [own_handler]
    library.removeHandler(own_handler)


def test_transformers_mistral_regex_warning_goes_to_the_log_and_becomes_one_notice(tmp_path: Path) -> None:
    """transformers 4.57 warns about Mistral's regex for any local tokenizer over 100k tokens (a Gemma GGUF's, say)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    from transformers.utils import logging as tf_logging

    vocab = {f"t{i}": i for i in range(100_001)} | {"[UNK]": 100_001}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]").save_pretrained(tmp_path / "tok")
    (tmp_path / "tok" / "config.json").write_text('{"model_type": "gemma3_text", "transformers_version": "4.57.6"}')
    propagates = logging.getLogger("transformers").propagate  # transformers sets it from the CI variable
    with stagelog.capture(tmp_path / "stage.log") as log:
        AutoTokenizer.from_pretrained(tmp_path / "tok")
        tf_logging.get_logger("transformers.tokenization_utils_base").warning(MISTRAL)  # said twice: shown once
    assert "fix_mistral_regex" in (tmp_path / "stage.log").read_text()
    assert log.notices == [NOTABLE[0].say] and "[model] tokenizer" in log.notices[0]
    assert logging.getLogger("transformers").propagate == propagates  # transformers' own setting is back


def test_a_nameless_capture_is_read_back_whole(tmp_path: Path) -> None:
    with stagelog.capture() as log:
        print("first")
        logging.getLogger("lib").warning("second")
        assert log.text() == "first\nWARNING lib: second\n"
        print("third")
        assert log.text().endswith("third\n") and log.path is None


def test_each_thread_writes_into_its_own_stage_log_and_helpers_into_the_outer_one(tmp_path: Path) -> None:
    def stage(name: str) -> None:
        with stagelog.capture(tmp_path / f"{name}.log"):
            for i in range(50):
                print(f"{name} {i}")
                logging.getLogger(f"lib.{name}").warning("record of %s", name)

    with stagelog.capture(tmp_path / "build.log"):
        threads = [threading.Thread(target=stage, args=(n,)) for n in ("a", "b")]
        helper = threading.Thread(target=lambda: print("from a helper thread"))
        for t in [*threads, helper]:
            t.start()
        for t in [*threads, helper]:
            t.join()
    a, b = ((tmp_path / f"{n}.log").read_text() for n in ("a", "b"))
    assert "a 49" in a and "record of a" in a and "b 0" not in a and "record of b" not in a
    assert "b 49" in b and "a 0" not in b
    assert "from a helper thread" in (tmp_path / "build.log").read_text()


def test_verbose_echoes_everything_and_a_childs_output_is_streamed_and_scanned(tmp_path: Path) -> None:
    echo = io.StringIO()
    stagelog.echo(echo)
    try:
        with stagelog.capture(tmp_path / "stage.log") as log:
            print("in process")
            script = f"import sys; print('child says'); print({MISTRAL!r}, file=sys.stderr)"
            text = run_logged([sys.executable, "-c", script], tmp_path / "convert.log", "convert")
    finally:
        stagelog.echo(None)
    assert "in process" in echo.getvalue() and "child says" in echo.getvalue()
    assert "child says" in text and "child says" in (tmp_path / "convert.log").read_text()
    assert log.notices == [NOTABLE[0].say]


def test_a_failed_stages_logs_are_kept_and_the_error_says_where(tmp_path: Path) -> None:
    entry = tmp_path / ".key.partial"
    entry.mkdir()
    (entry / "convert.log").write_text("Traceback: the converter's last words\n")
    error = StageError("convert", "failed with exit code 1", f"full log: {entry / 'convert.log'}")
    stagelog.keep(error, tmp_path / "logs" / "convert-abc", {"convert.log": entry / "convert.log"}, was=entry)
    assert (tmp_path / "logs" / "convert-abc" / "convert.log").read_text().startswith("Traceback")
    assert error.hint == f"full log: {tmp_path / 'logs' / 'convert-abc' / 'convert.log'}"


def test_every_notable_pattern_matches_the_text_it_was_written_for() -> None:
    samples = [
        MISTRAL,
        "The sentencepiece tokenizer that you are converting to a fast tokenizer uses the byte fallback option "
        "which is not implemented in the fast tokenizers.",
        "Some weights of LlamaForCausalLM were not initialized from the model checkpoint at /m and are newly",
        "warning: blk.0.attn_k.weight - ncols    576 not divisible by 256 (required for type    q5_K) -> falling "
        "back to    q5_1",
    ]
    assert [notable(s) for s in samples] == [[n.say] for n in NOTABLE]
    assert notable("`torch_dtype` is deprecated! Use `dtype` instead!") == []  # noise stays in the log
