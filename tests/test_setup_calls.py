"""Which top-level calls of a cell look like set-up (seeds, configuration, registration), by the called name alone."""

from __future__ import annotations

import pytest

from durable_nb.notebook.cellcode import analyze

SET_UP = [
    "np.random.seed(0)",
    "torch.manual_seed(1)",
    "sklearn.set_config(assume_finite=True)",
    "plt.style.use('ggplot')",
    "logging.basicConfig(level=10)",
    "tf.config.experimental.enable_op_determinism()",
    "warnings.disable_warnings()",
    "plt.ion()",
    "load_dotenv()",
    "os.putenv('A', '1')",
    "register_dataset('x')",
    "init()",
    "setup_logging()",
    "reconfigure()",
    "logger.setLevel(10)",
]
NOT_SET_UP = ["model.fit(X)", "set_()", "user()", "plt.show()", "reset()", "print(x)", "Seed()"]


@pytest.mark.parametrize("call", SET_UP)
def test_a_call_named_as_set_up_is_noted(call: str) -> None:
    """The call's dotted name and text are noted, not conditional at the top level."""
    (noted,) = analyze(call).setting_calls
    assert noted.text == call and noted.path == call.split("(", 1)[0] and not noted.conditional


@pytest.mark.parametrize("call", NOT_SET_UP)
def test_other_calls_are_not_noted(call: str) -> None:
    """Work, display and names that only look alike ('set_' alone, 'user', 'reset') are not set-up."""
    assert analyze(call).setting_calls == []
