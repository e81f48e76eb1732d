"""Which engine a callable already is, the batch size of a call, and bad arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import gpulens.torch as gt  # noqa: E402
from gpulens.errors import ConfigError  # noqa: E402
from gpulens.torch.engines import detect  # noqa: E402
from gpulens.torch.inference import batch_of  # noqa: E402


def test_detect_eager_and_compiled() -> None:
    model = torch.nn.Linear(4, 2)
    assert detect(model) == "eager"
    assert detect(torch.compile(model)) == "compile"  # built lazily: nothing compiles here
    assert detect(lambda x: x) == "eager"


def test_batch_is_the_first_dimension_of_the_first_tensor() -> None:
    x = torch.zeros(7, 3)
    assert batch_of((x,), {}) == 7.0
    assert batch_of(("text", x), {}) == 7.0
    assert batch_of((), {"input_ids": torch.zeros(5, 9)}) == 5.0
    assert batch_of((torch.tensor(1.0),), {}) == 1.0  # a scalar is one sample
    assert batch_of(("no tensor",), {}) is None


def test_a_detected_engine_is_not_rebuilt_and_a_declared_batch_wins(tmp_path: Path) -> None:
    compiled = torch.compile(torch.nn.Linear(4, 2))
    infer = gt.inference(compiled, job="d", data_dir=tmp_path, batch_size=32)
    assert infer.engine == "compile" and infer._fn is compiled
    assert infer.batch_size == 32
    infer.close()


def test_an_unknown_engine_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="engine must be one of eager, compile, tensorrt"):
        gt.inference(torch.nn.Linear(4, 2), job="d", engine="tvm", data_dir=tmp_path)
